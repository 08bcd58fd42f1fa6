"""A TCP proxy for network faults: forwards 127.0.0.1:<port> to a server (Redis), adding
latency, dropping traffic (a blackhole) or resetting connections on demand::

    with TcpProxy(("127.0.0.1", redis_port)) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/0"
        proxy.latency = 0.2           # seconds added to every chunk, both ways
        proxy.blackhole = True        # read and drop everything, both ways; connections stay up
        proxy.drop_next_reply()       # lose the server's next answer only
        proxy.cut_next_request()      # close the connection the client next writes to
        proxy.reset()                 # RST every open connection (new ones are accepted)

Each direction of each connection has a reader thread, which timestamps chunks as they
arrive, and a writer thread, which sends them once ``latency`` has passed: delays do not add
up when a client pipelines, and the order of bytes is kept.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import struct
import threading
import time
from types import TracebackType

_CLOSE = b""  # queued by a reader when its side closed


class TcpProxy:
    """Forward connections on 127.0.0.1:``port`` to ``target`` with controllable faults."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.latency = 0.0
        self.blackhole = False
        self._drop_replies = 0
        self._cut_requests = 0
        self._guard = threading.Lock()
        self._links: list[_Link] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)

    def start(self) -> TcpProxy:
        self._acceptor.start()
        return self

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def drop_next_reply(self, count: int = 1) -> None:
        """Lose the next ``count`` chunks the server sends (the request did arrive)."""
        with self._guard:
            self._drop_replies += count

    def cut_next_request(self, count: int = 1) -> None:
        """Close the connection on which a client next sends something, without passing it
        on: the request never reaches the server, and the client reads the end of the
        connection where it waits for the reply. (A pooled connection the server or a
        middlebox dropped after the pool checked it looks like this.)"""
        with self._guard:
            self._cut_requests += count

    def cuts_pending(self) -> int:
        """How many of the cuts asked for have not happened yet."""
        with self._guard:
            return self._cut_requests

    def _take_drop(self) -> bool:
        with self._guard:
            if self._drop_replies:
                self._drop_replies -= 1
                return True
            return False

    def _take_cut(self) -> bool:
        with self._guard:
            if self._cut_requests:
                self._cut_requests -= 1
                return True
            return False

    def reset(self) -> None:
        """Abort every open connection with a TCP RST (as a crashed middlebox would)."""
        with self._guard:
            links, self._links = self._links, []
        for link in links:
            link.abort()

    def connections(self) -> int:
        with self._guard:
            self._links = [link for link in self._links if not link.closed]
            return len(self._links)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.reset()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                _abort(client)
                continue
            link = _Link(self, client, server)
            with self._guard:
                self._links.append(link)
            try:
                link.start()
            except RuntimeError:  # no thread to be had: refuse this connection, keep serving
                link.abort()


class _Link:
    """One proxied connection: client -> server ("up") and server -> client ("down")."""

    def __init__(self, proxy: TcpProxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self.closed = False
        # Both ends of the real path (redis-py, redis-server) turn Nagle's algorithm off; left
        # on here, a reply in two chunks (a pipeline's) can sit 40 ms for a delayed ACK.
        for sock in (client, server):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._threads = [
            threading.Thread(target=pump, args=args, daemon=True, name=f"proxy-{name}")
            for name, pump, args in self._pumps()
        ]

    def _pumps(self):  # type: ignore[no-untyped-def]
        up: queue.Queue[tuple[float, bytes]] = queue.Queue()
        down: queue.Queue[tuple[float, bytes]] = queue.Queue()
        return [
            ("read-up", self._read, (self.client, up, False)),
            ("write-up", self._write, (self.server, up)),
            ("read-down", self._read, (self.server, down, True)),
            ("write-down", self._write, (self.client, down)),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _read(
        self, source: socket.socket, out: queue.Queue[tuple[float, bytes]], reply: bool
    ) -> None:
        while True:
            try:
                chunk = source.recv(65536)
            except OSError:
                chunk = _CLOSE
            if not chunk or (not reply and self.proxy._take_cut()):
                out.put((0.0, _CLOSE))
                return
            if self.proxy.blackhole or (reply and self.proxy._take_drop()):
                continue
            out.put((time.monotonic() + self.proxy.latency, chunk))

    def _write(self, target: socket.socket, source: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            due, chunk = source.get()
            if not chunk:
                self.close()
                return
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            try:
                target.sendall(chunk)
            except OSError:
                self.close()
                return

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def abort(self) -> None:
        self.closed = True
        _abort(self.client)
        _abort(self.server)
        # A reader blocked in recv() holds the socket open: the RST leaves only once it has
        # returned. Wait for that, so the client can be reset before reset() returns.
        readers = [thread for thread in self._threads if thread.name.startswith("proxy-read")]
        for thread in readers:
            # A start that failed left some unstarted: nothing to wait for there.
            if thread.ident is not None and thread is not threading.current_thread():
                thread.join(timeout=2)


def _abort(sock: socket.socket) -> None:
    """Close with an RST rather than a FIN: SO_LINGER on, with a timeout of zero. Shutting
    the reading side first wakes the thread blocked in recv() without sending anything."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()
