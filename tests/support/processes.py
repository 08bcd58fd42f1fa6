"""Ending the processes a test started: every one stopped, reaped and its pipes closed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable


def end_processes(processes: Iterable[subprocess.Popen], grace: float = 0.0) -> None:
    """Stop every process of ``processes`` still running, then reap each and close its pipes.

    With ``grace``, each gets SIGTERM and up to ``grace`` seconds to exit before SIGKILL;
    without, SIGKILL at once. A process a test paused (SIGSTOP) is resumed first, so that it
    can act on either.
    """
    processes = list(processes)
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
            if grace:
                process.terminate()
            else:
                process.kill()
    for process in processes:
        try:
            process.communicate(timeout=grace or None)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
