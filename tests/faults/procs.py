"""Processes for the fault tests: a zygote (fork server) and the children it forks, which the
tests kill (SIGKILL), pause (SIGSTOP) and resume (SIGCONT)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from devkit.processes import child_env, start_process


class Zygote:
    """``python -m tests.faults.zygote``, and the children it forks (see zygote.py)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._process: subprocess.Popen[str] | None = None
        self._guard = threading.Lock()

    def start(self) -> Zygote:
        env = child_env(settings="tests.faults.child_settings")
        with open(self.log, "a") as log:
            self._process = start_process(
                [sys.executable, "-m", "tests.faults.zygote"],
                env,
                text=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        return self

    def spawn(self, role: str, context: dict[str, Any], **kwargs: Any) -> Child:
        """Fork a child running ``tests.faults.roles.<role>(**kwargs)``."""
        reply = self._ask({"op": "spawn", "role": role, "context": context, "kwargs": kwargs})
        return Child(self, reply["pid"])

    def reap(self, pid: int) -> int:
        return int(self._ask({"op": "reap", "pid": pid})["status"])

    def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        process = self._process
        assert process is not None and process.stdin and process.stdout
        with self._guard:
            process.stdin.write(json.dumps(command) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote died; see {self.log}:\n{self.log_tail()}")
        return json.loads(line)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def close(self) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            assert process.stdin is not None
            try:
                process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                process.stdin.close()
            except BrokenPipeError:
                pass
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()  # its children die with it (PR_SET_PDEATHSIG)
                process.wait()
        if process.stdout:
            process.stdout.close()
        self._process = None


class Child:
    """A process forked by the zygote. Signals go straight to its pid: it stays a (maybe
    zombie) child of the zygote until wait() reaps it, so the pid cannot have been reused."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote = zygote
        self.pid = pid
        self.status: int | None = None  # set once reaped

    def __repr__(self) -> str:
        return f"<Child {self.pid} {'exited ' + str(self.status) if self.reaped else 'live'}>"

    @property
    def reaped(self) -> bool:
        return self.status is not None

    def send(self, sig: int) -> None:
        if not self.reaped:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send(signal.SIGKILL)

    def pause(self) -> None:
        self.send(signal.SIGSTOP)

    def resume(self) -> None:
        self.send(signal.SIGCONT)

    def exited(self) -> bool:
        """Return True once the process has ended (a zombie waiting to be reaped)."""
        if self.reaped:
            return True
        try:
            with open(f"/proc/{self.pid}/stat") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        return state in ("Z", "X")

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the child to exit (killing it after ``timeout``), reap it, return its
        status: the exit code, or minus the signal that ended it."""
        if self.reaped:
            return self.status  # type: ignore[return-value]
        deadline = time.monotonic() + timeout
        while not self.exited():
            if time.monotonic() > deadline:
                self.kill()
                self.resume()
                break
            time.sleep(0.005)
        self.status = self.zygote.reap(self.pid)
        return self.status
