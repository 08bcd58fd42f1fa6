"""One client process speaking the conformance line protocol (tests/conformance/README.md):
started with the runner's environment, sent one JSON request per line, answered one JSON
object per line, in order."""

from __future__ import annotations

import itertools
import json
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devkit.processes import child_env, start_process

# How long past its own wait an answer may take before the client counts as hung.
ANSWER_MARGIN = 15.0


class ClientFailed(Exception):
    """The client answered an error, answered out of order, or did not answer in time."""


class LineClient:
    """A client process; ``call(op, ...)`` returns its reply (``ok`` true) or raises."""

    def __init__(self, label: str, command: Sequence[str], env: dict[str, str], cwd: Path) -> None:
        self.label = label
        self.process = start_process(
            command,
            child_env(**env),
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            start_new_session=True,  # killed with its children (a wrapper's)
        )
        self.pid = self.process.pid
        self.replies: queue.Queue[str | None] = queue.Queue()
        self.ids = itertools.count(1)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.replies.put(line)
        self.replies.put(None)

    def call(self, op: str, timeout: float = ANSWER_MARGIN, **fields: Any) -> dict[str, Any]:
        request_id = next(self.ids)
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps({"id": request_id, "op": op, **fields}) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise ClientFailed(f"{self.label}: the process ended before {op}") from None
        try:
            line = self.replies.get(timeout=timeout)
        except queue.Empty:
            raise ClientFailed(f"{self.label}: no answer to {op} in {timeout:.0f} s") from None
        if line is None:
            raise ClientFailed(f"{self.label}: the process ended instead of answering {op}")
        try:
            reply: dict[str, Any] = json.loads(line)
        except ValueError:
            raise ClientFailed(
                f"{self.label}: {op} answered a line that is no JSON: {line!r}"
            ) from None
        if reply.get("id") != request_id:
            raise ClientFailed(
                f"{self.label}: {op} answered id {reply.get('id')}, not {request_id}"
            )
        if reply.get("ok") is not True:
            raise ClientFailed(f"{self.label}: {op} {fields} failed: {reply.get('error')}")
        return reply

    def acquire(
        self,
        name: str,
        ttl_ms: int,
        wait_ms: int | None,
        shared: bool = False,
        purpose: str | None = None,
    ) -> dict[str, Any]:
        timeout = ANSWER_MARGIN + (600 if wait_ms is None else wait_ms / 1000)
        return self.call(
            "acquire",
            timeout,
            name=name,
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            shared=shared,
            purpose=purpose,
        )

    def release(self, name: str, token: str, shared: bool = False) -> bool:
        return bool(self.call("release", name=name, token=token, shared=shared)["released"])

    def kill(self) -> None:
        """SIGKILL the client (and whatever it started): a crash."""
        if self.process.poll() is None:
            os.killpg(self.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def close(self) -> None:
        """End the client: EOF on stdin, then a kill if it does not exit."""
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.close()
                self.process.wait(timeout=10)
            except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
                self.kill()
