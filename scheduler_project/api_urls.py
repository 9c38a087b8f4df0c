"""Routes of the /v1 API (filled in by the API issue)."""

urlpatterns = []
