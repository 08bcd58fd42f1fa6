"""Holder tokens and holder metadata are cut from per-process state (a batch of random bytes,
the cached pid): a forked child must start its own, or it would hand out its parent's next
tokens and report its parent's pid."""

from __future__ import annotations

import json
import os
import threading
import warnings

from distlock.info import holder_metadata
from distlock.tokens import BATCH_TOKENS, new_token


def in_child(produce) -> str:
    """Run ``produce()`` in a forked child; return what it returned (a str)."""
    reading, writing = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
        child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.close(reading)
        os.write(writing, produce().encode())
        os._exit(0)
    os.close(writing)
    with os.fdopen(reading) as pipe:
        produced = pipe.read()
    os.waitpid(child, 0)
    return produced


def test_tokens_are_128_bit_hex_and_never_repeat_across_batches_and_threads() -> None:
    found: list[str] = []

    def draw() -> None:
        found.extend(new_token() for _ in range(3 * BATCH_TOKENS))

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == len(set(found)) == 12 * BATCH_TOKENS
    assert all(len(token) == 32 and int(token, 16) >= 0 for token in found)


def test_a_forked_child_never_hands_out_its_parents_next_token() -> None:
    new_token()  # a batch is loaded, with tokens left in it
    child_tokens = in_child(lambda: " ".join(new_token() for _ in range(5))).split()
    parent_tokens = [new_token() for _ in range(5)]
    assert len(child_tokens) == 5
    assert not set(child_tokens) & set(parent_tokens)


def test_a_forked_child_reports_its_own_pid() -> None:
    assert json.loads(holder_metadata("x"))["pid"] == os.getpid()
    child_metadata = in_child(lambda: holder_metadata("x") + f"|{os.getpid()}")
    metadata, _, child_pid = child_metadata.rpartition("|")
    assert json.loads(metadata)["pid"] == int(child_pid) != os.getpid()
