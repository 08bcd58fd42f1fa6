"""What recording metrics costs an uncontended acquire+release (issue 27's acceptance 4),
measured in the uncontended section's interleaved rounds: distlock on the same name with no
metrics (as without opentelemetry-api), with the SDK installed but no reader configured (the
global meter provider left unset: the API's proxies), and with the SDK's MeterProvider and an
in-memory reader collecting every point (as a site exporting its metrics does).

Each case switches distlock.metrics to its instruments before its pair and back to the
global ones after it (as distlock starts: the section's other distlock cases run so), so all
three pay the same (tiny) switch; the ratios are paired per round, like the section's others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distlock import metrics

from . import anchors
from .harness import paired_ratio, summary

OFF = "distlock | no metrics"
NO_READER = "distlock | OpenTelemetry SDK installed, no reader"
READER = "distlock | OpenTelemetry SDK, in-memory reader"
NAME = "otel:same-name"


def available() -> bool:
    try:
        import opentelemetry.sdk.metrics  # noqa: F401
    except ImportError:
        return False
    return True


def cases(url: str) -> dict[str, Callable[[], object]]:
    """The three cases, or none when the SDK is not installed (reported as such)."""
    if not available():
        return {}
    from opentelemetry import metrics as global_metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    states = {
        OFF: None,
        # Nothing in the benchmark sets the global provider: as a site that installed the
        # SDK and configured no reader.
        NO_READER: metrics.Instruments(global_metrics),
        READER: metrics.Instruments(MeterProvider(metric_readers=[InMemoryMetricReader()])),
    }
    make = anchors.lock_factory(anchors.DISTLOCK, url)
    pair = anchors.pair(make, lambda: NAME)

    started = metrics.Instruments(global_metrics) if metrics.ENABLED else None

    def case(instruments: metrics.Instruments | None) -> Callable[[], object]:
        def call() -> None:
            metrics.use(instruments)
            try:
                pair()
            finally:
                metrics.use(started)

        return call

    return {name: case(instruments) for name, instruments in states.items()}


def result(rates: dict[str, list[float]]) -> dict[str, Any]:
    """Each case's rate, and the rate with metrics over the rate without, per round."""
    if OFF not in rates:
        return {"skipped": "opentelemetry-sdk is not installed"}
    return {
        "rates": {name: summary(rates[name]) for name in (OFF, NO_READER, READER)},
        "no_reader_vs_off": round(paired_ratio(rates[NO_READER], rates[OFF]), 3),
        "reader_vs_off": round(paired_ratio(rates[READER], rates[OFF]), 3),
    }
