"""Tests of the lock core: the lock contract on every backend, semaphores, the cache,
transactions, tokens, names, listing and settings checks."""
