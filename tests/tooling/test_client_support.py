"""devkit/node.py and ruby.py: without Node.js (or ruby, or redis-rb) the other
clients' tests skip, saying why, and fail instead when DISTLOCK_REQUIRE_NODE (or
DISTLOCK_REQUIRE_RUBY) is set (CI). One scenario, run for each client."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from devkit import node, ruby

# Each client's binary: its support module, and its fixture's first value (node's fixture is
# a generator, ruby's returns its value).
CLIENTS: dict[str, tuple[ModuleType, Any]] = {
    "node": (node, lambda: next(node.node_client.__wrapped__())),  # type: ignore[attr-defined]
    "ruby": (ruby, lambda: ruby.ruby_client.__wrapped__()),  # type: ignore[attr-defined]
}


@pytest.fixture(params=list(CLIENTS))
def missing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Return the client's binary, support module and fixture's first value, without the
    binary on PATH."""
    support, first = CLIENTS[request.param]
    monkeypatch.setattr(support.shutil, "which", lambda name: None)
    return request.param, support, first


def test_a_missing_client_skips_saying_why(missing: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    binary, support, first = missing
    monkeypatch.delenv(support.REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"{binary} is not on PATH"):
        first()


def test_a_missing_client_fails_when_required(
    missing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, support, first = missing
    monkeypatch.setenv(support.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=f"{support.REQUIRE_ENV} is set"):
        first()
