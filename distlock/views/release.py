"""When a view's lock is released: as the view returns, or when its streamed response ends.

A streaming response's body is produced after the view has returned, often by the very code
the lock protects, so its lock is held until the stream is exhausted or closed: its content is
wrapped in an iterator that releases at the end, and whose ``close()`` Django registers with
the response (servers close every response, also when the client went away mid-stream). If a
response is dropped without being closed (a sync view under ASGI whose client disconnected
before the view returned), the lock is released when the response is garbage-collected, and
in any case when its lease ends.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any, Generic, TypeVar

from ..exceptions import LockError, LockNotOwned
from ..lock import Lock

logger = logging.getLogger("distlock")
C = TypeVar("C")


class LockRelease:
    """Release one view's lock exactly once, logging (never raising) a failure.

    By then the response exists: a payment that went through must not turn into an error
    because Redis went away, and the lease ends the lock anyway.
    """

    def __init__(self, lock: Lock) -> None:
        self.lock = lock
        self._done = False
        self._guard = threading.Lock()

    def _claim(self) -> bool:
        with self._guard:
            done, self._done = self._done, True
            return not done

    # unasync: the async source of the sync code after it
    async def arelease(self) -> None:
        if self._claim():
            try:
                await self.lock.arelease()
            except LockError as exc:
                self._report(exc)

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def release(self) -> None:
        if self._claim():
            try:
                self.lock.release()
            except LockError as exc:
                self._report(exc)

    # unasync: end

    def _report(self, exc: LockError) -> None:
        if isinstance(exc, LockNotOwned):  # its message says why, and what to do for that
            logger.warning(
                "lock_view: the lease on %r ended before its view finished, so another request "
                "may have run at the same time. %s",
                self.lock.name,
                exc,
            )
        else:
            logger.warning(
                "lock_view: could not release %r (%s); it ends with its lease.", self.lock.name, exc
            )

    # unasync: the async source of the sync code after it
    async def aafter(self, response: Any) -> Any:
        """Release now, or, for a streaming response, when its stream ends."""
        if getattr(response, "streaming", False):
            self._hold_until_streamed(response)
        else:
            await self.arelease()
        return response

    # Generated from the async source above by scripts/unasync.py: do not edit; run `make generate`.
    def after(self, response: Any) -> Any:
        """Release now, or, for a streaming response, when its stream ends."""
        if getattr(response, "streaming", False):
            self._hold_until_streamed(response)
        else:
            self.release()
        return response

    # unasync: end

    def _hold_until_streamed(self, response: Any) -> None:
        content = response.streaming_content
        if getattr(response, "is_async", False):
            response.streaming_content = _AsyncReleasingContent(content, self)
        else:
            response.streaming_content = _ReleasingContent(content, self)
        weakref.finalize(response, self.release).atexit = False


class _Releasing(Generic[C]):
    """A streaming response's content, ``C``, and the release to call when it ends or is
    closed: what the sync and the async iterator below hold alike."""

    def __init__(self, content: C, release: LockRelease) -> None:
        self._content = content
        self._release = release


class _ReleasingContent(_Releasing[Iterator[bytes]]):
    """A streaming response's content that releases the lock when it ends or is closed."""

    def __iter__(self) -> _ReleasingContent:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._content)
        except BaseException:  # exhausted (StopIteration), failed, or interrupted
            self.close()
            raise

    def close(self) -> None:
        self._release.release()


# Apart from _ReleasingContent, on purpose: one class cannot be both a sync and an async
# iterator that Django streams (it picks the protocol by what the content has), and a generator
# would not release the lock when closed before its first item.
class _AsyncReleasingContent(_Releasing[AsyncIterator[bytes]]):
    """Async twin of _ReleasingContent, for async iterators (served under ASGI)."""

    def __aiter__(self) -> _AsyncReleasingContent:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._content.__anext__()
        except BaseException:  # exhausted, failed, or cancelled (client went away)
            await self.aclose()
            raise

    async def aclose(self) -> None:
        close = getattr(self._content, "aclose", None)
        try:
            if close is not None:
                await close()
        finally:
            await self._release.arelease()

    def close(self) -> None:
        # Django calls this from response.close(), in a worker thread under ASGI.
        self._release.release()
