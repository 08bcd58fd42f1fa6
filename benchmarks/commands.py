"""What one uncontended acquire+release asks of the server, per library: the calls the client
sends, the arguments of each (the command's name not counted), and every command the server
runs for the pair (a script's own commands counted too), read from MONITOR.

MONITOR shows each command as the server ran it, arguments quoted one by one, with ``lua``
for a command a script ran. The pairs run on a name of their own, after one warm-up pair
(scripts loaded, connections open), and every library is read the same way.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import redis

from . import anchors

PAIRS = 20
END = "commands:end"  # an ECHO that tells the reader the pairs are done
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
# A MONITOR line: "<time> [<db> <client>] "COMMAND" "arg" ...": the client is "lua" for a
# command a script ran.
_LINE = re.compile(r"^\S+ \[\d+ (?P<client>\S+)\] (?P<command>.*)$", re.DOTALL)


def run(url: str) -> dict[str, dict[str, float]]:
    """Per library: client calls, arguments per call and server commands, per pair."""
    return {library: _count(library, url) for library in anchors.UNCONTENDED_LIBRARIES}


def _count(library: str, url: str) -> dict[str, float]:
    make = anchors.lock_factory(library, url)
    name = f"commands:{library.split()[0]}"
    _pair(make, name)  # warm-up: scripts loaded, connections open
    lines = _monitored(url, lambda: [_pair(make, name) for _ in range(PAIRS)])
    calls = [args for client, args in lines if client != "lua"]
    return {
        "client_calls_per_pair": len(calls) / PAIRS,
        "arguments_per_call": round(sum(len(args) - 1 for args in calls) / max(len(calls), 1), 1),
        "server_commands_per_pair": len(lines) / PAIRS,
    }


def _pair(make: Any, name: str) -> None:
    lock = make(name)
    lock.acquire()
    lock.release()


def _monitored(url: str, work: Any) -> list[tuple[str, list[str]]]:
    """Run ``work()`` while MONITOR reads the server; return (client, arguments) of each
    command it ran meanwhile, this reader's own commands left out."""
    client = redis.Redis.from_url(url)
    lines: list[tuple[str, list[str]]] = []
    started = threading.Event()

    def read() -> None:
        with client.monitor() as monitor:
            started.set()
            while True:
                raw = monitor.connection.read_response()
                line = raw.decode() if isinstance(raw, bytes) else str(raw)
                match = _LINE.match(line)
                if match is None:
                    continue
                args = [arg[1:-1] for arg in _QUOTED.findall(match["command"])]
                if args[:2] == ["ECHO", END]:
                    return
                lines.append((match["client"], args))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    started.wait(10)
    client.ping()  # MONITOR is on once its first reply came: this reaches it after
    work()
    client.echo(END)
    reader.join(30)
    # This reader's own connection: its greeting and the PING.
    return [(who, args) for who, args in lines if args[:1] not in (["PING"], ["HELLO"])]
