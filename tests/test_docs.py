"""The README and the docs/ pages: a short README, links that resolve, and commands that
exist (a `python -m psrnn <command>` the CLI has). Paths the pages name are checked by
tests/test_workflow.py::test_every_path_a_document_names_exists."""

import re
from pathlib import Path

import pytest

from psrnn import config as C
from psrnn.cli import COMMANDS

ROOT = C.ROOT
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_short_and_opens_with_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 100, len(lines)
    block = lines[lines.index("```bash") + 1 : lines.index("```")]
    assert [x.split("#")[0].split("&& ")[1].strip() for x in block] == [
        ".tools/bin/uv run --frozen snakemake --cores all --configfile config/small.yaml",
        ".tools/bin/uv run --frozen pytest",
    ]
    # uv into a folder of its own: pip's --target is no install into Debian's externally
    # managed Python (PEP 668), which refused `pip install uv`
    assert all(x.startswith("python3 -m pip install -q --target .tools uv==") for x in block)
    assert "uv run --frozen pytest" in (ROOT / ".ci" / "run").read_text()  # CI runs the same
    assert len(PAGES) >= 10  # the rest lives in docs/


@pytest.mark.parametrize("page", PAGES)
def test_every_link_of_a_page_resolves(page):
    text = (ROOT / page).read_text()
    targets = [t for t in LINK.findall(text) if not t.startswith(("http://", "https://", "mailto:"))]
    missing = [t for t in targets if not ((ROOT / page).parent / t).exists()]
    assert missing == [], missing


@pytest.mark.parametrize("page", PAGES)
def test_every_psrnn_command_a_page_shows_exists(page):
    used = set(re.findall(r"python -m psrnn ([a-z][\w-]*)", (ROOT / page).read_text()))
    assert used - set(COMMANDS) == set(), used - set(COMMANDS)


def test_the_pages_are_the_readmes_table_of_contents():
    readme = (ROOT / "README.md").read_text()
    for page in Path(ROOT / "docs").glob("*.md"):
        assert f"(docs/{page.name})" in readme, page.name
