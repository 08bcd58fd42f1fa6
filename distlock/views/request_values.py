"""The values of a view's lock name that come from the request: ``{user}``, and the name a
callable gives."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from asgiref.sync import sync_to_async

from ..exceptions import InvalidLockName
from ..keys import validate_name
from ..naming import digest, escape


def user_value(user: Any, request: Any) -> str:
    """Return ``{user}``: the authenticated user's pk, else the session, else the address.

    Each kind has its own prefix, so a user pk can never equal a session or an address. The
    session key is hashed: lock names are shown to operators and sent to clients, and a
    session key is a credential.
    """
    if user is not None and getattr(user, "is_authenticated", False):
        return "user" + escape(user.pk)
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        return "session" + hashlib.sha256(session_key.encode()).hexdigest()[:32]
    return "ip" + escape(request.META.get("REMOTE_ADDR") or "")


async def auser_value(request: Any) -> str:
    """Async twin of user_value(request.user, request)."""
    # request.user would load the session synchronously; Django >= 5.0 gives async views
    # auser(), and before that the sync lookup must run in a thread.
    auser = getattr(request, "auser", None)
    if auser is not None:
        return user_value(await auser(), request)
    user = getattr(request, "user", None)
    if user is None:  # no authentication middleware
        return user_value(None, request)
    return await sync_to_async(user_value)(user, request)


def callable_name(
    name: Callable[..., str], request: Any, args: Sequence[Any], kwargs: dict[str, Any], where: str
) -> str:
    """Return the name a callable gives; one unfit for a lock (empty, too long, control
    characters) is replaced by its digest rather than failing the request."""
    value = name(request, *args, **kwargs)
    if not isinstance(value, str):
        raise TypeError(
            f"{where}: the lock_view name callable must return a str, not {type(value).__name__}."
        )
    try:
        return validate_name(value)
    except InvalidLockName:
        return digest(value)
