"""A fork server for the fault tests: ``python -m tests.faults.zygote`` (see procs.Zygote).

Starting a Python process with Django costs about half a second of CPU; forking one that has
already imported everything costs a millisecond. The fault tests kill and replace lock
holders hundreds of times, so they ask this process to fork them.

Commands arrive as JSON lines on stdin, answers leave as JSON lines on stdout:

* ``{"op": "spawn", "role": "hold", "context": {...}, "kwargs": {...}}`` forks a child that
  runs ``tests.faults.roles.configure(**context)`` (which Redis, which database), then
  ``tests.faults.roles.<role>(**kwargs)``, and exits; answers ``{"pid": N}``.
* ``{"op": "reap", "pid": N}`` waits for that child to exit; answers ``{"status": S}`` (the
  exit code, or minus the signal that ended it).
* ``{"op": "quit"}`` (or end of input) kills the children left and exits.

Children are reaped only when asked: until then a child's pid cannot be reused, so the
controller may signal it directly (SIGKILL, SIGSTOP, SIGCONT) and never hit a stranger.
The zygote opens no database or Redis connection itself, so children share none.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import signal
import sys
import traceback

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.faults.child_settings")
    import django

    django.setup()
    # Imported once, here, not in every child; then frozen, so that the children's garbage
    # collector does not touch (and copy) every page the zygote owns.
    import distlock.backends.django_redis
    import distlock.backends.redis
    import distlock.fencing  # noqa: F401
    import tests.faults.roles  # noqa: F401

    gc.freeze()


def run_child(role: str, context: dict, kwargs: dict) -> None:
    """In the forked child: run the role and exit without returning to the command loop."""
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:  # the zygote died before the death signal was armed
        os._exit(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)  # stdout belongs to the command protocol
    code = 0
    try:
        from tests.faults import roles

        roles.configure(**context)
        getattr(roles, role)(**kwargs)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 70
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def exit_status(status: int) -> int:
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def main() -> None:
    die_with_parent()
    setup()
    children: set[int] = set()
    answer = sys.stdout
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                run_child(command["role"], command["context"], command["kwargs"])
            children.add(pid)
            reply = {"pid": pid}
        elif command["op"] == "reap":
            pid = command["pid"]
            _, status = os.waitpid(pid, 0)
            children.discard(pid)
            reply = {"status": exit_status(status)}
        else:
            break
        answer.write(json.dumps(reply) + "\n")
        answer.flush()
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            os.kill(pid, signal.SIGCONT)
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
