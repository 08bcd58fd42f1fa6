"""The protocol's test vectors (distlock/backends/redis_ops/lua/vectors.json): the Python code
and the Node.js client both derive what the file says, and a change to any one vector fails
both checkers (so the file cannot drift from either)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devkit import vectors
from devkit.node import Node
from devkit.paths import ROOT
from devkit.processes import child_env, run_process

NODE_TEST = ROOT / "clients" / "node" / "test" / "vectors.test.mjs"


def test_the_file_holds_what_the_code_derives() -> None:
    assert vectors.mismatches(vectors.read(), vectors.build()) == []


def test_the_names_include_the_awkward_ones() -> None:
    names = [entry["name"] for entry in vectors.read()["names"]]
    for needle in ("{", "}", "|", ":", " ", "🔒", "é"):
        assert any(needle in name for name in names), needle
    assert max(len(name) for name in names) == 1024
    assert max(len(name.encode()) for name in names) == 4096  # 1024 four-byte characters


def test_every_script_file_has_its_sha1() -> None:
    files = {path.stem for path in vectors.FILE.parent.glob("*.lua")}
    assert set(vectors.read()["scripts"]) == files


def test_distlock_refuses_every_negative_vector() -> None:
    refuse = vectors.read()["refuse"]
    for entry in refuse["names"]:
        assert vectors.refuses(vectors.validate_name, entry["name"]), entry
    for entry in refuse["prefixes"]:
        assert vectors.refuses(vectors.parse_prefix, "default", entry["prefix"]), entry
    for prefix in refuse["accepted_prefixes"]:
        assert not vectors.refuses(vectors.parse_prefix, "default", prefix), prefix
    for lease in refuse["leases_ms"]:
        assert vectors.refuses(vectors.lease_milliseconds, "ttl", lease / 1000), lease
    for lease in refuse["accepted_leases_ms"]:
        assert not vectors.refuses(vectors.lease_milliseconds, "ttl", lease / 1000), lease
    for token in refuse["tokens"]:
        assert vectors.refuses(vectors.check_token, token), token


def check_with_python(path: Path) -> subprocess.CompletedProcess[str]:
    return run_process(
        [sys.executable, "-m", "devkit.vectors", "check", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def check_with_node(node: Node, path: Path) -> subprocess.CompletedProcess[str]:
    return run_process(
        [node.binary, "--test", str(NODE_TEST)],
        cwd=ROOT,
        env=child_env(DISTLOCK_VECTORS=str(path)),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_node_client_derives_every_vector(node_client: Node) -> None:
    result = check_with_node(node_client, vectors.FILE)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def test_the_node_clients_own_tests_pass(node_client: Node) -> None:
    # clients/node/test/: the vectors, and a KEY_PREFIX with braces refused
    result = run_process(
        [node_client.binary, "--test", "test/"],
        cwd=node_client.client,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout


def mutate(data: dict[str, Any], where: str) -> None:
    entry = data["names"][2]  # "order {42}" under the default prefix
    if where == "bucket":
        entry["bucket"] = (entry["bucket"] + 1) % 1024
    elif where == "lock key":
        entry["keys"]["lock"] = entry["keys"]["lock"].replace("%7B", "{")
    elif where == "encoding":
        entry["encoded"] = entry["encoded"].lower()
    elif where == "refused name":
        data["refuse"]["names"][0]["name"] = "a valid name"
    else:
        name = next(iter(data["scripts"]))
        data["scripts"][name] = "0" * 40


@pytest.mark.parametrize("where", ["bucket", "lock key", "encoding", "script sha1", "refused name"])
def test_changing_one_vector_fails_both_checkers(
    node_client: Node, tmp_path: Path, where: str
) -> None:
    original = vectors.read()
    changed = copy.deepcopy(original)
    mutate(changed, where)
    assert changed != original
    path = tmp_path / "vectors.json"
    path.write_text(json.dumps(changed, ensure_ascii=False), encoding="utf-8")
    python, node = check_with_python(path), check_with_node(node_client, path)
    assert python.returncode == 1, python.stdout + python.stderr
    assert node.returncode != 0, node.stdout[-2000:]
    # ... and the unchanged file passes both the same way (the failures are the change's)
    path.write_text(json.dumps(original, ensure_ascii=False), encoding="utf-8")
    assert check_with_python(path).returncode == 0
    assert check_with_node(node_client, path).returncode == 0
