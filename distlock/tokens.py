"""Holder tokens: 128 bits from the operating system's random source, never reused.

One ``os.urandom`` call per token is one system call per acquire, a noticeable share of an
uncontended acquire+release. Tokens are therefore cut from a batch of random bytes read at
once. A forked child drops its parent's batch, so the two never hand out the same token.
"""

from __future__ import annotations

import os

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
        self._batch: list[str] = []  # tokens of one read of the random source, not handed out

    def new_token(self) -> str:
        """Return 32 hexadecimal digits no other call, thread or process returns."""
        # No mutex (taking one cost more than the rest of this): list.pop() hands each token
        # out once, atomically, whichever threads ask. Threads that find the batch empty at
        # once each read a batch of their own, and every batch is new random bytes.
        try:
            return self._batch.pop()
        except IndexError:
            # Hexed and cut once per batch, in C: a space after every TOKEN_BYTES bytes.
            batch = os.urandom(TOKEN_BYTES * BATCH_TOKENS).hex(" ", TOKEN_BYTES).split()
            token = batch.pop()
            self._batch = batch
            return token

    def forget(self) -> None:
        """Drop the batch in a forked child."""
        self._batch = []


_source = _TokenSource()
new_token = _source.new_token

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_source.forget)
