"""Errors kept as values, without the reference cycles that would keep sockets open.

An exception's traceback holds every frame it passed through, and each of those frames holds
its caller (``f_back``) and its local variables. So an exception that a frame keeps, in a
local variable or in a list of results, is in a reference cycle with that frame. Reference
counting can never free a cycle: the frames, and the backend, clients and sockets they hold,
live on until the garbage collector runs. The collector finalises a cycle's objects in no set
order, so it can reach a socket before the redis-py connection that would have closed it,
and Python warns of an unclosed socket (a ResourceWarning; an error under ``-W error``).

Two rules keep distlock's errors out of cycles:

- an error kept as a value (a node's failure among a fan-out's results) is ``detached()``
  from its tracebacks first;
- a frame that raises an error it holds in a local variable deletes that variable as the
  error leaves (``try: raise error`` / ``finally: del error``), as redis-py and the standard
  library do.
"""

from __future__ import annotations

from typing import TypeVar

E = TypeVar("E", bound=BaseException)


def detached(error: E) -> E:
    """Return ``error`` with its traceback, and those of its cause and context, dropped.

    The type and message (what callers read) stay; the frames that raised it are let go.
    """
    pending: list[BaseException | None] = [error]
    seen: set[int] = set()
    while pending:
        link = pending.pop()
        if link is None or id(link) in seen:
            continue
        seen.add(id(link))
        link.__traceback__ = None
        pending += (link.__cause__, link.__context__)
    return error
