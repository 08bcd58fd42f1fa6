"""The OpenTelemetry SDK's in-memory reader, installed once per test process as the global
meter provider (OpenTelemetry allows one), with delta temporality: each ``collect()``
returns what was recorded since the one before."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pytest

_lock = threading.Lock()
_reader: Any = None


@dataclass(frozen=True)
class Point:
    """One data point: its instrument, unit, attributes, and value (a histogram's count and
    sum, a counter's value)."""

    instrument: str
    unit: str
    attributes: dict[str, str]
    count: int
    total: float


def reader() -> Any:
    """Return the process's InMemoryMetricReader, installing it on first use; skip the test
    when the SDK is not installed (the ``otel`` extra is optional)."""
    global _reader
    pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
    from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader

    with _lock:
        if _reader is None:
            delta = AggregationTemporality.DELTA
            _reader = InMemoryMetricReader(preferred_temporality={Counter: delta, Histogram: delta})
            metrics.set_meter_provider(MeterProvider(metric_readers=[_reader]))
        return _reader


def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start a test from nothing recorded and no derived names (a long run of earlier tests
    takes this process past distlock.metrics.MAX_DERIVED_NAMES)."""
    from distlock import metrics

    reader()
    collect()
    monkeypatch.setattr(metrics, "_derived", set())


def collect() -> list[Point]:
    """Return the points recorded on the ``distlock`` meter since the last collect()."""
    data = reader().get_metrics_data()
    points: list[Point] = []
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            if scope.scope.name != "distlock":
                continue
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    histogram = hasattr(point, "bucket_counts")
                    points.append(
                        Point(
                            metric.name,
                            metric.unit or "",
                            dict(point.attributes or {}),
                            point.count if histogram else int(point.value),
                            point.sum if histogram else float(point.value),
                        )
                    )
    return points
