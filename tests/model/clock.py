"""Time in the model: the server's virtual clock, and each client's monotonic clock.

Nothing here reads real time: the server's clock moves only when the explorer takes a tick
step, and a client's clock is a function of the server's (its rate: 0.99 runs 1% slow)."""

from __future__ import annotations

import dataclasses

EPOCH_MS = 1_700_000_000_000  # the server's clock when a run starts (16-digit µs, as today)


@dataclasses.dataclass
class ServerClock:
    """The virtual clock fakeredis reads (as the ``time`` module it imported)."""

    now_ms: int = EPOCH_MS
    micro: int = 0  # µs past now_ms: each script call takes one, as no two run in the same µs

    def time(self) -> float:
        """The clock keys expire by: whole ms, as Redis' (a key expires once it is past)."""
        return self.now_ms / 1000

    def time_us(self) -> float:
        """The clock ``TIME`` reads: µs."""
        return self.now_ms / 1000 + self.micro / 1_000_000


def local(rate: float, server_ms: int) -> float:
    """A client's monotonic clock (ms) at server time ``server_ms``: it reads 0 at the epoch
    and runs at ``rate`` of the server's clock."""
    return (server_ms - EPOCH_MS) * rate


def server_time_of(rate: float, local_ms: float) -> int:
    """The first server ms at which a clock of ``rate`` reads ``local_ms`` or later."""
    server = EPOCH_MS + int(local_ms / rate)
    while local(rate, server) < local_ms:
        server += 1
    return server
