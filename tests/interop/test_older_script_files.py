"""A client of the other languages pointed at the script files of an older distlock (issue
42's lean calls). docs/protocol.md, Compatibility: "A client that leaves them out needs script
files that make them optional (...); with older files, it sends them". The older files are
today's with issue 42's edits undone: acquire.lua reads ARGV[6] (waited) to leave the queue,
and release.lua and leave_queue.lua take the grace as they are sent it (no default)."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import redis

import distlock
from devkit.node import Node
from devkit.paths import ROOT
from devkit.processes import child_env, end_processes, start_process
from devkit.ruby import Ruby
from distlock.handler import locks

LUA = ROOT / "distlock" / "backends" / "redis_ops" / "lua"
pytestmark = pytest.mark.django_db(databases=[])

# (file, today's text, the older files' text): issue 42's edits of the three scripts.
UNDONE = (
    ("release.lua", "-- ARGV[4]  grace     optional: ms", "-- ARGV[4]  grace     ms"),
    ("release.lua", "local grace = ARGV[4] or '250'", "local grace = ARGV[4]"),
    ("leave_queue.lua", "-- ARGV[2]  grace     optional: ms", "-- ARGV[2]  grace     ms"),
    ("leave_queue.lua", "local grace = ARGV[2] or '250'", "local grace = ARGV[2]"),
    ("acquire.lua", "-- ARGV[6]  waited    optional, ignored:", "-- ARGV[6]  waited   "),
    ("acquire.lua", "-- ARGV[7]  grace     optional: ms", "-- ARGV[7]  grace     ms"),
    (
        "acquire.lua",
        "if queue_exists and redis.call('ZREM', KEYS[3], ARGV[1])",
        "if ARGV[6] == '1' and redis.call('ZREM', KEYS[3], ARGV[1])",
    ),
)

NODE_WORKER = ROOT / "tests" / "interop" / "node_worker.mjs"
RUBY_HOLDER = """
require ARGV[0]
$stdout.sync = true
client = Distlock::Client.new(url: ARGV[1], prefix: 'test', scripts_dir: ARGV[2])
held = client.acquire(ARGV[3], ttl_ms: 20_000, wait_ms: 0) or raise 'held by someone'
puts 'held'
$stdin.gets
begin
  puts(client.release(ARGV[3], held.token) ? 'released' : 'not-owned')
rescue StandardError => e
  puts "error #{e.class}: #{e.message}"
end
"""


def older_script_files(folder: Path) -> Path:
    """Copy the lua folder to ``folder`` with issue 42's edits undone."""
    shutil.copytree(LUA, folder)
    for name, today, older in UNDONE:
        path = folder / name
        text = path.read_text(encoding="utf-8")
        assert text.count(today) >= 1, (name, today)
        path.write_text(text.replace(today, older), encoding="utf-8")
    return folder


def start_holder(
    client: str, request: pytest.FixtureRequest, url: str, scripts: Path, folder: Path
) -> subprocess.Popen[str]:
    """A Node.js or Ruby process holding lock "compat" through ``scripts``: it says "held",
    and on a line "release" releases it and says "released" (anything else: it failed)."""
    env = child_env()
    if client == "node":
        node: Node = request.getfixturevalue("node_client")
        env["DISTLOCK_NODE_URL"], env["DISTLOCK_LUA_DIR"] = url, str(scripts)
        command = [node.binary, str(NODE_WORKER), "hold", "compat", "20", "older files"]
    else:
        ruby: Ruby = request.getfixturevalue("ruby_client")
        program = folder / "holder.rb"
        program.write_text(RUBY_HOLDER, encoding="utf-8")
        library = str(ruby.client / "distlock_client")
        command = [ruby.binary, str(program), library, url, str(scripts), "compat"]
    return start_process(command, env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("client", ["node", "ruby"])
def test_a_release_hands_the_lock_on_through_older_script_files(
    client: str, request: pytest.FixtureRequest, redis_backend: str, tmp_path: Path
) -> None:
    scripts = older_script_files(tmp_path / "lua")
    holder = start_holder(client, request, redis_backend, scripts, tmp_path)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().split()[:1] == ["held"]
        got: list[bool] = []
        waiter = threading.Thread(
            target=lambda: got.append(distlock.lock("compat", ttl=5).acquire(wait=10))
        )
        waiter.start()
        queue = locks["default"].layout.keys_for("compat").waiters
        data = redis.Redis.from_url(redis_backend)
        deadline = time.monotonic() + 5
        while not data.zcard(queue) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert data.zcard(queue) == 1  # the Python waiter is queued
        holder.stdin.write("release\n")
        holder.stdin.flush()
        said = [line.strip() for line in holder.stdout]  # until it ends
        released = time.monotonic()
        waiter.join(15)
        # Before the fix: release.lua's older text got no grace, and failed after it had
        # deleted the lock (a script's writes before an error stay): no handoff, no reply.
        assert said[-1:] == ["released"], said
        assert got == [True] and time.monotonic() - released < 2  # handed on, not lapsed
    finally:
        end_processes([holder])
