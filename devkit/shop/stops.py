"""Where a shop request that stops its own worker says so (devkit/shop/fenced.py): no
Django import, so that the test process can read it too."""

from __future__ import annotations

import tempfile
from pathlib import Path


def stop_file(database: str, order_id: int) -> Path:
    """Where a stopped request of shop database ``database`` writes its pid and token."""
    return Path(tempfile.gettempdir()) / f"shop-stops-{database}" / str(order_id)
