"""The front hall (issue 34): docs/index.md links every page in docs/ with one line each, and
the README, CONTRIBUTING and the licence a newcomer looks for exist and point at it."""

from __future__ import annotations

import re

from devkit.paths import ROOT

DOCS = ROOT / "docs"
INDEX = (DOCS / "index.md").read_text()


def linked_pages() -> list[str]:
    return re.findall(r"^- \[[^\]]+\]\(([^)#]+\.md)\): \S", INDEX, re.M)


def test_the_index_links_every_page_once_each_on_a_line_of_its_own() -> None:
    pages = sorted(path.name for path in DOCS.glob("*.md") if path.name != "index.md")
    links = linked_pages()
    assert sorted(links) == pages, "docs/index.md lists every page in docs/, one line each"


def test_every_link_of_the_index_names_a_file_that_exists() -> None:
    for target in re.findall(r"\]\(([^)#]+)\)", INDEX):
        assert (DOCS / target).resolve().is_file(), target


def test_the_readme_and_contributing_lead_to_the_index_and_the_licence_is_bsd_3() -> None:
    assert "(docs/index.md)" in (ROOT / "README.md").read_text()
    assert "docs/index.md" in (ROOT / "CONTRIBUTING.md").read_text()
    assert (ROOT / "LICENSE").read_text().startswith("BSD 3-Clause License")
    assert (ROOT / "CHANGELOG.md").is_file()
