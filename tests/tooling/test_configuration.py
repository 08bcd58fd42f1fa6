"""Configuration in one file where the tools allow (issue 34): setup.cfg holds the metadata,
extras and the settings of pytest, coverage and mypy; ruff, which cannot read setup.cfg, has
ruff.toml; pyproject.toml holds the build system only."""

from __future__ import annotations

import configparser
import tomllib

from devkit.paths import ROOT

SCATTERED = ("pytest.ini", ".coveragerc", "mypy.ini", ".mypy.ini", "tox.ini", ".flake8", "setup.py")


def test_pyproject_holds_the_build_system_only() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert list(pyproject) == ["build-system"], list(pyproject)


def test_setup_cfg_holds_the_tools_that_read_it() -> None:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    for section in ("metadata", "options.extras_require", "tool:pytest", "coverage:run", "mypy"):
        assert setup.has_section(section), section


def test_ruff_reads_ruff_toml_and_nothing_else_is_scattered() -> None:
    assert "line-length" in tomllib.loads((ROOT / "ruff.toml").read_text())
    assert not [name for name in SCATTERED if (ROOT / name).exists()]
