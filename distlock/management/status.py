"""``manage.py distlock status``: which server answered for each alias (address, Redis or
Valkey and its version, role, maxmemory-policy, latency), or why none did; and the line
that names them at the top of ``distlock list``.

Exit status: 0 when every server of every alias answered, UNKNOWN_EXIT_CODE (3) when one did
not (what it holds is unknown), 1 for a DISTLOCK that cannot be used.
"""

from __future__ import annotations

from typing import Any

from ..backends.base import BaseLockBackend
from ..backends.redis_ops.server_info import ServerReport


def backend_label(backend: BaseLockBackend) -> str:
    """Return the backend's class and where it keeps its locks (no password)."""
    where = getattr(backend, "address", "") or "this process, no server"
    return f"{type(backend).__name__} at {where}"


def status_lines(alias: str, backend: BaseLockBackend, reports: list[ServerReport]) -> list[str]:
    """Return what ``distlock status`` says of ``alias``: its backend, then one line per
    server."""
    lines = [f"{alias}: {backend_label(backend)}"]
    lines += [f"  {report.describe()}" for report in reports]
    return lines


def status_json(
    alias: str, backend: BaseLockBackend, reports: list[ServerReport]
) -> dict[str, Any]:
    return {
        "alias": alias,
        "backend": type(backend).__name__,
        "address": getattr(backend, "address", "") or None,
        "servers": [report.as_json_dict() for report in reports],
    }


def server_line(alias: str, backend: BaseLockBackend, reports: list[ServerReport]) -> str:
    """Return the line at the top of ``distlock list`` naming what answered for ``alias``."""
    answered = [
        f"{report.product} {report.version} at {report.address} ({report.role})"
        for report in reports
        if not report.error
    ]
    if not reports:
        return f"DISTLOCK[{alias!r}]: {backend_label(backend)}"
    silent = len(reports) - len(answered)
    missing = f"; {silent} of {len(reports)} did not answer" if silent else ""
    return f"DISTLOCK[{alias!r}]: {', '.join(answered) or 'no server answered'}{missing}"
