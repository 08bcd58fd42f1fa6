"""devkit/ruby.py: without ruby (or redis-rb) the Ruby client's tests skip, saying why,
and fail instead when DISTLOCK_REQUIRE_RUBY is set (CI)."""

from __future__ import annotations

import pytest

from devkit import ruby
from devkit.ruby import REQUIRE_ENV


@pytest.fixture
def no_ruby(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ruby.shutil, "which", lambda name: None)


def run(fixture: object) -> object:
    return fixture.__wrapped__()  # type: ignore[attr-defined]


def test_missing_ruby_skips_saying_why(no_ruby: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="ruby is not on PATH"):
        run(ruby.ruby_client)


def test_missing_ruby_fails_when_required(no_ruby: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=f"{REQUIRE_ENV} is set"):
        run(ruby.ruby_client)
