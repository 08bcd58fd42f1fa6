"""``manage.py distlock lead NAME -- COMMAND ARGS...``: run COMMAND only while this process
leads NAME (distlock.leader), e.g. one ``celery beat`` among several hosts.

On every host the command waits to be elected, then starts COMMAND as a child process.
- Leadership lost (force-released or taken over; a look at the lock server every WATCH
  seconds sees it, or a renewal finds the lease gone): the child gets SIGTERM at once, and
  SIGKILL after the grace period; then the host campaigns again, and starts a new child
  under its new term, even when it is elected again at once (no other host waiting).
- Renewals failing (the lock server unreachable): the child gets SIGTERM once only a third
  of the lease is left, and SIGKILL when the lease ends by this host's clock at the latest,
  so it never outlives the lease it ran under.
- The child exits: the leadership is given up and the command exits with the child's status
  (128 + N if a signal N ended it).
- Waiting to lead: one line on stderr says so, naming the current leader (host, pid).
- SIGTERM or SIGINT: the child is stopped the same way, the leadership given up, and the
  command exits with 128 + the signal's number. While waiting to lead, it says that it was
  interrupted while waiting and no command was started (the same exit status).
- This host killed (SIGKILL): on Linux the child is killed with it (PR_SET_PDEATHSIG) and
  the others take over when the lease ends; elsewhere the child is left running.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from ..exceptions import LockError
from ..handler import locks
from ..info import shorten
from ..leader import Leader

POLL = 0.05  # seconds between two looks at the child and the leadership
# Seconds between two questions to the lock server, while a child runs: does this term still
# hold the lock? A force release is seen within this, not only at the next renewal (a third
# of the lease later), when the campaign may already have won the lock again under a new term.
WATCH = 0.1
PR_SET_PDEATHSIG = 1
CANNOT_RUN_EXIT_CODE = 127  # what shells answer for a command that cannot be run


class LeadRun:
    """One ``distlock lead`` run; ``run()`` returns the exit status."""

    def __init__(
        self,
        name: str,
        command: list[str],
        *,
        ttl: float | None,
        grace: float,
        using: str,
        say: Callable[[str], None],
    ) -> None:
        self.command = command
        self.grace = grace
        self.say = say
        self.stop_signal: int | None = None
        self.started = False  # a child was started (in any term)
        self.lost_term: int | None = None  # the term whose child was stopped for its loss
        self.leader = Leader(
            name,
            ttl=ttl,
            using=using,
            purpose=shorten(f"leader of {name}: {shlex.join(command)}", 200),
        )

    def run(self) -> int:
        with self._signals_recorded(), self.leader:
            while True:
                if not self._wait_elected():
                    raise self._interrupted_while_waiting()
                status = self._lead()
                if status is not None:
                    return status

    def _wait_elected(self) -> bool:
        """Wait until the child may run (see _may_run); False if told to stop first. Say
        once, unless elected at once, that this host waits, and for whom."""
        told = False
        while self.stop_signal is None:
            if self.leader.wait_elected(POLL * 4):
                if self._may_run():
                    return True
                time.sleep(POLL)  # elected, but the lease is running out: not for long
            elif not told:
                self.say(self._waiting_line())
                told = True
        return False

    def _waiting_line(self) -> str:
        name = self.leader.name
        try:
            leader = locks[self.leader.using].info(name)
        except LockError:
            leader = None
        who = (
            "the leader is not known yet"
            if leader is None
            else f"{leader.host} pid {leader.pid} leads it (term {leader.fencing_token})"
        )
        return f"Waiting to lead {name!r}: {who}; the command starts once this process leads."

    def _interrupted_while_waiting(self) -> CommandError:
        signum = self.stop_signal or signal.SIGINT
        status = (
            "no command was started"
            if not self.started
            else "the command is not running (it was stopped when the leadership was lost)"
        )
        return CommandError(
            f"distlock lead {self.leader.name!r}: interrupted by {signal.Signals(signum).name} "
            f"while waiting to lead; {status}.",
            returncode=128 + signum,
        )

    def _lead(self) -> int | None:
        """Run the child while leading; return the exit status, or None to campaign again."""
        name, term = self.leader.name, self.leader.term
        assert term is not None  # elected
        try:
            child = subprocess.Popen(self.command, preexec_fn=_die_with_parent(os.getpid()))
        except OSError as exc:  # not found, not executable: as a shell would say it
            self.say(
                f"Cannot run {shlex.join(self.command)}: {exc}; giving up the leadership "
                f"of {name!r}."
            )
            return CANNOT_RUN_EXIT_CODE
        self.started = True
        self.say(
            f"Leading {name!r} (term {term}): started {shlex.join(self.command)} (pid {child.pid})."
        )
        with _TermWatch(self.leader, term) as watch:
            while (
                child.poll() is None
                and self.stop_signal is None
                and not watch.lost.is_set()
                and self._may_run()
            ):
                time.sleep(POLL)
        if child.poll() is None:
            if self.stop_signal is not None:
                self.say(f"Stopping ({name!r}, term {term}): stopping pid {child.pid}.")
                self._stop(child, whole_grace=True)
                return 128 + self.stop_signal
            gone = watch.lost.is_set() or self.leader.term != term
            self.say(
                f"Lost the leadership ({name!r}, term {term}): stopping pid {child.pid}; "
                "a new child starts once this process leads again, under a new term."
            )
            self.lost_term = term
            self._stop(child, whole_grace=gone)
            return None
        status = child.returncode if child.returncode >= 0 else 128 - child.returncode
        self.say(
            f"The child pid {child.pid} exited with status {status}; giving up the "
            f"leadership of {name!r}."
        )
        return status

    def _may_run(self) -> bool:
        """Return True while the child may go on: leading, in a term whose child was not
        stopped for its loss, with more than a third of the lease left (renewals keep it
        above two thirds)."""
        return (
            self.leader.is_leader
            and self.leader.term != self.lost_term
            and self.leader.lease_left() > self.leader.lease / 3
        )

    def _stop(self, child: subprocess.Popen[bytes], *, whole_grace: bool) -> None:
        """SIGTERM, then SIGKILL after the grace period. While the lease still runs (the
        renewals are failing) SIGKILL comes by its end at the latest, so that the child
        never outlives it; once it is gone (or ran out), or on a stop signal
        (``whole_grace``), the whole grace applies."""
        child.send_signal(signal.SIGTERM)
        lease_left = 0.0 if whole_grace else self.leader.lease_left()
        patience = self.grace if lease_left <= 0 else min(self.grace, lease_left)
        try:
            child.wait(timeout=patience)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    @contextmanager
    def _signals_recorded(self) -> Iterator[None]:
        """Record SIGTERM and SIGINT (acted on by the loops) instead of dying of them."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def record(signum: int, frame: Any) -> None:
            self.stop_signal = signum

        previous = {
            signum: signal.signal(signum, record) for signum in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


class _TermWatch:
    """While entered, ask the lock server every WATCH seconds whether ``term`` still holds
    the leader's lock; ``lost`` is set once it does not (released, or another term holds
    it). In a thread of its own, so that a round trip to an unreachable server never delays
    the look at the lease (that case is the lease's: renewals failing)."""

    def __init__(self, leader: Leader, term: int) -> None:
        self.leader = leader
        self.term = term
        self.lost = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, daemon=True, name=f"distlock-lead watch {leader.name}"
        )

    def __enter__(self) -> _TermWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()  # not joined: a round trip may hang until the socket timeout

    def _watch(self) -> None:
        backend = locks[self.leader.using]
        while not self._done.wait(WATCH):
            try:
                holder = backend.info(self.leader.name)
            except LockError:  # unreachable: the lease decides (see _may_run)
                continue
            if holder is None or holder.fencing_token != self.term:
                self.lost.set()
                return


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """Return what the child runs before exec: ask Linux to SIGKILL it when this process
    dies (the child of a killed host must not run on)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

    def prepare() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the host died before prctl: do not start at all
            os._exit(1)

    return prepare


def add_lead_parser(actions: Any) -> None:
    """Add ``lead`` to the subcommands of ``manage.py distlock``."""
    parser = actions.add_parser(
        "lead",
        help="Run a command only while this process leads NAME (one host at a time).",
        usage="distlock lead NAME [--ttl SECONDS] [--grace SECONDS] [--using ALIAS] "
        "-- COMMAND [ARGS ...]",
    )
    _add_options(parser)
    parser.add_argument("name", metavar="NAME")
    # Everything after NAME: options, "--", then the child's words (options too). argparse
    # cannot be told that "--" inside a subcommand ends its options, so lead() splits it.
    parser.add_argument("rest", nargs=argparse.REMAINDER, metavar="-- COMMAND ARGS")


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ttl",
        type=float,
        metavar="SECONDS",
        help="Lease of the leadership: how long a dead leader keeps the others "
        "waiting (default: the alias's TIMEOUT).",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="Seconds between SIGTERM and SIGKILL of the child (default 10).",
    )
    parser.add_argument("--using", default="default", metavar="ALIAS")


def lead(command: BaseCommand, *, name: str, rest: list[str], **options: Any) -> None:
    """Run ``lead`` for ``manage.py distlock``; exit with the child's status."""
    if "--" in rest:
        split = rest.index("--")
        own, child = rest[:split], rest[split + 1 :]
        more = argparse.ArgumentParser(prog="distlock lead", add_help=False, exit_on_error=False)
        _add_options(more)
        more.set_defaults(**{key: options[key] for key in ("ttl", "grace", "using")})
        try:
            options.update(vars(more.parse_args(own)))
        except argparse.ArgumentError as exc:
            raise CommandError(f"distlock lead: {exc}") from None
    else:
        child = rest
    if not child:
        raise CommandError("distlock lead NAME -- COMMAND ARGS: name the command to run.")
    if options["grace"] < 0:
        raise CommandError(f"--grace must be >= 0, not {options['grace']:g}.")
    verbose = options.get("verbosity", 1) >= 1

    def say(line: str) -> None:
        if verbose:
            command.stderr.write(f"distlock lead: {line}")

    try:
        run = LeadRun(
            name, child, ttl=options["ttl"], grace=options["grace"], using=options["using"], say=say
        )
    except (TypeError, ValueError, LockError, ImproperlyConfigured) as exc:
        raise CommandError(str(exc)) from None
    status = run.run()
    if status:
        raise CommandError(f"distlock lead {name!r}: exit status {status}.", returncode=status)
