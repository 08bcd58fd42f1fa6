"""``@lock_view`` under ``ATOMIC_REQUESTS``: the lock is taken before the request's
transaction begins and released after it ends, and a 409 opens no transaction.

Django wraps a view in ``transaction.atomic()`` (``BaseHandler.make_view_atomic``) unless the
view's ``_non_atomic_requests`` names the alias, and it does so outside every decorator. So a
locked view tells Django that it opens those transactions itself (:class:`RequestTransactions`
answers "yes" to every alias), and opens them inside its lock, for the aliases Django would
have: those with ``ATOMIC_REQUESTS`` that the view itself does not mark non-atomic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.db import connections, transaction

from ..transactions import open_transactions


class RequestTransactions(set[str]):
    """A locked view's ``_non_atomic_requests``: to Django, every alias (so Django opens no
    transaction around the lock); its members are the aliases the view itself marked with
    ``transaction.non_atomic_requests``, for which distlock opens none either."""

    def __init__(self, marked: Iterable[str] = ()) -> None:
        super().__init__(marked)

    def __contains__(self, alias: object) -> bool:
        return True

    def run(self, view: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``view`` inside the request's transactions.

        Plain nested ``with`` blocks, not an ExitStack: an ExitStack keeps the exception it
        passes on in its frame, a reference cycle that kept a failed request's traceback (and
        all it refers to) alive until the garbage collector ran.
        """
        already = {conn.alias for conn in open_transactions()}
        # Django wraps the view once per alias, in settings order: the last is outermost.
        aliases = [
            alias
            for alias, settings_dict in reversed(list(connections.settings.items()))
            if settings_dict.get("ATOMIC_REQUESTS")
            and not set.__contains__(self, alias)
            and alias not in already
        ]
        return _inside(aliases, view, args, kwargs)


def _inside(aliases: list[str], view: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    if not aliases:
        return view(*args, **kwargs)
    with transaction.atomic(using=aliases[0]):
        return _inside(aliases[1:], view, args, kwargs)


def request_transactions(view: Any) -> RequestTransactions:
    """Return the transactions a locked sync view opens, from what ``view`` is marked with."""
    marked = getattr(view, "_non_atomic_requests", ())
    if isinstance(marked, RequestTransactions):
        return marked
    return RequestTransactions(marked)
