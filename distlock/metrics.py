"""OpenTelemetry metrics of locks and semaphores (docs/observing.md).

Recorded on the meter ``distlock`` when ``opentelemetry-api`` is installed (the ``otel``
extra); the site's OpenTelemetry SDK decides where they go. Without the package, nothing is
imported and ``ENABLED`` is False: every call site in the core checks it first, so a lock
costs one attribute read more than it did before metrics existed.

Attributes: ``distlock.alias``, ``distlock.kind`` (``lock``, ``shared``, ``semaphore``),
``distlock.name`` (never a raw lock name: see metric_name()) and, on waits,
``distlock.outcome`` (``acquired``, ``not_acquired``, ``error``).
"""

from __future__ import annotations

import threading
import time
from functools import lru_cache
from typing import Any, Protocol

# Declared Any, then bound by assignment: an import straight into ``_otel`` redefines the
# name for mypy when opentelemetry-api is not installed (scripts/typecheck checks both ways).
_otel: Any = None
try:
    from opentelemetry import metrics as _otel_metrics

    _otel = _otel_metrics
except ImportError:  # the otel extra is not installed: record nothing
    pass

ENABLED = _otel is not None


class Lock(Protocol):
    """What is read of a distlock.Lock (or Semaphore): a protocol, so that this module does
    not import the lock module, which imports it."""

    name: str
    using: str
    kind: str
    shared: bool
    metric_name: str | None
    # Its alias, kind and name in the metrics, kept at the first record (_form_of).
    _metric_form: tuple[str, str, str] | None


WAIT_DURATION = "distlock.lock.wait.duration"
HOLD_DURATION = "distlock.lock.hold.duration"
LOST = "distlock.lock.lost"
FORCE_RELEASED = "distlock.lock.force_released"

# Histogram buckets in seconds (the SDK's default ones are meant for milliseconds): from a
# free lock's round trip to a cron job's hold.
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)

# How many different names derived from raw lock names (locks made without metric_name) one
# process reports; later ones are reported as OTHER, so that a name made from an order id
# can never make the metric's cardinality grow without bound.
MAX_DERIVED_NAMES = 100
OTHER = "(other)"

_derived: set[str] = set()
_derived_mutex = threading.Lock()


def derived_name(name: str) -> str:
    """Return the bounded form of a raw lock name: the part before its first ``:`` followed
    by ``:*`` (``"pay:42"`` -> ``"pay:*"``), the whole name when it has no ``:``; OTHER once
    MAX_DERIVED_NAMES different forms were reported by this process."""
    head, colon, _ = name.partition(":")
    form = f"{head}:*" if colon else name
    if form in _derived:
        return form
    with _derived_mutex:
        if len(_derived) >= MAX_DERIVED_NAMES:
            return OTHER
        _derived.add(form)
    return form


def metric_name(lock: Lock) -> str:
    """Return the ``distlock.name`` of ``lock``: its ``metric_name`` when one was given (a
    lock_view's or task's template, a command's name), else derived_name() of its name."""
    return lock.metric_name or derived_name(lock.name)


def kind_of(lock: Lock) -> str:
    """Return ``distlock.kind``: ``shared`` for a shared hold, else the class's kind."""
    return "shared" if lock.shared else lock.kind


@lru_cache(maxsize=1024)
def _attributes(form: tuple[str, str, str], outcome: str | None) -> dict[str, str]:
    # Cached: the same few dicts for every recording, never built per acquire.
    alias, kind, name = form
    attributes = {"distlock.alias": alias, "distlock.kind": kind, "distlock.name": name}
    if outcome is not None:
        attributes["distlock.outcome"] = outcome
    return attributes


def attributes_of(lock: Lock, outcome: str | None = None) -> dict[str, str]:
    """Return the attributes recorded for ``lock`` (with ``outcome``, for a wait)."""
    return _attributes(lock._metric_form or _form_of(lock), outcome)


def _form_of(lock: Lock) -> tuple[str, str, str]:
    """Return ``lock``'s alias, kind and name in the metrics, kept on the lock: its
    acquire's wait and its hold record the same ones, looked up once. (kind_of() and
    metric_name(), inlined: a new Lock's every acquire comes here.)"""
    kind = "shared" if lock.shared else lock.kind
    form = (lock.using, kind, lock.metric_name or derived_name(lock.name))
    lock._metric_form = form
    return form


class Instruments:
    """The four instruments on the ``distlock`` meter of ``provider`` (a MeterProvider, or
    the opentelemetry.metrics module for the global one).

    Made on the global provider before the site sets it, they are the API's proxies, which
    start recording once one is set (and cost a no-op until then).
    """

    def __init__(self, provider: Any) -> None:
        meter = provider.get_meter("distlock")
        self.wait = meter.create_histogram(
            WAIT_DURATION,
            unit="s",
            description="Time from acquire() to its outcome (acquired, not acquired, error).",
            explicit_bucket_boundaries_advisory=list(BUCKETS),
        )
        self.hold = meter.create_histogram(
            HOLD_DURATION,
            unit="s",
            description="Time a lock or permit was held, from its grant to its release.",
            explicit_bucket_boundaries_advisory=list(BUCKETS),
        )
        self.lost = meter.create_counter(
            LOST, unit="{lock}", description="Leases lost while held (a renewal found them gone)."
        )
        self.force_released = meter.create_counter(
            FORCE_RELEASED,
            unit="{lock}",
            description="Locks, shared holds and permits force-released (by the admin, "
            "manage.py distlock or code), counted by the backend.",
        )


_instruments = Instruments(_otel) if _otel is not None else None


def use(instruments: Instruments | None) -> None:
    """Record through ``instruments`` from now on (None: record nothing), instead of the
    global meter provider's: for a site that keeps its own provider, and for benchmarks."""
    global ENABLED, _instruments
    _instruments = instruments
    ENABLED = instruments is not None


def now() -> float:
    """Return the clock waits and holds are measured on (0.0 when nothing is recorded)."""
    return time.monotonic() if ENABLED else 0.0


# The two records of every pair read the attributes as attributes_of() does, without its
# call: each Python call is a share of an uncontended pair's client time (issue 42).
def wait_ended(lock: Lock, began: float, outcome: str, ended: float | None = None) -> None:
    """Record an acquire() that began at ``began`` (now()) and ended with ``outcome`` at
    ``ended`` (default: now)."""
    if _instruments is not None:
        until = time.monotonic() if ended is None else ended
        form = lock._metric_form or _form_of(lock)
        _instruments.wait.record(until - began, _attributes(form, outcome))


def hold_ended(lock: Lock, since: float, ended: float | None = None) -> None:
    """Record a hold granted at ``since`` (now()) that ended at ``ended`` (default: now)."""
    if _instruments is not None and since:
        until = time.monotonic() if ended is None else ended
        form = lock._metric_form or _form_of(lock)
        _instruments.hold.record(max(until - since, 0.0), _attributes(form, None))


def lost(lock: Lock) -> None:
    """Count a lease lost while held."""
    if _instruments is not None:
        _instruments.lost.add(1, attributes_of(lock))


def force_released(alias: str, kind: str, name: str) -> None:
    """Count a force release of lock ``name`` (``kind``: a lock, a shared hold, a permit),
    as the backend does once for every caller."""
    if _instruments is not None:
        _instruments.force_released.add(1, _attributes((alias, kind, derived_name(name)), None))
