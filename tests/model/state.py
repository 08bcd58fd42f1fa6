"""One state of the model: the server's time and data, each client's state, and what the
invariants remember (the last fencing token granted). A state is a plain value; its
``key()`` is the same for two states that differ only by where they sit in time and by the
serial numbers of the tokens, so the explorer visits each such state once."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from .client import Client
from .clock import EPOCH_MS
from .server import Data

TOKEN = re.compile(r"~?t([A-C])(\d{4})")
# Server times (ms) and µs stamps are told from other numbers by their size.
MS_RANGE = (EPOCH_MS - 10**8, EPOCH_MS + 10**8)
US_RANGE = (MS_RANGE[0] * 1000, MS_RANGE[1] * 1000)


@dataclasses.dataclass(frozen=True)
class World:
    now_ms: int
    data: Data
    clients: tuple[Client, ...]
    last_fence: int = 0  # the greatest fencing token (or permit) granted so far
    micro: int = 0  # µs past now_ms (one per script call since the last tick)

    def key(self) -> str:
        """This state with every time relative to now and tokens renumbered per client."""
        shift = _Relative(self.now_ms, self.micro)
        parts: list[Any] = [shift.data(self.data)]
        for client in self.clients:
            parts.append(client.relative(self.now_ms))
        parts.append(shift.number(self.last_fence))
        text = repr(parts)
        return _renumber(text)


class _Relative:
    """Write the server's absolute times relative to now (a time in the past as just that:
    the scripts only compare it with now)."""

    def __init__(self, now_ms: int, micro: int) -> None:
        self.now_ms, self.now_us = now_ms, now_ms * 1000 + micro

    def number(self, value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if not isinstance(value, int):
            return value
        if MS_RANGE[0] < value < MS_RANGE[1]:
            return f"ms{max(value - self.now_ms, -1)}"
        if US_RANGE[0] < value < US_RANGE[1]:
            return f"us{max(value - self.now_us, -1)}"
        return value

    def text(self, value: str) -> str:
        return " ".join(str(self.number(word)) for word in value.split(" "))

    def data(self, data: Data) -> tuple[Any, ...]:
        out = []
        for name, kind, value, expiry in data:
            if kind == "string":
                value = self.text(value)
            elif kind in ("zset", "hash"):
                value = tuple(
                    (m, self.number(s) if kind == "zset" else self.text(s)) for m, s in value
                )
            out.append((name, kind, value, None if expiry is None else self.number(expiry)))
        return tuple(out)


def _renumber(text: str) -> str:
    """Number each client's tokens 0, 1, ... in order of their serials."""
    serials: dict[str, list[int]] = {}
    for who, serial in TOKEN.findall(text):
        serials.setdefault(who, []).append(int(serial))
    mapping = {
        (who, serial): rank
        for who, found in serials.items()
        for rank, serial in enumerate(sorted(set(found)))
    }

    def renamed(match: re.Match[str]) -> str:
        who, serial = match[1], int(match[2])
        return match[0][:-5] + f"{who}{mapping[who, serial]:04d}"

    return TOKEN.sub(renamed, text)
