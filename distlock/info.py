"""LockInfo: what operators see about a held lock."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

PURPOSE_MAX_LENGTH = 200


@dataclass(frozen=True)
class LockInfo:
    """One held lock, as the backend stores it."""

    name: str
    token: str
    fencing_token: int
    host: str
    pid: int
    thread: str
    purpose: str
    acquired_at: datetime
    expires_at: datetime
    ttl_remaining: float
    renewals: int
    depth: int
    alias: str = ""
    waiters: int | None = None  # how many are queued for it; None: the backend cannot say
    shared: bool = False  # one of the shared holders of the lock (distlock.lock(shared=True))

    def as_json_dict(self) -> dict[str, Any]:
        """Return the fields as JSON-ready values, datetimes in ISO 8601."""
        # Not dataclasses.asdict(): it deep-copies every value, which made listing 50,000
        # locks as JSON take seconds; every field is immutable anyway.
        data = dict(vars(self))
        data["acquired_at"] = self.acquired_at.isoformat()
        data["expires_at"] = self.expires_at.isoformat()
        return data

    @classmethod
    def from_stored(
        cls,
        *,
        name: str,
        token: str,
        fence: int,
        meta_json: str | bytes,
        acquired_ms: int,
        now_ms: int,
        pttl_ms: int,
        renewals: int,
        depth: int,
        alias: str,
        waiters: int | None = None,
        shared: bool = False,
    ) -> LockInfo:
        """Build a LockInfo from the fields a backend stored and the server's clock."""
        meta = json.loads(meta_json) if meta_json else {}
        return cls(
            name=name,
            token=token,
            fencing_token=fence,
            host=str(meta.get("host", "")),
            pid=int(meta.get("pid", 0)),
            thread=str(meta.get("thread", "")),
            purpose=str(meta.get("purpose", "")),
            acquired_at=from_milliseconds(acquired_ms),
            expires_at=from_milliseconds(now_ms + pttl_ms),
            ttl_remaining=max(pttl_ms, 0) / 1000,
            renewals=renewals,
            depth=depth,
            alias=alias,
            waiters=waiters,
            shared=shared,
        )


@dataclass(frozen=True)
class WaiterInfo:
    """One process (thread, task) queued for a lock: who, why, and since when."""

    host: str
    pid: int
    thread: str
    purpose: str
    since: datetime
    waited: float  # seconds, by the server's clock

    def as_json_dict(self) -> dict[str, Any]:
        """Return the fields as JSON-ready values, ``since`` in ISO 8601."""
        data = dict(vars(self))
        data["since"] = self.since.isoformat()
        return data

    @classmethod
    def from_stored(cls, *, meta_json: str | bytes, arrival_us: int, now_ms: int) -> WaiterInfo:
        """Build a WaiterInfo from the metadata a waiter stored when it queued."""
        meta = json.loads(meta_json) if meta_json else {}
        return cls(
            host=str(meta.get("host", "")),
            pid=int(meta.get("pid", 0)),
            thread=str(meta.get("thread", "")),
            purpose=str(meta.get("purpose", "")),
            since=from_milliseconds(arrival_us // 1000),
            waited=max(now_ms - arrival_us / 1000, 0.0) / 1000,
        )


def from_milliseconds(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def holder_metadata(purpose: str | None) -> str:
    """Return the JSON stored beside a lock: who holds it, where, and why. Never pickled."""
    return _metadata(_pid, threading.current_thread().name, purpose)


def _thread_metadata(thread: threading.Thread, purpose: str | None) -> str:
    """holder_metadata() for the running ``thread``, which the acquire path has looked up
    already (it notes it as the owner too). Underscored: this module's public names are a
    recorded API (tests/tooling/test_public_api.py)."""
    return _metadata(_pid, thread.name, purpose)


# os.getpid() is a system call on every acquire; the pid only changes in a forked child.
_pid = os.getpid()


def _remember_pid() -> None:
    global _pid
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_remember_pid)


@lru_cache(maxsize=256)
def _metadata(pid: int, thread: str, purpose: str | None) -> str:
    return json.dumps(
        {
            "host": _hostname(),
            "pid": pid,
            "thread": thread,
            "purpose": (purpose or default_purpose())[:PURPOSE_MAX_LENGTH],
        },
        ensure_ascii=False,
    )


@lru_cache(maxsize=1)
def _hostname() -> str:
    return socket.gethostname()


def default_purpose() -> str:
    """Return the process's command line, shortened: the best guess of why it locks."""
    return _command_line()


@lru_cache(maxsize=1)
def _command_line() -> str:
    args = [os.path.basename(sys.argv[0]), *sys.argv[1:]] if sys.argv and sys.argv[0] else []
    return shorten(" ".join(args) or f"python pid {os.getpid()}")


def shorten(text: str, limit: int = 80) -> str:
    """Return ``text`` on one line, cut to ``limit`` characters with "..." if longer."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class SemaphoreInfo:
    """A semaphore someone holds a permit of (or waits for): its limit and its holders.

    Each holder is a LockInfo (``fencing_token`` is the permit's number, rising per
    semaphore), first lease to end first.
    """

    name: str
    limit: int
    holders: tuple[LockInfo, ...]
    waiting: int  # tokens queued for a permit (reserved ones included)
    alias: str = ""

    def as_json_dict(self) -> dict[str, Any]:
        """Return the fields as JSON-ready values, each holder as LockInfo.as_json_dict()."""
        return {
            "name": self.name,
            "limit": self.limit,
            "waiting": self.waiting,
            "alias": self.alias,
            "holders": [h.as_json_dict() for h in self.holders],
        }
