"""clients/ruby/, a client written from docs/protocol.md alone by someone who had not read the
project's code: it passes every check of the conformance runner (python -m tests.conformance)
on one server, shared locks included, and derives every key and script SHA1 of the protocol's
test vectors (clients/ruby/test_vectors.rb), so that a changed vector fails it as it fails the
Python and Node.js checkers. (The runner on a Cluster passes too; it takes about a minute, so
it is run by hand: python -m tests.conformance --cluster -- ruby clients/ruby/conformance.rb.)"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest

from devkit import vectors
from devkit.processes import run_process
from devkit.ruby import Ruby
from tests.interop.test_conformance import CHECKS, conformance
from tests.tooling.test_vectors import mutate


def test_the_ruby_client_passes_the_conformance_runner(ruby_client: Ruby) -> None:
    result = conformance(ruby_client.binary, "clients/ruby/conformance.rb")
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-3000:]
    assert "'distlock-ruby 0.1.0', features ['exclusive', 'shared']" in out
    for check in [*CHECKS, "shared locks"]:
        assert f"PASS  {check}:" in out, check
    assert out.rstrip().endswith("PASSED: 0 of 8 checks failed")


def check_with_ruby(ruby: Ruby, path: Path) -> subprocess.CompletedProcess[str]:
    # Alike in shape to tests/tooling/test_vectors.py's check_with_node (duplicates pairs
    # them): each runs one client's own vector checker, with the one process helper.
    return run_process(
        [ruby.binary, str(ruby.client / "test_vectors.rb"), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_ruby_client_derives_every_vector(ruby_client: Ruby) -> None:
    result = check_with_ruby(ruby_client, vectors.FILE)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    names, scripts = len(vectors.read()["names"]), len(vectors.read()["scripts"])
    refuse = vectors.read()["refuse"]
    negatives = sum(len(refuse[kind]) for kind in ("names", "prefixes", "leases_ms", "tokens"))
    expected = f"ok - {names} names, {scripts} scripts, {negatives} values to refuse"
    assert f"{expected}: every vector derived" in result.stdout


@pytest.mark.parametrize("where", ["bucket", "lock key", "encoding", "script sha1", "refused name"])
def test_changing_one_vector_fails_the_ruby_checker(
    ruby_client: Ruby, tmp_path: Path, where: str
) -> None:
    changed = copy.deepcopy(vectors.read())
    mutate(changed, where)  # the same changes that fail the Python and Node.js checkers
    path = tmp_path / "vectors.json"
    path.write_text(json.dumps(changed, ensure_ascii=False), encoding="utf-8")
    result = check_with_ruby(ruby_client, path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAILED - 1 vector(s) not derived" in result.stdout, result.stdout
