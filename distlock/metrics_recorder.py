"""Hand metric points to the OpenTelemetry SDK off the caller's path (docs/observing.md).

The SDK spends several microseconds of CPU on every point (it validates and hashes the
attributes and takes the aggregation's lock), twice per acquire+release: a sizeable share of
an uncontended pair on a local Redis. So a lock only appends (instrument method, value,
attributes, context) to a queue, and one daemon thread per process makes the SDK calls,
mostly while the callers wait on Redis with the GIL released. The caller's context is passed
along, so that the SDK's exemplars still see the caller's span.

- Bounded: past MAX_PENDING points waiting, new ones are dropped and counted (``dropped``).
- flush() waits until every point submitted before it was handed to the SDK: call it before
  reading a reader (tests, a scrape in the same thread right after a lock).
- Fork: before a fork the queue is drained and the thread stopped (so that no SDK lock is
  held by a thread the child will not have); either side starts a thread again on its next
  point.
- Exit: an atexit handler drains the queue; it is registered when a thread starts (and again
  by metrics.use()), after the SDK's MeterProvider registered its own shutdown, so it runs
  before that shutdown (atexit runs the last registered first).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("distlock")

# Points waiting at most (a few MB): reached only if the SDK stalls or the process records
# faster than the SDK can take, for seconds on end.
MAX_PENDING = 10_000
# How long the exit handler waits for the queue to drain.
EXIT_TIMEOUT = 5.0

Record = Callable[[Any, Any, Any], object]  # an instrument's record() or add()


class Recorder:
    """A queue of points and the thread that hands them to the SDK."""

    def __init__(self) -> None:
        self._pending: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._mutex = threading.Lock()
        self._hooked = False
        self._context: Callable[[], Any] = lambda: None  # opentelemetry's get_current
        self.dropped = 0  # points dropped because MAX_PENDING were waiting

    def submit(self, record: Record, value: float, attributes: Any) -> None:
        """Queue ``record(value, attributes, context)``, with the caller's context."""
        if self._thread is None:
            self._start()
        if self._pending.qsize() >= MAX_PENDING:
            self.dropped += 1  # racy under threads by one or two: a count, not an invariant
            return
        self._pending.put((record, value, attributes, self._context()))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the points submitted so far were handed to the SDK; False on timeout."""
        if self._thread is None:
            return True
        done = threading.Event()
        self._pending.put(done)
        return done.wait(timeout)

    def _start(self) -> None:
        with self._mutex:
            if self._thread is not None:
                return
            if not self._hooked and hasattr(os, "register_at_fork"):
                os.register_at_fork(
                    before=self._before_fork,
                    after_in_parent=self._mutex.release,
                    after_in_child=self._after_fork_in_child,
                )
            self._hooked = True
            from opentelemetry.context import get_current  # only once a point is recorded

            self._context = get_current
            self.register_exit()
            self._thread = threading.Thread(
                target=self._run, args=(self._pending,), name="distlock-metrics", daemon=True
            )
            self._thread.start()

    def _run(self, pending: queue.SimpleQueue[Any]) -> None:
        while True:
            item = pending.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            record, value, attributes, context = item
            try:
                record(value, attributes, context)
            except Exception:  # a broken exporter must not stop every later point
                logger.exception("distlock: recording a metric failed")

    def stop(self, timeout: float | None = None) -> None:
        """Hand every waiting point to the SDK, then end the thread (a later point starts
        another). Not under self._mutex: the at-fork hook holds it."""
        thread = self._thread
        if thread is None:
            return
        self._pending.put(None)
        thread.join(timeout)  # (a thread still running past it ends on the None)
        self._thread = None

    def _before_fork(self) -> None:
        self._mutex.acquire()  # released by after_in_parent, replaced in the child
        self.stop(EXIT_TIMEOUT)

    def _after_fork_in_child(self) -> None:
        # The queue is empty (stopped before the fork) and the thread was the parent's.
        self._mutex = threading.Lock()
        self._pending = queue.SimpleQueue()
        self._thread = None

    def register_exit(self) -> None:
        """(Re-)register the exit drain, so that it runs before the atexit handlers
        registered so far (the SDK's MeterProvider shutdown among them)."""
        atexit.unregister(self._drain_at_exit)
        atexit.register(self._drain_at_exit)

    def _drain_at_exit(self) -> None:
        self.stop(EXIT_TIMEOUT)
