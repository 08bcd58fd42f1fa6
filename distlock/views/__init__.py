"""``@lock_view`` and what it answers: the view surface of distlock.

    decorators  lock_view: names, takes and releases a view's lock
    names       the request's values in a lock name ({user}, a callable's name)
    release     when a view's lock is released (at return, or when a stream ends)
    responses   the 409 and 503 answers (LockContended, LockFenced, LockServiceUnavailable)

It uses the lock core (distlock.lock, ...) and distlock.naming, never the other way round.
"""

from .decorators import DEFAULT_METHODS, lock_view
from .responses import LockContended, LockFenced, LockServiceUnavailable, wants_json

__all__ = [
    "DEFAULT_METHODS",
    "LockContended",
    "LockFenced",
    "LockServiceUnavailable",
    "lock_view",
    "wants_json",
]
