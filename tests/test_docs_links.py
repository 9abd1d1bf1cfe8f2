"""Every link between the README and the docs leads somewhere: the file exists and, when the link
names a section, the file has a heading of that name (as GitHub makes its anchor)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors: each heading lower-cased, punctuation dropped, spaces as hyphens; a
    repeated heading gets -1, -2, ..."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def local_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [link for link in LINK.findall(text) if not re.match(r"[a-z]+:", link)]


def test_the_anchor_of_a_heading_is_githubs() -> None:
    assert anchors("## Failure rules: `trainhook.io/failure-policy`\n## The gang's minimum\n") == {
        "failure-rules-trainhookiofailure-policy",
        "the-gangs-minimum",
    }


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_local_link_names_a_file_and_a_heading_that_exist(page: Path) -> None:
    broken = []
    for link in local_links(page):
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        missing = not path.exists()
        if missing or (anchor and path.suffix == ".md" and anchor not in anchors(path.read_text())):
            broken.append(link)
    assert broken == []
