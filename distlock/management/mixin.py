"""LockedCommandMixin: a management command that runs once at a time, across hosts.

    class Command(LockedCommandMixin, BaseCommand):
        lock_name = "send-digest:{tenant}"   # default: the command's name
        lock_ttl = 60                         # renewed automatically while handle() runs
        lock_wait = 0                         # seconds to wait for a running instance

Exit statuses: 0 ran (or skipped: ``lock_skip_exit_code``); 1 the lease was lost and
``handle()`` was stopped, or did not run; 3 (``FINISHED_BUT_LOST_EXIT_CODE``) ``handle()``
finished but the lock had been lost meanwhile, so another copy may have overlapped it;
128 + N stopped by signal N.
"""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.management.base import CommandError, CommandParser, OutputWrapper

from ..exceptions import (
    BackendUnavailable,
    FencedUpdateRejected,
    InvalidLockBackendError,
    LockLost,
    LockNotOwned,
)
from ..info import shorten
from ..lock import Lock
from ..naming import fill_template
from ..validation import lease_milliseconds, seconds
from .interrupt import LOST_CAUSES, CommandGuard, CommandInterrupted, CommandLockLost

# handle() finished, but the lock had been lost by then (force-released, say, with the loss
# found only when releasing): the work is done, yet another copy may have overlapped it.
FINISHED_BUT_LOST_EXIT_CODE = 3


class LockSkipped(CommandError):
    """Another instance holds the lock (raised by call_command when lock_skip_exit_code != 0)."""


@dataclass(frozen=True)
class LockPlan:
    """What one run of a locked command locks, checked before anything runs."""

    name: str
    ttl: float
    wait: float | None
    purpose: str


class LockedCommandMixin:
    """Hold a distributed lock while ``handle()`` runs; skip the run if another holds it.

    Put it before ``BaseCommand``: ``class Command(LockedCommandMixin, BaseCommand)``.
    """

    lock_name: str | None = None  # default: the command's name; may use {option} fields
    lock_ttl: float = 60  # lease in seconds, renewed every third of it while handle() runs
    lock_wait: float | None = 0  # seconds to wait for a running instance (None: no limit)
    lock_skip_exit_code: int = 0  # exit status of a run skipped because the lock was held
    lock_using: str = "default"  # DISTLOCK alias
    # Inside a database transaction, the release waits for it to end (False: at once).
    lock_hold_until_commit: bool = True
    # Claim the fencing token in each database transaction handle() runs (docs/commands.md).
    lock_fence: bool = False
    # The Lock handle() runs under (its fencing_token, lease_left(), extend()); None when
    # no lock is held (outside handle(), or with --no-lock).
    lock: Lock | None = None
    # False: a free lock goes to whichever instance asks first, not to the one that waited
    # longest; None: the alias's OPTIONS['FAIR'] (see distlock.lock).
    lock_fair: bool | None = None

    _lock_argv: list[str] | None = None
    handle: Callable[..., Any]  # BaseCommand's, shadowed while the lock is held
    stderr: OutputWrapper  # BaseCommand's

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        # Added here rather than in add_arguments(), which commands override without super().
        parser = super().create_parser(prog_name, subcommand, **kwargs)  # type: ignore[misc]
        group = parser.add_argument_group(
            "locking", "Only one instance runs at a time, across hosts (distlock)."
        )
        group.add_argument(
            "--lock-wait",
            metavar="SECONDS",
            help="Wait up to SECONDS for a running instance to finish (default: "
            f"{'no limit' if self.lock_wait is None else self.lock_wait}).",
        )
        group.add_argument(
            "--lock-ttl",
            metavar="SECONDS",
            help=f"Lease of the lock, renewed while the command runs (default: {self.lock_ttl}).",
        )
        group.add_argument(
            "--no-lock",
            action="store_true",
            help="Run without the lock (when you know no other instance can run).",
        )
        return parser

    def run_from_argv(self, argv: list[str]) -> None:
        self._lock_argv = argv[1:]  # for the purpose operators see: "manage.py NAME ARGS"
        super().run_from_argv(argv)  # type: ignore[misc]

    def execute(self, *args: Any, **options: Any) -> Any:
        if options.get("no_lock"):
            return super().execute(*args, **options)  # type: ignore[misc]
        plan = self.lock_plan(args, options)
        # BaseCommand.execute() sets up output and runs checks, then calls self.handle():
        # shadow it for this run with the locked version.
        handle: Callable[..., Any] = functools.partial(self._handle_locked, plan, self.handle)
        self.handle = handle
        try:
            return super().execute(*args, **options)  # type: ignore[misc]
        finally:
            del self.handle

    # --- what to lock -----------------------------------------------------------------
    def command_name(self) -> str:
        """Return this command's name, as ``manage.py`` knows it (its module's name)."""
        return type(self).__module__.rpartition(".")[2]

    def lock_plan(self, args: tuple[Any, ...], options: dict[str, Any]) -> LockPlan:
        """Check the lock settings and options; raise CommandError saying what is wrong."""
        wait = _lock_setting(
            "--lock-wait", options.get("lock_wait"), "lock_wait", self.lock_wait, is_wait=True
        )
        ttl = _lock_setting(
            "--lock-ttl", options.get("lock_ttl"), "lock_ttl", self.lock_ttl, is_wait=False
        )
        assert ttl is not None
        _check_exit_code(self.lock_skip_exit_code)
        _check_fair(self.lock_fair)
        return LockPlan(
            name=self._filled_lock_name(options), ttl=ttl, wait=wait, purpose=self._purpose(args)
        )

    def _filled_lock_name(self, options: dict[str, Any]) -> str:
        template = self.lock_name if self.lock_name is not None else self.command_name()
        try:
            return fill_template(template, options)
        except KeyError as exc:
            available = ", ".join(sorted(f"{{{key}}}" for key in options))
            raise CommandError(
                f"lock_name {template!r} uses {{{exc.args[0]}}}, which is not an option of "
                f"this command. Available: {available}."
            ) from None
        except (TypeError, ValueError) as exc:  # InvalidLockName is a ValueError
            raise CommandError(f"lock_name {template!r} cannot name a lock: {exc}") from None

    def _purpose(self, args: tuple[Any, ...]) -> str:
        words = self._lock_argv if self._lock_argv else [self.command_name(), *map(str, args)]
        return shorten(" ".join(["manage.py", *words]))

    # --- running under the lock -------------------------------------------------------
    def _handle_locked(self, plan: LockPlan, handle: Any, *args: Any, **options: Any) -> Any:
        guard = CommandGuard(plan.name)
        lock = Lock(
            plan.name,
            ttl=plan.ttl,
            wait=plan.wait,
            auto_renew=True,
            on_lost=guard.lease_lost,
            using=self.lock_using,
            purpose=plan.purpose,
            hold_until_commit=self.lock_hold_until_commit,
            fair=self.lock_fair,
            metric_name=self.command_name(),  # bounded, unlike a name filled from options
            fence=_flag("lock_fence", self.lock_fence),
        )
        # The handlers are in place before the lock can be granted: a SIGTERM just after the
        # grant must release it, not kill the process and leave the lock to its lease.
        with guard.installed():
            if not self._acquire(lock, guard):
                return self._skip(lock, options)
            returned = False
            refused: FencedUpdateRejected | None = None
            self.lock = lock
            try:
                with guard.running():
                    result = handle(*args, **options)
                returned = True
            except CommandLockLost:
                guard.lost.set()
                result = None
            except CommandInterrupted:
                result = None
            except FencedUpdateRejected as exc:  # a newer holder claimed the lock: stop
                refused = exc
                result = None
            finally:
                self.lock = None
                self._release(lock, guard)
        if refused is not None:
            raise CommandError(f"Stopped: {refused}", returncode=1) from refused
        if guard.lost.is_set():
            raise self._lost(plan.name, guard, returned=returned)
        if guard.stop_signal is not None:
            name = signal.Signals(guard.stop_signal).name
            raise CommandError(
                f"Stopped by {name}; released the lock {plan.name!r}.",
                returncode=128 + guard.stop_signal,
            )
        return result

    def _lost(self, name: str, guard: CommandGuard, *, returned: bool) -> CommandError:
        """Say what a lost lease meant for this run: stopped, or finished regardless."""
        if not returned:
            return CommandError(str(guard.lost_error()), returncode=1)
        if guard.interrupted:  # handle() caught CommandLockLost and went on
            return CommandError(
                f"Lost the lock {name!r} while the command ran ({LOST_CAUSES}); the command "
                "caught the interruption and ran on, so from that moment it may have run "
                f"alongside another copy.{guard.why()}",
                returncode=1,
            )
        # Not interruptible (found only when releasing, off the main thread, in C code).
        return CommandError(
            f"{self.command_name()} finished, but its lock {name!r} had been lost by then "
            f"({LOST_CAUSES}): from that moment another copy may have run alongside it."
            f"{guard.why()}",
            returncode=FINISHED_BUT_LOST_EXIT_CODE,
        )

    def _acquire(self, lock: Lock, guard: CommandGuard) -> bool:
        try:
            with guard.waiting():
                return lock.acquire()
        except KeyboardInterrupt as exc:
            signum = exc.signum if isinstance(exc, CommandInterrupted) else signal.SIGINT
            if lock.token is not None:  # the grant arrived just before the signal
                self._release(lock, guard)
            raise CommandError(
                f"Interrupted while waiting for the lock {lock.name!r} "
                f"({signal.Signals(signum).name}); nothing was run.",
                returncode=128 + signum,
            ) from None
        except BackendUnavailable as exc:
            raise CommandError(
                f"Did not run: the lock server of DISTLOCK[{lock.using!r}] cannot be reached, "
                f"so the lock {lock.name!r} could not be taken. {exc}"
            ) from exc
        except InvalidLockBackendError as exc:
            raise CommandError(f"Did not run: {exc}") from exc

    def _release(self, lock: Lock, guard: CommandGuard) -> None:
        try:
            lock.release()
        except (LockLost, LockNotOwned) as exc:  # a renewal, or the release, found it gone
            guard.reason = guard.reason or str(exc)
            guard.lost.set()
        except BackendUnavailable as exc:
            # The work is done; the lease ends the lock on its own within lock_ttl.
            self.stderr.write(
                f"Could not release the lock {lock.name!r}: {exc} It expires with its lease "
                f"within {lock.ttl:g}s."
            )

    def _skip(self, lock: Lock, options: dict[str, Any]) -> None:
        if options.get("verbosity", 1) >= 1:
            self.stderr.write(skip_message(self.command_name(), lock))
        code = self.lock_skip_exit_code
        if code == 0:
            return None
        if getattr(self, "_called_from_command_line", False):
            sys.exit(code)  # the line above said it all; no "CommandError: ..." line
        raise LockSkipped(f"Skipped: the lock {lock.name!r} is held elsewhere.", returncode=code)


def skip_message(command: str, lock: Lock) -> str:
    """Return the one line that says a run was skipped, and who holds the lock."""
    holder = lock.holder()
    if holder is None:
        return (
            f"{command}: skipped, the lock {lock.name!r} was held by another instance "
            "(it has just been released)."
        )
    return (
        f"{command}: skipped, the lock {lock.name!r} is held by {holder.host} pid {holder.pid} "
        f"since {holder.acquired_at:%Y-%m-%d %H:%M:%S} UTC ({shorten(holder.purpose, 60)})."
    )


def _lock_setting(
    flag: str, option: object, attribute: str, default: object, *, is_wait: bool
) -> float | None:
    """Return the option's value in seconds, else the class attribute's; raise CommandError
    saying what is wrong with either."""
    label, value = (attribute, default) if option is None else (flag, _number(flag, option))
    try:
        if is_wait:
            return seconds(label, value, allow_none=True, allow_zero=True)
        ttl = seconds(label, value)
        lease_milliseconds(label, ttl or 0)
        return ttl
    except (TypeError, ValueError) as exc:
        raise CommandError(str(exc)) from None


def _number(flag: str, value: object) -> object:
    if not isinstance(value, str):
        return value  # call_command(lock_wait=5) passes numbers through
    try:
        return float(value)
    except ValueError:
        raise CommandError(f"{flag} expects a number of seconds, not {value!r}.") from None


def _flag(attribute: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise CommandError(f"{attribute} must be True or False, not {value!r}.")
    return value


def _check_fair(fair: object) -> None:
    if fair is not None and not isinstance(fair, bool):
        raise CommandError(f"lock_fair must be True, False or None, not {fair!r}.")


def _check_exit_code(code: object) -> None:
    if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
        raise CommandError(f"lock_skip_exit_code must be an int from 0 to 255, not {code!r}.")
