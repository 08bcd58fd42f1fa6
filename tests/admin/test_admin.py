"""The "Held locks" admin page, through the Django test client against real Redis servers."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import reverse
from django.utils.timezone import localtime

import distlock
from devkit.servers import free_port
from distlock.admin import format_remaining
from distlock.handler import locks
from distlock.models import HeldLock
from distlock.signals import lock_force_released

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:distlock_heldlock_changelist"
RELEASE = "admin:distlock_heldlock_release"
RELEASE_BUTTON = ">Force release</a>"


@pytest.fixture
def held(redis_backend: str) -> Any:
    """Acquire locks on the default alias (a real Redis) that stay held through the test."""
    taken: list[distlock.Lock] = []

    def hold(
        name: str,
        *,
        ttl: float = 60,
        using: str = "default",
        purpose: str | None = None,
        **options: Any,
    ) -> distlock.Lock:
        lock = distlock.lock(name, ttl=ttl, using=using, purpose=purpose, **options)
        assert lock.acquire(wait=0)
        taken.append(lock)
        return lock

    return hold


@pytest.fixture
def other_alias(settings: Any, redis_backend: str) -> str:
    """A second alias on the same Redis server, under another key prefix."""
    settings.DISTLOCK = {
        **settings.DISTLOCK,
        "other": {
            "BACKEND": "distlock.backends.redis.RedisBackend",
            "LOCATION": redis_backend,
            "KEY_PREFIX": "other",
        },
    }
    locks.reset()
    return "other"


def changelist(client: Client, **params: Any) -> Any:
    return client.get(reverse(CHANGELIST), params)


def release_params(lock: distlock.Lock, alias: str = "default") -> dict[str, Any]:
    return {"alias": alias, "name": lock.name, "fencing_token": lock.fencing_token}


def names_on_page(response: Any) -> list[str]:
    return [row.info.name for row in response.context["cl"].rows]


def still_held(lock: distlock.Lock) -> bool:
    info = lock.backend.info(lock.name)
    return info is not None and info.fencing_token == lock.fencing_token


def message_texts(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


# --- the page ------------------------------------------------------------------------------


def test_admin_index_shows_held_locks_under_distlock(admin_client: Client, held) -> None:
    response = admin_client.get(reverse("admin:index"))
    content = response.content.decode()
    assert response.status_code == 200
    assert "Distlock" in content
    assert f'href="{reverse(CHANGELIST)}"' in content
    assert ">Held locks</a>" in content


def test_every_column_of_a_held_lock(admin_client: Client, held) -> None:
    lock = held("reports:daily", ttl=90, purpose="nightly report", reentrant=True)
    assert lock.acquire()  # depth 2
    assert lock.operations.extend(lock.name, lock.token, 90_000, renewal=True)  # one renewal
    info = lock.backend.info(lock.name)

    response = changelist(admin_client)

    assert response.status_code == 200
    [shown] = [row.info for row in response.context["cl"].rows]
    # Only the remaining time moves on between the two reads.
    assert replace(shown, ttl_remaining=0, expires_at=info.expires_at) == replace(
        info, ttl_remaining=0
    )
    row = re.search(r"<tr>\s*<th class=\"field-name\">.*?</tr>", response.content.decode(), re.S)
    assert row is not None
    cells = dict(re.findall(r'class="field-(\w+)[^"]*">(.*?)</t[dh]>', row.group(), re.S))
    detail = f"{reverse('admin:distlock_heldlock_detail')}?alias=default&amp;name=reports%3Adaily"
    # The name may wrap after its separators (<wbr>), never inside a word.
    assert cells["name"] == f'<a href="{detail}&amp;kind=lock&amp;f=">reports:<wbr>daily</a>'
    assert cells["waiters"] == "0"
    assert cells["alias"] == "default"
    assert cells["holder"] == f"{info.host}, pid {info.pid}, thread {info.thread}"
    assert cells["purpose"] == "nightly report"
    assert cells["fencing_token"] == str(lock.fencing_token)
    assert cells["renewals"] == "1"
    assert cells["depth"] == "2"
    acquired = re.search(r'datetime="([^"]+)">(.*?)</time>', cells["acquired_at"])
    assert datetime.fromisoformat(acquired.group(1)) == info.acquired_at
    # The date and the time each stay whole when the cell wraps.
    assert re.sub(r"<[^>]+>", "", acquired.group(2)) == (
        f"{localtime(info.acquired_at):%Y-%m-%d %H:%M:%S}"
    )
    ttl_ms = int(re.search(r'data-distlock-ttl-ms="(\d+)"', cells["expires_in"]).group(1))
    assert 80_000 < ttl_ms <= 90_000
    assert re.search(r">1 min \d+ s<", cells["expires_in"])
    assert "distlock/admin/heldlock.js" in response.content.decode()


def test_remaining_time_reads_like_the_countdown() -> None:
    assert format_remaining(0) == "expired"
    assert format_remaining(0.2) == "1 s"
    assert format_remaining(59.5) == "1 min 0 s"
    assert format_remaining(125) == "2 min 5 s"
    assert format_remaining(2 * 3600 + 600) == "2 h 10 min"


def test_every_alias_is_listed(admin_client: Client, held, other_alias: str) -> None:
    held("one")
    held("two", using=other_alias)
    response = changelist(admin_client)
    assert sorted((row.info.alias, row.info.name) for row in response.context["cl"].rows) == [
        ("default", "one"),
        ("other", "two"),
    ]


def test_other_backends_are_listed(admin_client: Client, backend_kind: str) -> None:
    lock = distlock.lock("everywhere", ttl=30, purpose="on " + backend_kind)
    assert lock.acquire(wait=0)
    response = changelist(admin_client)
    assert [(row.info.name, row.info.purpose) for row in response.context["cl"].rows] == [
        ("everywhere", "on " + backend_kind)
    ]
    lock.release()


def test_no_lock_held(admin_client: Client, redis_backend: str) -> None:
    response = changelist(admin_client)
    assert response.status_code == 200
    assert "No lock is held right now." in response.content.decode()


def test_names_are_escaped(admin_client: Client, held) -> None:
    held("<script>alert(1)</script>", purpose="<b>bold</b>")
    content = changelist(admin_client).content.decode()
    assert "<script>alert(1)" not in content
    # Escaped, then given its line-break opportunities (<wbr> after "/").
    assert "&lt;script&gt;alert(1)&lt;/<wbr>script&gt;" in content
    assert "&lt;b&gt;bold&lt;/<wbr>b&gt;" in content


# --- search, filter, order, pages -----------------------------------------------------------


def test_search_by_name_prefix(admin_client: Client, held) -> None:
    for name in ("reports:daily", "reports:weekly", "emails:digest", "xreports:no"):
        held(name)
    response = changelist(admin_client, q="reports:")
    assert sorted(names_on_page(response)) == ["reports:daily", "reports:weekly"]
    assert response.context["cl"].result_count == 2
    assert 'value="reports:"' in response.content.decode()
    assert "No held lock has a name that starts with “nothing”." in (
        changelist(admin_client, q="nothing").content.decode()
    )


def test_filter_by_alias(admin_client: Client, held, other_alias: str) -> None:
    held("a")
    held("b", using=other_alias)
    held("c", using=other_alias)
    response = changelist(admin_client, alias="other")
    assert sorted(names_on_page(response)) == ["b", "c"]
    content = response.content.decode()
    assert '<li class="selected"><a href="?alias=other">other (2)</a></li>' in content
    assert '<a href="?alias=default">default (1)</a>' in content
    # Search and filter combine; an unknown alias shows every alias.
    assert names_on_page(changelist(admin_client, alias="other", q="c")) == ["c"]
    assert len(names_on_page(changelist(admin_client, alias="nope"))) == 3


def test_newest_first_and_by_expiry(admin_client: Client, held) -> None:
    held("short", ttl=20)
    time.sleep(0.01)
    held("long", ttl=300)
    time.sleep(0.01)
    held("middle", ttl=100)
    # Newest first is the order of acquisition, whatever the leases.
    assert names_on_page(changelist(admin_client)) == ["middle", "long", "short"]
    assert names_on_page(changelist(admin_client, o="expiry")) == ["short", "middle", "long"]
    assert names_on_page(changelist(admin_client, o="name")) == ["long", "middle", "short"]


def test_a_renewal_does_not_make_a_lock_newer(admin_client: Client, held) -> None:
    old = held("old", ttl=60)
    time.sleep(0.01)
    held("young", ttl=60)
    old.extend(ttl=600)  # its lease now ends last, but it was still acquired first
    assert names_on_page(changelist(admin_client)) == ["young", "old"]
    assert names_on_page(changelist(admin_client, o="expiry")) == ["young", "old"]


def test_newest_first_among_locks_of_one_ttl(admin_client: Client, held) -> None:
    for name in ("first", "second", "third"):
        held(name, ttl=60)
        time.sleep(0.01)
    assert names_on_page(changelist(admin_client)) == ["third", "second", "first"]


def test_pagination(admin_client: Client, held) -> None:
    for number in range(250):
        held(f"job:{number:03d}", ttl=60)

    first = changelist(admin_client, o="name")
    assert first.context["cl"].result_count == 250
    assert names_on_page(first) == [f"job:{n:03d}" for n in range(100)]
    content = first.content.decode()
    assert '<span class="this-page">1</span>' in content
    assert '<a href="?o=name&amp;p=2">2</a>' in content
    assert '<a href="?o=name&amp;p=3" class="end">3</a>' in content
    assert "250 held locks" in content

    last = changelist(admin_client, o="name", p=3)
    assert names_on_page(last) == [f"job:{n:03d}" for n in range(200, 250)]
    # Out of range or not a number: the nearest page, as the admin does.
    assert names_on_page(changelist(admin_client, o="name", p=99)) == names_on_page(last)
    assert names_on_page(changelist(admin_client, o="name", p="x")) == names_on_page(first)
    # Searching starts again at page 1 and keeps the order.
    assert '<input type="hidden" name="o" value="name">' in last.content.decode()


def test_only_get_lists(admin_client: Client, redis_backend: str) -> None:
    assert admin_client.post(reverse(CHANGELIST)).status_code == 405


# --- unreachable backends -----------------------------------------------------------------


@pytest.fixture
def down_alias(settings: Any, redis_backend: str) -> str:
    """An alias whose server is not running: nothing listens on its port."""
    settings.DISTLOCK = {
        **settings.DISTLOCK,
        "down": {
            "BACKEND": "distlock.backends.redis.RedisBackend",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
            "OPTIONS": {"socket_timeout": 0.5, "socket_connect_timeout": 0.5},
        },
    }
    locks.reset()
    return "down"


def test_unreachable_alias_shows_a_banner(admin_client: Client, held, down_alias: str) -> None:
    held("still-listed")
    response = changelist(admin_client)
    assert response.status_code == 200
    content = response.content.decode()
    banner = re.search(r'<ul class="messagelist distlock-unavailable">(.*?)</ul>', content, re.S)
    assert banner is not None
    assert "Locks of alias <strong>down</strong> cannot be shown" in banner.group(1)
    assert "did not answer" in banner.group(1)
    assert names_on_page(response) == ["still-listed"]
    # The banner stays when another alias is selected.
    assert "distlock-unavailable" in changelist(admin_client, alias="default").content.decode()


def test_alias_going_down_while_listing(admin_client: Client, private_redis, settings) -> None:
    lock = distlock.lock("going", ttl=60)
    assert lock.acquire(wait=0)
    private_redis.stop()
    response = changelist(admin_client)
    assert response.status_code == 200
    assert "Locks of alias <strong>default</strong> cannot be shown" in response.content.decode()


def test_release_on_unreachable_alias_is_an_error_message(
    admin_client: Client, down_alias: str
) -> None:
    response = admin_client.post(
        reverse(RELEASE), {"alias": down_alias, "name": "x", "fencing_token": 1}, follow=True
    )
    assert response.status_code == 200
    assert any(
        "Nothing was released: alias 'down' cannot be read" in text
        for text in message_texts(response)
    )


def test_broken_distlock_setting_is_a_banner(admin_client: Client, settings) -> None:
    settings.DISTLOCK = ["not", "a", "dict"]
    response = changelist(admin_client)
    assert response.status_code == 200
    assert "Locks of alias <strong>DISTLOCK</strong> cannot be shown" in (response.content.decode())


# --- permissions --------------------------------------------------------------------------


def test_superuser_sees_the_release_button(admin_client: Client, held) -> None:
    lock = held("job")
    content = changelist(admin_client).content.decode()
    assert RELEASE_BUTTON in content
    assert (
        f'href="{reverse(RELEASE)}?alias=default&amp;name=job&amp;fencing_token='
        f"{lock.fencing_token}" in content
    )


def test_view_only_staff_sees_locks_but_cannot_release(staff, held) -> None:
    lock = held("job")
    client = staff("view_heldlock")
    response = changelist(client)
    assert response.status_code == 200
    assert names_on_page(response) == ["job"]
    assert RELEASE_BUTTON not in response.content.decode()
    assert client.get(reverse(RELEASE), release_params(lock)).status_code == 403
    assert client.post(reverse(RELEASE), release_params(lock)).status_code == 403
    assert still_held(lock)


def test_staff_without_view_permission_is_refused(staff, held) -> None:
    lock = held("job")
    client = staff()
    assert changelist(client).status_code == 403
    assert client.post(reverse(RELEASE), release_params(lock)).status_code == 403
    assert "Held locks" not in client.get(reverse("admin:index")).content.decode()
    assert still_held(lock)


def test_release_permission_alone_is_not_enough(staff, held) -> None:
    lock = held("job")
    client = staff("release_heldlock")
    assert changelist(client).status_code == 403
    assert client.post(reverse(RELEASE), release_params(lock)).status_code == 403
    assert still_held(lock)


def test_staff_with_both_permissions_releases(staff, held) -> None:
    lock = held("job")
    client = staff("view_heldlock", "release_heldlock")
    assert RELEASE_BUTTON in changelist(client).content.decode()
    assert client.post(reverse(RELEASE), release_params(lock)).status_code == 302
    assert not still_held(lock)


def test_anonymous_is_sent_to_the_login_page(client: Client, held) -> None:
    lock = held("job")
    for response in (changelist(client), client.post(reverse(RELEASE), release_params(lock))):
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login") + "?next=")
    assert still_held(lock)


def test_non_staff_user_is_sent_to_the_login_page(django_user_model, held) -> None:
    lock = held("job")
    user = django_user_model.objects.create_user("plain", password="pw")
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="distlock"))
    client = Client()
    client.force_login(user)
    response = client.post(reverse(RELEASE), release_params(lock))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))
    assert still_held(lock)


def test_no_add_change_or_delete(admin_client: Client, rf) -> None:
    from django.contrib import admin as django_admin

    model_admin = django_admin.site._registry[HeldLock]
    request = rf.get("/")
    request.user = _superuser()
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)
    assert model_admin.has_view_permission(request)


def _superuser() -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username="admin")


# --- force release ------------------------------------------------------------------------


def test_get_shows_a_confirmation_and_releases_nothing(admin_client: Client, held) -> None:
    lock = held("reports:daily", purpose="nightly report")
    info = lock.backend.info(lock.name)
    response = admin_client.get(reverse(RELEASE), release_params(lock))
    assert response.status_code == 200
    content = response.content.decode()
    for field, value in (
        ("alias", "default"),
        ("name", "reports:daily"),
        ("fencing_token", str(lock.fencing_token)),
        ("holder", f"{info.host}, pid {info.pid}, thread {info.thread}"),
        ("purpose", "nightly report"),
    ):
        assert f'<td class="field-{field}">{value}</td>' in content
    assert '<form method="post">' in content
    assert 'name="csrfmiddlewaretoken"' in content
    assert f'<input type="hidden" name="fencing_token" value="{lock.fencing_token}"' in content
    assert still_held(lock)
    # HEAD is a GET too.
    assert admin_client.head(reverse(RELEASE), release_params(lock)).status_code == 200
    assert still_held(lock)


def test_post_releases_logs_and_signals(admin_client: Client, held) -> None:
    lock = held("reports:daily", purpose="nightly report")
    info = lock.backend.info(lock.name)
    received: list[dict[str, Any]] = []

    def receiver(sender: type, **kwargs: Any) -> None:
        received.append({"sender": sender, **kwargs})

    lock_force_released.connect(receiver)
    try:
        response = admin_client.post(
            reverse(RELEASE),
            {**release_params(lock), "_changelist_filters": "q=reports&p=1&evil=1"},
            follow=True,
        )
    finally:
        lock_force_released.disconnect(receiver)

    assert response.redirect_chain == [(reverse(CHANGELIST) + "?q=reports&p=1", 302)]
    assert any(
        f"Released lock “reports:daily” (alias default, fencing token {lock.fencing_token})" in text
        for text in message_texts(response)
    )
    assert lock.backend.info(lock.name) is None
    assert names_on_page(response) == []

    assert len(received) == 1
    assert received[0]["sender"] is type(lock.backend)
    assert received[0]["name"] == "reports:daily"
    assert received[0]["alias"] == "default"
    assert received[0]["info"].fencing_token == lock.fencing_token

    entry = LogEntry.objects.get()
    assert entry.user == _superuser()
    assert entry.content_type == ContentType.objects.get_for_model(HeldLock)
    assert entry.object_repr == "reports:daily"
    assert entry.object_id == "reports:daily"
    assert entry.action_flag == CHANGE
    message = entry.get_change_message()
    assert f"fencing token {lock.fencing_token}" in message
    assert f"{info.host}, pid {info.pid}, thread {info.thread}" in message
    assert "alias 'default'" in message
    assert "nightly report" in message
    # The admin's "Recent actions" lists it (there is no change page to link to).
    index = admin_client.get(reverse("admin:index")).content.decode()
    assert "reports:daily" in index.split('id="recent-actions-module"')[1]

    # The holder learns it at its next extend() or release().
    with pytest.raises(distlock.LockNotOwned):
        lock.extend()


def test_reentrant_hold_is_released_at_every_depth(admin_client: Client, held) -> None:
    lock = held("deep", reentrant=True)
    assert lock.acquire()
    assert lock.acquire()
    admin_client.post(reverse(RELEASE), release_params(lock))
    assert lock.backend.info("deep") is None


def test_lock_taken_by_someone_else_meanwhile_is_not_released(admin_client: Client, held) -> None:
    first = held("job")
    confirmation = admin_client.get(reverse(RELEASE), release_params(first))
    assert confirmation.status_code == 200
    first.release()
    second = held("job", purpose="the next holder")
    assert second.fencing_token > first.fencing_token
    received: list[Any] = []
    lock_force_released.connect(received.append)
    try:
        response = admin_client.post(reverse(RELEASE), release_params(first), follow=True)
    finally:
        lock_force_released.disconnect(received.append)

    assert still_held(second)
    assert received == []
    assert not LogEntry.objects.exists()
    [text] = message_texts(response)
    assert f"is no longer held with fencing token {first.fencing_token}" in text
    assert f"now held with fencing token {second.fencing_token}" in text
    assert "Nothing was released" in text


def test_lock_released_meanwhile(admin_client: Client, held) -> None:
    lock = held("job")
    params = release_params(lock)
    lock.release()
    response = admin_client.post(reverse(RELEASE), params, follow=True)
    assert message_texts(response) == [
        f"Lock “job” (alias default) is no longer held with fencing token "
        f"{lock.fencing_token}: it was released or expired. Nothing was released."
    ]
    assert not LogEntry.objects.exists()
    # The confirmation page is not shown for a hold that is gone either.
    assert admin_client.get(reverse(RELEASE), params).status_code == 302


def test_lock_changing_between_check_and_release(admin_client: Client, held, monkeypatch) -> None:
    """The token check is in the release itself: a new holder that arrives after the page
    read the lock is not released."""
    first = held("job")
    backend = first.backend
    read = backend.info

    changed: list[distlock.Lock] = []

    def read_then_change_hands(name: str) -> Any:
        info = read(name)
        if not changed:  # only after the page's own read, before force_release's
            first.release()
            changed.append(held("job"))
        return info

    monkeypatch.setattr(backend, "info", read_then_change_hands)
    response = admin_client.post(reverse(RELEASE), release_params(first), follow=True)
    monkeypatch.undo()
    assert still_held(changed[0])
    assert not LogEntry.objects.exists()
    assert "Nothing was released" in message_texts(response)[0]


def test_post_without_csrf_token_is_rejected(django_user_model, held) -> None:
    lock = held("job")
    client = Client(enforce_csrf_checks=True)
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    response = client.post(reverse(RELEASE), release_params(lock))
    assert response.status_code == 403
    assert b"CSRF" in response.content
    assert still_held(lock)

    # The same POST with the token of the confirmation page goes through.
    page = client.get(reverse(RELEASE), release_params(lock))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())
    response = client.post(
        reverse(RELEASE), {**release_params(lock), "csrfmiddlewaretoken": token.group(1)}
    )
    assert response.status_code == 302
    assert not still_held(lock)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"alias": "nope", "name": "job", "fencing_token": "1"},
        {"alias": "default", "name": "job", "fencing_token": "one"},
        {"alias": "default", "name": "", "fencing_token": "1"},
    ],
)
def test_malformed_release_requests(admin_client: Client, held, params) -> None:
    lock = held("job")
    response = admin_client.post(reverse(RELEASE), params)
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    assert still_held(lock)


def test_other_methods_are_not_allowed(admin_client: Client, held) -> None:
    lock = held("job")
    assert admin_client.put(reverse(RELEASE), release_params(lock)).status_code == 405
    assert admin_client.delete(reverse(RELEASE)).status_code == 405
    assert still_held(lock)


def test_release_in_another_alias(admin_client: Client, held, other_alias: str) -> None:
    same_name_default = held("shared-name")
    same_name_other = held("shared-name", using=other_alias)
    admin_client.post(reverse(RELEASE), release_params(same_name_other, alias=other_alias))
    assert not still_held(same_name_other)
    assert still_held(same_name_default)


def test_names_with_any_characters_round_trip(admin_client: Client, held) -> None:
    name = "  spaces {tag} */?&=#% ünï "
    lock = held(name)
    response = changelist(admin_client)
    release_url = response.context["cl"].rows[0].release_url
    assert admin_client.get(release_url).status_code == 200
    admin_client.post(reverse(RELEASE), release_params(lock))
    assert not still_held(lock)
