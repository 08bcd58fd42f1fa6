"""What ``lock_view`` answers instead of running a view.

Shaped like Django REST framework's ``APIException``: each answer is a class with
``status_code`` and ``default_detail``; an instance is a callable ``(request, exc) ->
HttpResponse``, so ``on_locked=LockContended("Payment already in progress.")`` changes the text
and a subclass can change anything else. The body is JSON (``{"detail": ..., "lock": ...}``)
for clients whose Accept header names JSON, a short plain text otherwise.
"""

from __future__ import annotations

import math
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from ..exceptions import LockError, LockNotAcquired


def wants_json(request: HttpRequest) -> bool:
    """Return True if the Accept header names application/json or a +json type explicitly.

    Wildcards (``*/*``, ``application/*``) do not count: a browser sends them and should get
    text. A type refused with ``q=0`` does not count either.
    """
    for item in request.headers.get("Accept", "").split(","):
        media_type, *parameters = item.split(";")
        media_type = media_type.strip().lower()
        if media_type != "application/json" and not (
            media_type.startswith("application/") and media_type.endswith("+json")
        ):
            continue
        if not any(_refused(parameter) for parameter in parameters):
            return True
    return False


def _refused(parameter: str) -> bool:
    key, _, value = parameter.partition("=")
    if key.strip().lower() != "q":
        return False
    try:
        return float(value) == 0
    except ValueError:
        return False


def retry_after(exc: LockNotAcquired) -> int:
    """Return the whole seconds until the holder's lease ends (at least 1)."""
    holder = exc.holder
    if holder is None:  # released meanwhile, or unknown: try again soon
        return 1
    return max(1, math.ceil(holder.ttl_remaining))


class LockViewResponse:
    """An answer given instead of the view's own; subclasses set the class attributes."""

    status_code: int = 500
    default_detail: str = "The request could not be processed."

    def __init__(self, detail: str | None = None) -> None:
        self.detail = detail or self.default_detail

    def __call__(self, request: HttpRequest, exc: LockError) -> HttpResponse:
        if wants_json(request):
            response: HttpResponse = JsonResponse(
                {"detail": self.detail, "lock": self.lock_data(exc)}, status=self.status_code
            )
        else:
            response = HttpResponse(
                self.detail + "\n",
                content_type="text/plain; charset=utf-8",
                status=self.status_code,
            )
        for header, value in self.headers(exc).items():
            response[header] = value
        return response

    def lock_data(self, exc: LockError) -> dict[str, Any]:
        """Return what the JSON body says about the lock (never who holds it)."""
        return {"name": exc.name}

    def headers(self, exc: LockError) -> dict[str, str]:
        return {}


class LockContended(LockViewResponse):
    """409 Conflict: the same request is being processed; Retry-After says when to retry."""

    status_code = 409
    default_detail = "This request is already in progress. Try again when it has finished."

    def lock_data(self, exc: LockError) -> dict[str, Any]:
        assert isinstance(exc, LockNotAcquired)
        holder = exc.holder
        return {
            "name": exc.name,
            "retry_after": retry_after(exc),
            "expires_at": holder.expires_at.isoformat() if holder is not None else None,
        }

    def headers(self, exc: LockError) -> dict[str, str]:
        assert isinstance(exc, LockNotAcquired)
        return {"Retry-After": str(retry_after(exc))}


class LockServiceUnavailable(LockViewResponse):
    """503 Service Unavailable: the lock server cannot be reached, so the view did not run.
    ``Retry-After`` says when to try again (``retry_after`` seconds)."""

    status_code = 503
    default_detail = (
        "The lock service is unavailable, so this request was not processed. Try again later."
    )
    retry_after = 5  # seconds: a lock server's restart or failover, typically

    def lock_data(self, exc: LockError) -> dict[str, Any]:
        return {"name": exc.name, "retry_after": self.retry_after}

    def headers(self, exc: LockError) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class LockFenced(LockViewResponse):
    """409 Conflict: the view's transaction was refused and rolled back (``fence=True``): its
    lease had ended and a newer request holding the lock had claimed it, so nothing this
    request did was saved."""

    status_code = 409
    default_detail = (
        "This request took too long and another one took it over; nothing was saved. Check "
        "the result before trying again."
    )
