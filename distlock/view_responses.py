"""The old import path of ``@lock_view``'s answers, kept working: they live in
distlock.views.responses (``from distlock.views import LockContended``)."""
from .views.responses import LockContended, LockServiceUnavailable, wants_json

__all__ = ["LockContended", "LockServiceUnavailable", "wants_json"]
