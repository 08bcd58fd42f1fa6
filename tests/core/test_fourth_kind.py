"""A fourth kind through the extension points alone (issue 43, item 2; docs/architecture.md,
"Adding a kind"): a toy "latch" whose holders all hold at once, defined in this module as a
new kind would be in its own modules (its definition, its in-memory class, its Lock
subclass), and added to the registry as its one line there would add it. Nothing else of
distlock is told of it, yet a Lock of it acquires and releases, and the admin and
``manage.py distlock`` list it and release one of its holds."""

from __future__ import annotations

import importlib
import io
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.test import Client
from django.urls import clear_url_caches, reverse

from devkit.configs import distlock_settings
from distlock import Lock
from distlock.backends import kinds
from distlock.backends.kinds import KindDefinition, OperatorTexts, ReleaseTexts
from distlock.backends.locmem.inmemory import InMemory
from distlock.backends.locmem.store import Held
from distlock.backends.operations import Attempt, HeldEntry, Operations, Request, entry_of
from distlock.exceptions import LockError
from distlock.handler import locks
from distlock.info import LockInfo

pytestmark = pytest.mark.django_db


# --- what the kind's own modules would hold ----------------------------------------------
class LatchKind(Operations):
    """The latch's operations base (its definition module's)."""

    kind = "latch"


class LatchesNotSupported(LockError, NotImplementedError):
    pass


class InMemoryLatch(InMemory, LatchKind):
    """Latches in memory (its locmem module's): every token holds at once, kept in the
    store's ``kept["latch"]``: name -> token -> Held."""

    def _held(self, name: str) -> dict[str, Held]:
        held = self.store.kept.setdefault("latch", {}).setdefault(name, {})
        now = time.monotonic()
        for token in [token for token, hold in held.items() if hold.expires <= now]:
            del held[token]
        return held

    def take(self, request: Request) -> Attempt:
        fence, acquired_ms = self.store.next_fence(request.name)
        expires = time.monotonic() + request.ttl_ms / 1000
        hold = Held(request.token, fence, request.meta, acquired_ms, expires)
        self._held(request.name)[request.token] = hold
        return Attempt(True, fencing_token=fence, acquired_ms=acquired_ms)

    def wait_turn(self, request: Request, timeout: float) -> None:
        pass  # never full

    def leave(self, name: str, token: str) -> None:
        pass  # nobody queues

    def release(self, name: str, token: str, *, every_level: bool = False) -> int:
        with self.store.changed:
            return 1 if self._held(name).pop(token, None) is not None else 0

    def extend(
        self, name: str, token: str, ttl_ms: int, *, renewal: bool = False, reenter: bool = False
    ) -> bool:
        with self.store.changed:
            return self.extend_hold(self._held(name).get(token), name, ttl_ms, renewal, reenter)

    def inspect(self, name: str) -> tuple[LockInfo, ...]:
        with self.store.changed:
            held = sorted(self._held(name).values(), key=lambda hold: hold.expires)
            return tuple(self.lock_info(name, hold.token, hold, 0) for hold in held)

    def list(self, prefix: str = "") -> list[HeldEntry]:
        with self.store.changed:
            names = sorted(
                name for name in self.store.kept.get("latch", {}) if name.startswith(prefix)
            )
        found = ((name, self.inspect(name)) for name in names)
        return [entry_of(name, holders, 0) for name, holders in found if holders]


class Latch(Lock):
    """A latch held by this object (its Lock subclass's module)."""

    kind = "latch"
    _copied = tuple(name for name in Lock._copied if name not in ("reentrant", "shared", "fence"))


# --- its definition, and its line in the registry -----------------------------------------
LATCH = KindDefinition(
    word="latch",
    operations=LatchKind,
    unsupported=type("UnsupportedLatch", (kinds.definition("lock").unsupported, LatchKind), {}),
    not_supported=lambda backend: LatchesNotSupported(f"{backend.alias} has no latches"),
    classes={"locmem": f"{__name__}.InMemoryLatch"},
    release=ReleaseTexts(
        gone="The latch {name!r} was let go before it could be.",
        logged="distlock: let go of the latch {name!r} (alias {alias!r}, token {h.token})",
        done="Let go of the latch {name!r} (alias {alias!r}) held by {h.host} pid {h.pid}.",
    ),
    operator=OperatorTexts(
        shape="holders",
        title="Latches",
        css="latches",
        table_id="latch_list",
        count="latched",
        count_label="Latched by",
        number="fencing token",
        release_label="Let go",
        detail_title="Latch",
        kind_text="Latch: every holder below holds it at once",
        count_field="latched",
        holders_heading="Holders",
        number_heading="Fencing token",
        noun="latch",
        queue_unknown="",
        url_word="latch",
        release_title="Let go of a latch",
        release_question="Let go of this hold of the latch “{name}”?",
        done="let go",
        gone="No hold of the latch “{name}” (alias {alias}) has fencing token {number}.",
        record="Let go of the latch's hold {number} (alias {alias!r}), held by {who}.",
        success="Let go of hold {number} of the latch “{name}” (alias {alias}) held by {who}.",
        header=("LATCH", "HELD BY", "WAITERS", "WHO (EXPIRES IN)"),
        info_name="latch",
        info_count="latched by:     {held}",
        holder_line="  token {h.token}: {h.host} pid {h.pid}, fencing token {h.fencing_token}",
        token_needed="{name!r} is latched by {count} holders: pass --token.",
        no_such_token="No hold of the latch {name!r} has the token {token}.",
    ),
)


def _reload_urls() -> None:
    # The admin's URLs are read when the URLconf is imported: again with (and without) the
    # latch's release page.
    importlib.reload(importlib.import_module(django_settings.ROOT_URLCONF))
    clear_url_caches()


@pytest.fixture
def latch(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Iterator[None]:
    monkeypatch.setattr(kinds, "KINDS", (*kinds.KINDS, LATCH))
    monkeypatch.setattr(kinds, "SHOWN", (*kinds.SHOWN, LATCH))
    settings.DISTLOCK, settings.CACHES = distlock_settings("locmem", "")
    locks.reset()
    _reload_urls()
    yield
    monkeypatch.undo()
    locks.reset()
    _reload_urls()


def command(*args: str) -> str:
    out = io.StringIO()
    call_command("distlock", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_a_latch_is_held_by_many_and_listed_by_the_backend(latch: None) -> None:
    first, second = Latch("gate", ttl=30), Latch("gate", ttl=30)
    assert first.acquire(wait=0) and second.acquire(wait=0)
    backend = locks["default"]
    assert [ops.kind for ops in backend.kinds()] == ["lock", "shared", "semaphore", "latch"]
    assert {h.token for h in backend.of_kind("latch").inspect("gate")} == {
        first.token,
        second.token,
    }
    first.release()
    assert [h.token for h in backend.of_kind("latch").inspect("gate")] == [second.token]
    second.release()
    assert backend.of_kind("latch").list() == []


def test_the_admin_lists_shows_and_releases_a_latch(latch: None, admin_client: Client) -> None:
    held = Latch("gate", ttl=30, purpose="toy")
    assert held.acquire(wait=0)
    page = admin_client.get(reverse("admin:distlock_heldlock_changelist")).content.decode()
    assert 'id="latch_list"' in page and ">Latched by<" in page and ">Let go</a>" in page
    detail = admin_client.get(
        reverse("admin:distlock_heldlock_detail"), {"alias": "default", "name": "gate"}
    ).content.decode()
    assert "<h1>Latch “gate”</h1>" in detail and "Nobody waits for this latch." in detail
    release = reverse("admin:distlock_heldlock_release_latch")
    asked: dict[str, Any] = {
        "alias": "default",
        "name": "gate",
        "fencing_token": held.fencing_token,
    }
    assert "Let go of this hold" in admin_client.get(release, asked).content.decode()
    admin_client.post(release, asked)
    assert not held.owned()


def test_the_command_lists_shows_and_releases_a_latch(latch: None) -> None:
    held = Latch("gate", ttl=30)
    assert held.acquire(wait=0)
    listed = command("list", "-v", "0").splitlines()
    assert listed[0].split()[:3] == ["LATCH", "HELD", "BY"] and listed[1].startswith("gate ")
    assert command("info", "gate").startswith("latch:          gate (alias default)\n")
    out = command("release", "gate", "--yes", "--token", held.token or "")
    assert out.startswith("Let go of the latch 'gate'") and not held.owned()
