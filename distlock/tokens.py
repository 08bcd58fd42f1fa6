"""Holder tokens: 128 bits from the operating system's random source, never reused.

One ``os.urandom`` call per token is one system call per acquire, a noticeable share of an
uncontended acquire+release. Tokens are therefore cut from a batch of random bytes read at
once. A forked child drops its parent's batch, so the two never hand out the same token.
"""

from __future__ import annotations

import os
import threading

# What starts a shared holder's token: the scripts tell a shared waiter from an exclusive one
# by it (backends/redis_ops/lua/include/hand_over.lua); never the start of a hex token.
SHARED_MARK = "~"
# What starts a non-fair exclusive acquirer's token (fair=False): acquire.lua lets it take a
# free lock whoever is queued, and release.lua only wakes the longest waiter when it releases
# (include/lapsed.lua, include/wake_head.lua); never the start of a hex token either.
NON_FAIR_MARK = "!"

TOKEN_BYTES = 16
TOKEN_DIGITS = 2 * TOKEN_BYTES  # hexadecimal
BATCH_TOKENS = 256  # tokens per read of the random source


class _TokenSource:
    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._batch = ""  # hexadecimal digits of random bytes
        self._offset = 0

    def new_token(self) -> str:
        """Return 32 hexadecimal digits no other call, thread or process returns."""
        with self._mutex:
            start = self._offset
            if start >= len(self._batch):
                # Hexed once per batch: each token is then a slice of it.
                self._batch, start = os.urandom(TOKEN_BYTES * BATCH_TOKENS).hex(), 0
            self._offset = start + TOKEN_DIGITS
            batch = self._batch
        return batch[start : start + TOKEN_DIGITS]

    def forget(self) -> None:
        """Drop the batch (and a mutex another thread may have held) in a forked child."""
        self._mutex = threading.Lock()
        self._batch, self._offset = "", 0


_source = _TokenSource()
new_token = _source.new_token

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_source.forget)
