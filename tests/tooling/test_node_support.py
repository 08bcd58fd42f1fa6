"""devkit/node.py: without Node.js the Node.js client's tests skip, saying why, and
fail instead when DISTLOCK_REQUIRE_NODE is set (CI)."""

from __future__ import annotations

import pytest

from devkit import node
from devkit.node import REQUIRE_ENV


@pytest.fixture
def no_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node.shutil, "which", lambda name: None)


def first(fixture: object) -> object:
    return next(fixture.__wrapped__())  # type: ignore[attr-defined]


def test_missing_node_skips_saying_why(no_node: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="node is not on PATH"):
        first(node.node_client)


def test_missing_node_fails_when_required(no_node: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=f"{REQUIRE_ENV} is set"):
        first(node.node_client)
