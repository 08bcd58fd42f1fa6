"""The conformance runner (python -m tests.conformance): the Node.js client, wrapped in the
line protocol (clients/node/conformance.mjs), passes every check it claims; a client that
breaks the protocol fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from devkit.node import Node
from devkit.paths import ROOT
from devkit.processes import run_process

CHECKS = [
    "hello",
    "mutual exclusion, queue order, fencing",
    "holder metadata",
    "giving up a wait; a lapsed lease",
    "SIGKILLed client holder taken over",
    "SIGKILLed distlock holder taken over by the client",
    "exclusive acquire respects shared holders",
]
# A client that says it holds every lock it is asked for, without asking the server.
LIAR = """
import json, os, sys
for line in sys.stdin:
    r = json.loads(line)
    out = {"id": r["id"], "ok": True}
    if r["op"] == "hello":
        out.update(client="liar", features=["exclusive"])
    elif r["op"] == "acquire":
        out.update(acquired=True, token=os.urandom(16).hex(), fencing="1")
    elif r["op"] in ("release", "extend"):
        out[r["op"] + "d"] = True
    else:
        out["holder"] = None
    print(json.dumps(out), flush=True)
"""


def conformance(*command: str) -> subprocess.CompletedProcess[str]:
    return run_process(
        [sys.executable, "-m", "tests.conformance", "--rounds", "50", "--", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_node_client_passes_the_conformance_runner(node_client: Node) -> None:
    result = conformance(node_client.binary, "clients/node/conformance.mjs")
    out = result.stdout
    assert result.returncode == 0, out + result.stderr[-3000:]
    for check in CHECKS:
        assert f"PASS  {check}:" in out, check
    assert "SKIP  shared locks: the client does not claim 'shared'" in out
    assert out.rstrip().endswith("PASSED: 0 of 8 checks failed")


def test_a_client_that_breaks_the_protocol_fails(tmp_path: Path) -> None:
    liar = tmp_path / "liar.py"
    liar.write_text(LIAR)
    result = conformance(sys.executable, str(liar))
    assert result.returncode == 1
    out = result.stdout
    assert "PASS  hello:" in out
    for check in CHECKS[1:]:
        assert f"FAIL  {check}:" in out, check
    assert "FAILED: 6 of 8 checks failed" in out
