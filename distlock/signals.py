"""Signals sent as locks change hands. The sender is the backend class; every signal has
the keyword arguments ``name``, ``alias`` and ``info`` (a LockInfo, or None); ``lock_lost``
also ``reason``, what LockLost says (the server's eviction of the key, when it evicted it).
``lock_force_released`` is sent by the backend, whoever asked for the release."""

from typing import Any

from django.dispatch import Signal


class LockSignal(Signal):
    """A Signal that answers ``has_listeners`` at once when nobody connected to it.

    Locks ask before building the LockInfo they would send, on every acquire and release;
    Django's has_listeners walks its receivers even when there are none, which cost more
    than the rest of a release's Python.
    """

    def has_listeners(self, sender: Any = None) -> bool:
        return bool(self.receivers) and super().has_listeners(sender)


lock_acquired = LockSignal()
lock_released = LockSignal()
lock_contended = LockSignal()
lock_lost = LockSignal()
lock_force_released = LockSignal()
