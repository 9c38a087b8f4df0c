"""RFC 9457 problem details for every API error (filled in by the API issue)."""

from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    return drf_exception_handler(exc, context)
