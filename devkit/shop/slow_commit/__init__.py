"""Database engines whose COMMIT takes SHOP_COMMIT_DELAY seconds longer, like a commit that
waits for a disk or a replica (the report this test grew from measured 2-12 ms): the window
in which a lock released before COMMIT lets the next holder read the rows as they were.

ENGINE ``devkit.shop.slow_commit.postgresql`` or ``devkit.shop.slow_commit.mysql``:
Django's own backend, with the delay before the driver's commit.
"""

from __future__ import annotations

import os
import time
from typing import Any


def slowed(wrapper: type[Any]) -> type[Any]:
    """Return a subclass of a DatabaseWrapper whose commits wait SHOP_COMMIT_DELAY first."""
    delay = float(os.environ.get("SHOP_COMMIT_DELAY", "0.005"))

    class DatabaseWrapper(wrapper):  # type: ignore[misc, valid-type]
        def _commit(self) -> None:
            time.sleep(delay)
            super()._commit()

    return DatabaseWrapper
