"""/v1/dlq routes."""

from django.urls import re_path

from dlq.api import views

LETTER = r"(?P<letter_id>[0-9]{1,18})"

urlpatterns = [
    re_path(r"^dlq$", views.DeadLetterListView.as_view(), name="api-dlq"),
    re_path(r"^dlq:replay$", views.DeadLetterBulkReplayView.as_view(), name="api-dlq-replay-many"),
    re_path(r"^dlq:discard$", views.DeadLetterBulkDiscardView.as_view(), name="api-dlq-discard-many"),
    re_path(rf"^dlq/{LETTER}:replay$", views.DeadLetterReplayView.as_view(), name="api-dlq-replay"),
    re_path(rf"^dlq/{LETTER}:discard$", views.DeadLetterDiscardView.as_view(), name="api-dlq-discard"),
]
