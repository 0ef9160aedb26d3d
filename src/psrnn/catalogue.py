"""The config catalogue: every file in config/ and what it is for, read from the files.

    python -m psrnn config --list                                  # on the terminal
    python -m psrnn config --list --markdown > config/README.md    # the committed page

A runnable suite config (one psrnn.config.load_suite accepts) states in its own file what
the catalogue shows of it, none of it inherited through `extends:`: `description:` (its
purpose) and `catalogue: {hardware, cost}` (what it runs on, and what it cost there, each
number with the file that holds it). Its results folder is results/<name> of the config
resolved. Every other file is listed apart: its kind (KINDS, by a key only that kind has)
and the first sentence of its header comment. tests/test_catalogue.py checks that the
committed config/README.md is `markdown()` of the committed files, so the page and
`--list` cannot drift apart.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from psrnn import config as C
from psrnn import registry

CONFIG_DIR = C.ROOT / "config"
# A key that only this kind of file holds (a suite config's schema refuses each) -> the kind
KINDS = {
    "recipes": "recipe study (`python -m psrnn recipe --study <file>`)",
    "$defs": "JSON Schema of suite configs",
    "paper": "reference numbers of a paper",
}
NOT_STATED = "not stated in the file"


@dataclass(frozen=True)
class Suite:
    """A runnable suite config as the catalogue shows it."""

    file: str  # its name in config/
    study: str  # a name of registry.STUDIES
    extends: str | None
    description: str
    hardware: str
    cost: str
    results: str  # results/<name>/


@dataclass(frozen=True)
class Other:
    """A file in config/ that is not a suite config: a reference table, a schema, a recipe."""

    file: str
    kind: str
    about: str  # the first sentence of its header comment


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def header_sentence(text: str) -> str:
    """The first sentence of a YAML file's opening comment (up to its first blank line)."""
    words = []
    for line in text.splitlines():
        body = line[1:].strip() if line.startswith("#") else ""
        if not body:
            break
        words.append(body)
    para = " ".join(words)
    end = re.search(r"[.?](?=\s|$)", para)
    return para[: end.end()] if end else para


def entries(paths: list[Path] | None = None) -> tuple[list[Suite], list[Other]]:
    """The catalogue of `paths` (default: every config/*.yaml): the suite configs by study
    (registry order), then file; the other files by file."""
    paths = sorted(paths if paths is not None else CONFIG_DIR.glob("*.yaml"))
    suites, others = [], []
    for path in paths:
        own = C.read_yaml(path)
        kind = next((k for key, k in KINDS.items() if isinstance(own, dict) and key in own), None)
        if kind is not None:
            others.append(Other(path.name, kind, header_sentence(path.read_text())))
            continue
        cfg = C.load_yaml(path)  # extends: merged, for the name (load_suite checks the rest)
        listed = own.get("catalogue") or {}
        suites.append(
            Suite(
                file=path.name,
                study=registry.study_name(cfg),
                extends=own.get("extends"),
                description=one_line(own.get("description") or NOT_STATED),
                hardware=one_line(listed.get("hardware") or NOT_STATED),
                cost=one_line(listed.get("cost") or NOT_STATED),
                results=f"results/{cfg.get('name', '?')}/",
            )
        )
    order = list(registry.STUDIES)
    suites.sort(key=lambda s: (order.index(s.study) if s.study in order else len(order), s.file))
    return suites, others


def by_study(suites: list[Suite]) -> list[tuple[str, list[Suite]]]:
    """[(the study's title, its suite configs)] in the catalogue's order."""
    groups: dict[str, list[Suite]] = {}
    for s in suites:
        groups.setdefault(s.study, []).append(s)
    titles = {name: f"{name}: {st.title}" for name, st in registry.STUDIES.items()}
    return [(titles.get(name, name), group) for name, group in groups.items()]


def sharing(suites: list[Suite], suite: Suite) -> str:
    """The note `(with b.yaml)` when other configs write the same results folder (one name)."""
    others = [s.file for s in suites if s.results == suite.results and s is not suite]
    return f" (with {', '.join(others)})" if others else ""


def text(suites: list[Suite], others: list[Other], width: int = 100) -> str:
    """The catalogue for a terminal: one block per suite config, then the other files."""

    def wrapped(value: str, first: str, rest: str) -> list[str]:
        return textwrap.wrap(
            value, width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False
        )

    out = []
    for title, group in by_study(suites):
        out += [f"Suite configs, study {title}", ""]
        for s in group:
            extends = f" (extends {s.extends})" if s.extends else ""
            out.append(f"config/{s.file}{extends} -> {s.results}{sharing(suites, s)}")
            for label, value in (("purpose", s.description), ("hardware", s.hardware), ("cost", s.cost)):
                out += wrapped(value, f"  {label:9s}", " " * 11)
        out.append("")
    out += ["Not suite configs", ""]
    for o in others:
        out += wrapped(f"config/{o.file}: {o.kind}. {o.about}", "", "  ")
    return "\n".join(out) + "\n"


MARKDOWN_HEAD = """\
# Configuration

<!-- Written by `python -m psrnn config --list --markdown > config/README.md` from the files
in this folder (psrnn.catalogue); tests/test_catalogue.py checks that it is current. Edit a
config's `description:` and `catalogue:` instead. -->

Each run of the workflow is one *suite config*: its datasets, experiments, grids and seeds.
Pick one with `--configfile`; without one, Snakemake runs `small.yaml` (a few CPU-minutes).

```bash
uv run --frozen snakemake --cores all --configfile config/<file>   # the whole DAG
uv run --frozen python -m psrnn config config/<file>               # validate, list its runs
uv run --frozen python -m psrnn config --list                      # this page
```

Each config is validated against [schema.yaml](schema.yaml) (JSON Schema 2020-12) before
any job starts. A config may `extends:` another and change only what differs; a file of
your own here (say `mine.yaml`, with a `name:` of its own) gets its own results folder;
one that keeps another file's `name:` (a copy of small.yaml) is refused unless it extends
that file, as paper-dbpedia.yaml shares paper.yaml's folder.
The rows below come from each config's own `description:` and `catalogue: {hardware,
cost}`, never from the file it extends ("not stated in the file" where it has none).

Cost: measured where the config was run, else estimated from measured step times, each
with the file that holds the number; "not measured" where none does.
"""


def cell(value: str) -> str:
    return value.replace("|", "\\|")


def markdown(suites: list[Suite], others: list[Other]) -> str:
    """config/README.md: the suite configs' table, then the other files'."""
    rows = []
    for title, group in by_study(suites):
        rows += ["", f"## Suite configs, study {title}", ""]
        rows += ["| config | purpose | hardware | cost | results |", "|---|---|---|---|---|"]
        for s in group:
            name = f"[{s.file}]({s.file})" + (f" (extends {s.extends})" if s.extends else "")
            fields = (s.description, s.hardware, s.cost, f"`{s.results}`{sharing(suites, s)}")
            rows.append(f"| {name} | " + " | ".join(cell(f) for f in fields) + " |")
    rest = ["", "## Other files", "", "Not suite configs: `psrnn config` refuses them.", ""]
    rest += ["| file | kind | what it is |", "|---|---|---|"]
    rest += [f"| [{o.file}]({o.file}) | {cell(o.kind)} | {cell(o.about)} |" for o in others]
    return MARKDOWN_HEAD + "\n".join(rows + rest) + "\n"
