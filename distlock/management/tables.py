"""Plain-text tables for ``manage.py distlock``."""

from __future__ import annotations


def aligned(header: list[str], rows: list[list[str]], *, show_alias: bool) -> str:
    """Return ``header`` and ``rows`` as aligned columns. Each row starts with its alias,
    shown (under an ALIAS column) only when ``show_alias``."""
    if show_alias:
        header = ["ALIAS", *header]
    else:
        rows = [row[1:] for row in rows]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )
