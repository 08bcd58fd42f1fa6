"""devkit.tcp_proxy when the machine has no thread to give a connection's pumps."""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest

from devkit.redis_server import RedisServer
from devkit.tcp_proxy import TcpProxy


def test_a_connection_whose_pumps_cannot_start_is_refused_and_the_proxy_serves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A link whose threads could not all start (RuntimeError: can't start new thread, seen
    once in a CI run) is closed; the proxy keeps accepting, and closing it does not fail on
    the threads that never started."""
    real_start = threading.Thread.start
    failures = iter([True])  # the first link's second pump fails to start, no later one

    def start(thread: threading.Thread) -> None:
        if thread.name.startswith("proxy-write-up") and next(failures, False):
            raise RuntimeError("can't start new thread")
        real_start(thread)

    with RedisServer() as server, TcpProxy(("127.0.0.1", server.port)) as proxy:
        monkeypatch.setattr(threading.Thread, "start", start)
        refused = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        served = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        try:
            with contextlib.suppress(ConnectionResetError):  # reset: the proxy aborts it
                assert refused.recv(1) == b""  # closed by the proxy, not left hanging
            served.sendall(b"PING\r\n")
            assert served.recv(64) == b"+PONG\r\n"
        finally:
            refused.close()
            served.close()
        monkeypatch.undo()
        proxy.close()  # joins only the threads that started
