"""Stop a locked command's ``handle()`` when its lease is lost or the process is told to stop.

How a lost lease reaches ``handle()``: the lease is renewed by distlock's renewer thread.
When a renewal finds the lease gone, ``on_lost`` runs in that thread and sends ``SIGUSR1``
to the main thread (``signal.pthread_kill``). A real signal, unlike
``_thread.interrupt_main()``, also interrupts a blocking system call: ``time.sleep()``,
a socket read or ``select()`` fail with EINTR, Python runs the handler installed here, and
the handler raises :class:`CommandLockLost` in the main thread, where ``handle()`` runs.
SIGTERM and SIGINT raise :class:`CommandInterrupted` the same way.

Limits, by the nature of signals in Python:
- The exception is raised between two bytecodes of the main thread. Code in C that does not
  return to the interpreter (a long computation in an extension, a client library that
  retries EINTR itself, e.g. a database driver waiting for a query) is interrupted only when
  it returns.
- ``handle()`` must run in the main thread (it does under ``manage.py``). Elsewhere (e.g.
  ``call_command`` from another thread) no handler can be installed: the lost lease is then
  reported only when ``handle()`` returns.
- ``CommandLockLost`` is an ``Exception`` (a ``LockLost``): a broad ``except Exception`` in
  the command can swallow it. The command still exits with an error when ``handle()``
  returns, because the guard remembers the loss (and, in ``interrupted``, that it told
  ``handle()``). ``CommandInterrupted`` derives from ``KeyboardInterrupt`` so that
  ``except Exception`` does not swallow a stop request.
- While ``handle()`` runs, SIGUSR1 belongs to the guard; the previous handlers of SIGUSR1,
  SIGTERM and SIGINT are restored afterwards.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from ..exceptions import LockLost

LOST_SIGNAL: int = getattr(signal, "SIGUSR1", 0)  # 0: none on this platform
STOP_SIGNALS: tuple[int, ...] = tuple(
    signum for signum in (getattr(signal, "SIGTERM", 0), signal.SIGINT) if signum
)
# Signals can only be delivered to a chosen thread where pthread_kill exists (not Windows).
CAN_TARGET_THREADS = bool(LOST_SIGNAL) and hasattr(signal, "pthread_kill")
# Why a lease is lost, for the messages that report it.
LOST_CAUSES = (
    "its lease was force-released, ran out while the process was paused or was too short, "
    "or vanished when the lock server restarted empty, or the lock server was unreachable "
    "for longer than the lease"
)


class CommandLockLost(LockLost):
    """Raised in the command's main thread: the lease was lost while ``handle()`` ran."""


class CommandInterrupted(KeyboardInterrupt):
    """Raised in the command's main thread: SIGTERM or SIGINT arrived while ``handle()`` ran."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class CommandGuard:
    """Own the signal handlers while a locked command runs, and remember what happened.

    Use ``installed()`` around acquiring-to-releasing, so that no stop signal between the
    grant and ``handle()``, or during the release, kills the process with the lock held;
    ``waiting()`` around acquiring and ``running()`` around ``handle()``: only inside those
    are exceptions raised (elsewhere a stop signal is recorded, and acted on afterwards).
    """

    def __init__(self, lock_name: str) -> None:
        self.lock_name = lock_name
        self.lost = threading.Event()
        self.interrupted = False  # CommandLockLost was raised in handle()
        self.stop_signal: int | None = None
        self.reason: str | None = None  # why the lease was lost, as the lock tells it
        self._running = False
        self._waiting = False
        self._installed = False
        self._previous: dict[int, Any] = {}
        self._mutex = threading.Lock()  # orders lease_lost()'s pthread_kill against uninstall

    def lease_lost(self, lock: object = None) -> None:
        """The ``on_lost`` callback (runs in the renewer thread): interrupt the main thread."""
        self.reason = getattr(lock, "lost_reason", None)
        self.lost.set()
        with self._mutex:
            if self._installed and self._running:
                signal.pthread_kill(threading.main_thread().ident or 0, LOST_SIGNAL)

    @contextlib.contextmanager
    def installed(self) -> Iterator[CommandGuard]:
        self._install()
        try:
            yield self
        finally:
            self._uninstall()

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Raise CommandInterrupted at once when a stop signal arrives (waiting for the lock
        must end promptly); the lease cannot be lost yet, so SIGUSR1 is not watched."""
        self._waiting = True
        try:
            yield
        finally:
            self._waiting = False

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Raise at once, from here on, when the lease is lost or a stop signal arrives."""
        self._running = True
        try:
            # What happened before this point was only recorded.
            if self.lost.is_set():
                self.interrupted = True
                raise self.lost_error()
            if self.stop_signal is not None:
                raise CommandInterrupted(self.stop_signal)
            yield
        finally:
            self._running = False

    def lost_error(self) -> CommandLockLost:
        return CommandLockLost(
            f"Lost the lock {self.lock_name!r} while the command ran ({LOST_CAUSES}); "
            f"stopped so that no second copy runs alongside.{self.why()}",
            name=self.lock_name,
        )

    def why(self) -> str:
        """The lock's own account of the loss (its cause and what to do), after a space."""
        return f" {self.reason}" if self.reason else ""

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        signals = (*STOP_SIGNALS, LOST_SIGNAL) if CAN_TARGET_THREADS else STOP_SIGNALS
        for signum in signals:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        with self._mutex:
            self._installed = CAN_TARGET_THREADS

    def _uninstall(self) -> None:
        with self._mutex:
            self._installed = False  # lease_lost() sends nothing from now on
        if not self._previous:
            return
        lost_signal = {LOST_SIGNAL} if CAN_TARGET_THREADS else set()
        # A SIGUSR1 sent just before may still be pending. Restoring SIG_DFL first would let it
        # terminate the process: block it, consume it, then restore.
        if lost_signal:
            signal.pthread_sigmask(signal.SIG_BLOCK, lost_signal)
        try:
            if lost_signal and LOST_SIGNAL in signal.sigpending():
                signal.sigwait(lost_signal)
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)
        finally:
            if lost_signal:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, lost_signal)
            self._previous = {}

    def _on_signal(self, signum: int, frame: object) -> None:
        if signum == LOST_SIGNAL:
            if self._running and self.lost.is_set():
                self._running = False  # interrupt once; later signals are only recorded
                self.interrupted = True
                raise self.lost_error()
            previous = self._previous.get(signum)
            if callable(previous):  # e.g. the guard of a locked command that called this one
                previous(signum, frame)
            return  # not ours, or handle() is not running: the loss is reported afterwards
        self.stop_signal = signum
        if self._running or self._waiting:
            self._running = self._waiting = False
            raise CommandInterrupted(signum)
