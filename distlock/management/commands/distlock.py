"""``manage.py distlock``: list, inspect and force-release held locks.

    manage.py distlock status [--using ALIAS] [--json]
    manage.py distlock list [--using ALIAS] [--prefix P] [--json]
    manage.py distlock info NAME [--using ALIAS] [--json]
    manage.py distlock release NAME [--token T] [--yes] [--using ALIAS]
    manage.py distlock lead NAME [--ttl S] [--grace S] [--using ALIAS] -- COMMAND ARGS...

A name held by a kind with several holders (a semaphore, a lock held shared: any kind of
distlock.backends.kinds but the exclusive lock) is one row of ``list`` with its holders, in
that kind's table; ``info NAME`` lists each holder and ``release NAME --token T`` releases one
(distlock.management.kinds).
``status`` says, per alias, which server answered (Redis or Valkey, version, role,
maxmemory-policy, latency) or why none did (distlock.management.status); ``list`` names them
in its first lines (on stderr with ``--json``: stdout stays the JSON list; none with -v 0).
``list`` and ``status`` without ``--using`` act on every alias of DISTLOCK; ``info`` and
``release`` act on ``--using`` (default "default"). Django's common options (``-v``,
``--settings``, ...) may also follow the action. When a lock server cannot be reached nothing
is listed or shown (the state is unknown, so nothing may look like "no lock is held"): the
error goes to stderr and the exit status is UNKNOWN_EXIT_CODE.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...backends.base import BaseLockBackend
from ...backends.kinds import KindDefinition, definition, several_holders
from ...backends.operations import HeldEntry
from ...eviction import status_line
from ...exceptions import BackendUnavailable, LockError
from ...handler import DEFAULT_ALIAS, locks
from ...info import LockInfo, shorten
from .. import kinds, status, waiters
from ..lead import add_lead_parser, lead
from ..tables import aligned

logger = logging.getLogger("distlock")
NOT_HELD_EXIT_CODE = 1
# A lock server did not answer: what is held there is unknown (3 is "unknown" to monitoring
# tools such as Nagios), distinct from 1, "not held".
UNKNOWN_EXIT_CODE = 3


class Command(BaseCommand):
    help = "List, inspect and force-release the locks distlock holds."
    requires_system_checks: list[str] = []  # an operator tool must work even with a bad check
    stealth_options = ("stdin",)

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        self._common_options: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        return super().create_parser(prog_name, subcommand, **kwargs)

    def add_base_argument(self, parser: CommandParser, *args: str, **kwargs: Any) -> None:
        """Add one of Django's common options, and remember it for the actions' parsers."""
        super().add_base_argument(parser, *args, **kwargs)
        if kwargs.get("action") != "version":
            self._common_options.append((args, kwargs))

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        state = actions.add_parser(
            "status", help="Say which server answered for each alias, or why none did."
        )
        state.add_argument(
            "--using", metavar="ALIAS", help="Only this DISTLOCK alias (default: every alias)."
        )
        state.add_argument(
            "--json", action="store_true", dest="as_json", help="A JSON list, one object per alias."
        )
        listing = actions.add_parser("list", help="Show the held locks.")
        listing.add_argument(
            "--using", metavar="ALIAS", help="Only this DISTLOCK alias (default: every alias)."
        )
        listing.add_argument(
            "--prefix", default="", metavar="P", help="Only locks whose name starts with P."
        )
        listing.add_argument(
            "--json",
            action="store_true",
            dest="as_json",
            help="A JSON list of objects with every LockInfo field.",
        )
        info = actions.add_parser("info", help="Show everything about one held lock.")
        info.add_argument("name", metavar="NAME")
        info.add_argument("--using", default=DEFAULT_ALIAS, metavar="ALIAS")
        info.add_argument(
            "--json",
            action="store_true",
            dest="as_json",
            help="The LockInfo fields as a JSON object.",
        )
        release = actions.add_parser(
            "release", help="Force-release a lock (after confirmation, unless --yes)."
        )
        release.add_argument("name", metavar="NAME")
        release.add_argument(
            "--token", metavar="T", help="Release only if T still holds the lock (see `info`)."
        )
        release.add_argument("--yes", action="store_true", help="Do not ask for confirmation.")
        release.add_argument("--using", default=DEFAULT_ALIAS, metavar="ALIAS")
        for action_parser in (state, listing, info, release):
            self._accept_common_options(action_parser)
        add_lead_parser(actions)  # takes the rest of the line after NAME (see lead.py)

    def _accept_common_options(self, parser: CommandParser) -> None:
        """Let ``distlock list -v 0`` and ``list --settings X`` work as on other commands.

        argparse hands everything after the action to the action's parser, which would refuse
        the common options. Each is added there too, hidden from its help and with no default,
        so that when it is absent the value parsed before the action (or Django's default)
        stays.
        """
        for args, kwargs in self._common_options:
            parser.add_argument(
                *args, **{**kwargs, "default": argparse.SUPPRESS, "help": argparse.SUPPRESS}
            )

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        actions: dict[str, Callable[..., None]] = {
            "status": self.show_status,
            "list": self.list_locks,
            "info": self.show_info,
            "release": self.release_lock,
            "lead": functools.partial(lead, self),
        }
        actions[action](**options)

    # --- status -------------------------------------------------------------------------
    def show_status(self, *, using: str | None, as_json: bool, **options: Any) -> None:
        found = []
        for alias in [using] if using else _aliases():
            backend = _backend(alias)
            found.append((alias, backend, backend.server_reports()))
        if as_json:
            self.stdout.write(_dumps([status.status_json(*each) for each in found]))
        else:
            for each in found:
                self.stdout.write("\n".join(status.status_lines(*each)))
        silent = [
            f"{alias} ({report.address})"
            for alias, _, reports in found
            for report in reports
            if report.error
        ]
        if silent:
            raise CommandError(
                f"No answer from {', '.join(silent)}: what is held there is unknown.",
                returncode=UNKNOWN_EXIT_CODE,
            )

    # --- list ---------------------------------------------------------------------------
    def list_locks(self, *, using: str | None, prefix: str, as_json: bool, **options: Any) -> None:
        aliases = [using] if using else _aliases()
        held: list[LockInfo] = []
        several: dict[str, list[kinds.Held]] = {kind.word: [] for kind in several_holders()}
        unreachable: dict[str, str] = {}
        evicting: list[str] = []  # servers that may evict lock keys
        servers: list[str] = []  # which server answered, for each alias
        for alias in aliases:
            try:
                backend = _backend(alias)
                held.extend(_all_held(backend, prefix))
                servers.append(status.server_line(alias, backend, backend.server_reports()))
                evicting.append(status_line(alias, backend))
                for kind in several_holders():
                    several[kind.word] += _guarded(alias, kinds.held_of, backend, kind, prefix)
            except CommandError as exc:
                if using or exc.returncode != UNKNOWN_EXIT_CODE:
                    raise
                unreachable[alias] = str(exc)
        if unreachable:
            # A listing without these aliases would look complete: list nothing.
            answered = [alias for alias in aliases if alias not in unreachable]
            hint = (
                f" List the others with --using ALIAS ({', '.join(answered)})."
                if (answered)
                else ""
            )
            raise CommandError(
                f"{' '.join(unreachable.values())} Nothing is listed: what is held there is "
                f"unknown.{hint}",
                returncode=UNKNOWN_EXIT_CODE,
            )
        evicting = [line for line in evicting if line]
        if options.get("verbosity", 1) < 1:  # -v 0: the listing alone
            servers = []
        if as_json:
            for line in servers + evicting:  # stdout stays the JSON list
                self.stderr.write(line)
            listed = [info.as_json_dict() for info in held]
            for word, found in several.items():
                listed += kinds.list_json(definition(word), found)
            self.stdout.write(_dumps(listed))
            return
        for line in servers + evicting:
            self.stdout.write(line)
        if held or any(several.values()):
            show_alias = len(aliases) > 1
            tables = [lock_table(held, show_alias=show_alias)] if held else []
            tables += [
                kinds.table(definition(word), found, show_alias=show_alias)
                for word, found in several.items()
                if found
            ]
            self.stdout.write("\n\n".join(tables))
        else:
            where = f" starting with {prefix!r}" if prefix else ""
            self.stdout.write(f"No locks{where} are held.")

    # --- info ---------------------------------------------------------------------------
    def show_info(self, *, name: str, using: str, as_json: bool, **options: Any) -> None:
        backend = _backend(using)
        found = _several_instead(backend, name)
        if found is not None:
            self._show_several(backend, *found, as_json)
            return
        info = _guarded(using, backend.info, name)
        if info is None:
            if as_json:
                self.stdout.write(_dumps(None))  # still valid JSON: nothing is held
            raise _not_held(backend, name)
        queued = _guarded(using, backend.waiters, name)
        if as_json:
            data = {**info.as_json_dict(), "waiting": waiters.waiters_json(queued)}
            self.stdout.write(_dumps(data))
            return
        for label, value in describe(info):
            self.stdout.write(f"{label + ':':<15} {value}")
        for line in (
            waiters.waiter_lines(queued, info.waiters) if info.waiters or queued is None else []
        ):
            self.stdout.write(line)

    def _show_several(
        self, backend: BaseLockBackend, kind: KindDefinition, entry: HeldEntry, as_json: bool
    ) -> None:
        """``info`` of a name held by a kind with several holders: each holder, how many
        wait, and (for a hold of the lock itself) who waits for the lock."""
        alias = backend.alias
        queued = _guarded(alias, backend.waiters, entry.name) if kind.on_lock else None
        if as_json:
            data = kinds.info_json(kind, alias, entry)
            if "waiting" not in data:
                data["waiting"] = waiters.waiters_json(queued)
            self.stdout.write(_dumps(data))
            return
        self.stdout.write("\n".join(kinds.describe(kind, alias, entry)))
        count = kinds.waiting(kind, entry)  # counted on the server: the list read may be cut
        self.stdout.write(f"{'waiters:':<15} {'?' if count is None else count}")
        if kind.on_lock:
            for line in waiters.waiter_lines(queued, count) if count or queued is None else []:
                self.stdout.write(line)

    # --- release ------------------------------------------------------------------------
    def release_lock(
        self, *, name: str, using: str, token: str | None, yes: bool, **options: Any
    ) -> None:
        backend = _backend(using)
        found = _several_instead(backend, name)
        if found is not None:
            kind, entry = found
            holder = kinds.holder_of(kind, entry, token)
            if isinstance(holder, str):
                raise CommandError(holder, returncode=NOT_HELD_EXIT_CODE)
            self._release_hold(backend, kind.word, name, holder, yes, options)
            return
        info = _held_or_fail(backend, name)
        if token is not None and token != info.token:
            # The server names the holder's token: T is not it (a typo, or a hold that
            # ended). "Its holder changed" is said only when the token shown stopped holding
            # between that read and the release, below.
            raise CommandError(
                f"No holder of the lock {name!r} has the token {token}: it is held with "
                f"another token ({info.token}) by {info.host} pid {info.pid}. Check the token "
                "with `distlock info NAME`. Nothing was released.",
                returncode=NOT_HELD_EXIT_CODE,
            )
        # Only the token that was shown: if the lock changed hands meanwhile, the new holder
        # keeps it.
        self._release_hold(backend, "lock", name, info, yes, options)

    def _release_hold(
        self,
        backend: BaseLockBackend,
        kind: str,
        name: str,
        holder: LockInfo,
        yes: bool,
        options: dict[str, Any],
    ) -> None:
        """Release ``holder``'s hold of ``name`` (of ``kind``), once confirmed; the backend
        counts it and sends lock_force_released."""
        if not yes:
            self._confirm(holder, options.get("stdin") or sys.stdin)
        texts = definition(kind).release
        assert texts is not None  # every kind's definition says it
        alias = backend.alias
        words = {"name": name, "alias": alias, "h": holder, "since": _when(holder.acquired_at)}
        # The exclusive kind through the contract's force_release, which routes a shared
        # holder's token (one that came to hold the name meanwhile) to the shared kind.
        release = backend.force_release if kind == "lock" else backend.of_kind(kind).force_release
        if not _guarded(alias, release, name, holder.token):
            raise CommandError(texts.gone.format(**words), returncode=NOT_HELD_EXIT_CODE)
        logger.info("%s", texts.logged.format(**words))
        self.stdout.write(texts.done.format(**words))

    def _confirm(self, info: LockInfo, stdin: Any) -> None:
        if not (hasattr(stdin, "isatty") and stdin.isatty()):
            raise CommandError(
                f"Not releasing {info.name!r}: confirmation is needed and stdin is not a "
                "terminal. Pass --yes to release without asking."
            )
        self.stderr.write(
            f"Release the lock {info.name!r}, held by {info.host} pid {info.pid} since "
            f"{_when(info.acquired_at)} ({shorten(info.purpose, 60)})? Its holder may still "
            "be working. [y/N] ",
            ending="",
        )
        self.stderr.flush()
        answer = stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            raise CommandError(f"Not released: {info.name!r} is still held.")


def _aliases() -> list[str]:
    try:
        return list(locks)
    except ImproperlyConfigured as exc:
        raise CommandError(str(exc)) from None


def _backend(alias: str) -> BaseLockBackend:
    try:
        return locks[alias]
    except ImproperlyConfigured as exc:
        raise CommandError(str(exc)) from None


def _guarded(alias: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Return ``call(*args, **kwargs)``; a lock server error becomes a CommandError."""
    try:
        return call(*args, **kwargs)
    except BackendUnavailable as exc:
        raise CommandError(f"DISTLOCK[{alias!r}]: {exc}", returncode=UNKNOWN_EXIT_CODE) from None
    except LockError as exc:
        raise CommandError(f"DISTLOCK[{alias!r}]: {exc}") from None


def _all_held(backend: BaseLockBackend, prefix: str) -> list[LockInfo]:
    # One walk of the index (iter_held), not pages by offset: offsets shift while others
    # take and release locks, so pages dropped and repeated locks held all along.
    def walk() -> list[LockInfo]:
        return sorted(backend.iter_held(prefix), key=lambda info: info.name)

    return _guarded(backend.alias, walk)


def _several_instead(
    backend: BaseLockBackend, name: str
) -> tuple[KindDefinition, HeldEntry] | None:
    """Return the kind with several holders holding ``name``, and its entry; None when the
    exclusive lock holds it, or nothing does. A kind of its own (a semaphore) counts only
    when no lock of that name is held; a hold of the lock itself (shared) whenever it is."""
    locked = _guarded(backend.alias, backend.info, name) is not None
    ordered = sorted(several_holders(), key=lambda kind: kind.on_lock)
    for kind in ordered:
        if kind.on_lock or not locked:
            entry = _guarded(backend.alias, kinds.one_held, backend, kind, name)
            if entry is not None:
                return kind, entry
    return None


def _held_or_fail(backend: BaseLockBackend, name: str) -> LockInfo:
    info = _guarded(backend.alias, backend.info, name)
    if info is None:
        raise _not_held(backend, name)
    return info


def _not_held(backend: BaseLockBackend, name: str) -> CommandError:
    return CommandError(
        f"The lock {name!r} is not held (alias {backend.alias!r}).",
        returncode=NOT_HELD_EXIT_CODE,
    )


def describe(info: LockInfo) -> list[tuple[str, str]]:
    """Return (label, value) lines telling an operator everything about a held lock."""
    return [
        ("name", info.name),
        ("alias", info.alias),
        ("holder", f"{info.host} pid {info.pid} thread {info.thread}"),
        ("purpose", info.purpose),
        ("acquired", _when(info.acquired_at)),
        ("expires in", f"{info.ttl_remaining:.1f}s (at {_when(info.expires_at)})"),
        ("fencing token", str(info.fencing_token)),
        ("token", info.token),
        ("renewals", str(info.renewals)),
        ("depth", str(info.depth)),
        ("waiters", waiters.count_text(info)),
    ]


def lock_table(held: list[LockInfo], *, show_alias: bool = False) -> str:
    """Return the held locks as a table with aligned columns."""
    header = [
        "NAME",
        "HOLDER",
        "PURPOSE",
        "ACQUIRED (UTC)",
        "EXPIRES IN",
        "FENCING TOKEN",
        "WAITERS",
    ]
    rows = [
        [
            info.alias,
            info.name,
            f"{info.host}:{info.pid}",
            shorten(info.purpose, 40),
            f"{info.acquired_at:%Y-%m-%d %H:%M:%S}",
            f"{info.ttl_remaining:.1f}s",
            str(info.fencing_token),
            waiters.count_text(info),
        ]
        for info in held
    ]
    return aligned(header, rows, show_alias=show_alias)


def _when(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def _dumps(data: object) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)
