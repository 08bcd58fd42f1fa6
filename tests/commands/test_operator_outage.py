"""What operators are told while a lock server is down: the state is unknown, so nothing may
say that no lock is held. One alias's redis-server is killed while another keeps running:
``manage.py distlock`` in real processes and in this one, and the admin page."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

import distlock
from devkit.configs import with_alias_down
from devkit.paths import ROOT
from devkit.processes import child_env, run_process
from devkit.redis_server import RedisServer
from distlock.handler import locks
from distlock.management.commands.distlock import UNKNOWN_EXIT_CODE

CHANGELIST = "admin:distlock_heldlock_changelist"


@pytest.fixture
def down(settings: Any, redis_url: str) -> Iterator[RedisServer]:
    """Alias "default" on a running Redis holding 'reports:daily'; alias "down" on a
    redis-server that held 'emails:digest' and was then killed."""
    server = RedisServer().start()
    try:
        settings.DISTLOCK, settings.CACHES = with_alias_down(redis_url, server.url)
        locks.reset()
        assert distlock.lock("reports:daily", ttl=60, purpose="report").acquire(wait=0)
        assert distlock.lock("emails:digest", ttl=60, using="down").acquire(wait=0)
        server.kill()
        yield server
    finally:
        server.stop()
        locks.reset()


def manage(redis_url: str, server: RedisServer, *arguments: str) -> tuple[int, str, str]:
    """Run ``manage.py distlock ARGUMENTS`` with the two aliases of ``down``; Django's common
    options (--settings, -v) come after the action, as an operator may type them."""
    env = child_env(python_path=False, url=redis_url, down_url=server.url)
    done = run_process(
        [
            sys.executable,
            "manage.py",
            "distlock",
            *arguments,
            "--settings",
            "tests.support.outage_settings",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("output", [[], ["--json"]], ids=["table", "json"])
def test_list_with_an_alias_down_lists_nothing_and_fails(
    redis_url: str, down: RedisServer, output: list[str]
) -> None:
    code, out, err = manage(redis_url, down, "list", *output)
    assert (code, out) == (UNKNOWN_EXIT_CODE, ""), (code, out, err)
    assert "CommandError: DISTLOCK['down']: " in err
    assert (
        "Nothing is listed: what is held there is unknown. List the others with --using "
        "ALIAS (default)." in err
    )


def test_the_alias_that_answers_is_listed_on_request(redis_url: str, down: RedisServer) -> None:
    code, out, err = manage(redis_url, down, "list", "--using", "default", "-v", "0")
    assert code == 0, (code, out, err)
    assert out.splitlines()[1].startswith("reports:daily ")


@pytest.mark.django_db(databases=[])
@pytest.mark.parametrize(
    "action",
    [
        ["list"],
        ["list", "--json"],
        ["info", "emails:digest"],
        ["info", "emails:digest", "--json"],
        ["release", "emails:digest", "--yes"],
    ],
    ids=" ".join,
)
def test_nothing_is_shown_for_the_alias_that_is_down(down: RedisServer, action: list[str]) -> None:
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"^DISTLOCK\['down'\]: ") as raised:
        call_command("distlock", *action, "--using", "down", stdout=out)
    assert raised.value.returncode == UNKNOWN_EXIT_CODE
    assert out.getvalue() == ""


# --- the admin ---------------------------------------------------------------------------


def page(client: Client, **params: Any) -> tuple[Any, str]:
    response = client.get(reverse(CHANGELIST), params)
    assert response.status_code == 200
    return response, re.sub(r"\s+", " ", response.content.decode())


@pytest.mark.django_db
def test_admin_lists_the_alias_that_answers_and_counts_nothing_for_the_other(
    admin_client: Client, down: RedisServer
) -> None:
    response, content = page(admin_client)
    assert [row.info.name for row in response.context["cl"].rows] == ["reports:daily"]
    assert "Locks of alias <strong>down</strong> cannot be shown" in content
    assert ">default (1)</a>" in content and ">down (unavailable)</a>" in content
    assert "down (0)" not in content
    assert "1 held lock in default; not counted: down (unavailable)" in content

    response, content = page(admin_client, alias="down")
    assert response.context["cl"].rows == []
    assert "What alias down holds is unknown: it could not be read." in content
    assert "No lock is held" not in content and "held lock" not in content.split("paginator")[-1]

    response, content = page(admin_client, q="nothing-like-this")
    assert (
        "No lock whose name starts with “nothing-like-this” is held in default. What alias "
        "down holds is unknown" in content
    )


@pytest.mark.django_db
def test_admin_with_its_only_alias_down_claims_nothing(
    admin_client: Client, private_redis: RedisServer
) -> None:
    assert distlock.lock("going", ttl=60).acquire(wait=0)
    private_redis.kill()
    _, content = page(admin_client)
    assert "What alias default holds is unknown: it could not be read." in content
    assert ">default (unavailable)</a>" in content
    assert "No lock is held" not in content and "0 held locks" not in content


@pytest.mark.django_db(databases=[])
@pytest.mark.parametrize(
    "action",
    [["list"], ["list", "--json"], ["info", "exports"], ["release", "exports", "--yes"]],
    ids=" ".join,
)
def test_semaphores_that_cannot_be_read_show_nothing(
    redis_backend: str, monkeypatch: Any, action: list[str]
) -> None:
    """The lock listing answered, the semaphore one did not: still nothing is shown."""
    assert distlock.lock("reports:daily", ttl=60).acquire(wait=0)
    assert distlock.semaphore("exports", 2, ttl=60).acquire(wait=0)
    backend = distlock.locks["default"]

    def unreachable(*args: Any) -> None:
        raise distlock.BackendUnavailable("Redis at the test server did not answer.")

    for read in ("list", "describe"):
        monkeypatch.setattr(backend.semaphores, read, unreachable)
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"^DISTLOCK\['default'\]: Redis at the test") as raised:
        call_command("distlock", *action, stdout=out)
    assert raised.value.returncode == UNKNOWN_EXIT_CODE
    assert out.getvalue() == ""
