"""Delaying proxies in a process of their own: ``python -m benchmarks.latency_proxy PORT...``.

One devkit.tcp_proxy.TcpProxy per Redis port on 127.0.0.1. The process prints the proxies'
ports (one JSON list), then reads one delay in seconds per line from stdin, gives it to every
proxy as its one-way latency and answers ``ok``; it exits when stdin closes.

A process of its own, so that the proxies' threads never wait for the benchmark's GIL (nor
the benchmark for theirs): in the same process a forwarded reply could sit until the timing
thread gave up the interpreter. Its timer slack is cut to 1 ns, so the proxies' sleeps end
when due rather than up to 50 us later.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import sys

from devkit.tcp_proxy import TcpProxy

PR_SET_TIMERSLACK = 29  # prctl(2)


def _tight_timers() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)


def main(ports: list[int]) -> None:
    _tight_timers()
    proxies = [TcpProxy(("127.0.0.1", port)).start() for port in ports]
    print(json.dumps([proxy.port for proxy in proxies]), flush=True)
    try:
        for line in sys.stdin:
            delay = float(line)
            for proxy in proxies:
                proxy.latency = delay
            print("ok", flush=True)
    finally:
        for proxy in proxies:
            proxy.close()


if __name__ == "__main__":
    main([int(port) for port in sys.argv[1:]])
