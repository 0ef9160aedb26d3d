"""`python -m psrnn explain`: the runs behind one cell of a compiled table, and the cell's
value and verdict recomputed from them.

    python -m psrnn explain --config config/relreg-full.yaml --table table45 --row lstm_l2 --column 14
    python -m psrnn explain --config config/mnist-real.yaml --table table2 --row mnist_gru

The config's study knows its tables (its `explain`, psrnn.registry): which runs a cell
counts, their values, and the cell's numbers and verdict from the code that compiles them.
This module prints what every run records alike: its folder and seed, its grid point (under
`ties: draw`, which draw), its training-code digest and machine (metrics.json), and the
commands that make it, as the Snakefile's jobs run them (tests/test_explain.py holds those
to the Snakefile's text). A table, row or column the study does not have is one line that
lists the valid ones.
"""

from __future__ import annotations

import argparse
import csv
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn import registry
from psrnn.errors import UserError
from psrnn.report.collect import Run, read_selection
from psrnn.report.provenance import machine_text


@dataclass(frozen=True)
class Cell:
    """One table cell as its study explains it."""

    table: str  # the table's output name ("table45")
    title: str  # what the table is
    row: str  # the row, as the table names it
    column: str
    experiment: str | None  # whose runs the cell counts (None: no experiment, no runs)
    runs: tuple[Run, ...]  # the runs the cell counts, in seed order
    values: tuple[float | None, ...]  # each run's value in the cell (`unit`), runs' order
    unit: str
    lines: tuple[str, ...]  # what the cell holds: the paper's value, ours recomputed, the verdict
    left_out: tuple[tuple[Run, str], ...] = ()  # the experiment's runs the cell does not count, and why


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="suite config (YAML)")
    p.add_argument("--table", required=True, help="a compiled table's name (table45, table2, ...)")
    p.add_argument("--row", required=True, help="the row: its experiment, or the model the table names")
    p.add_argument("--column", default=None, help="the column where the table has several (14 or '14 bits')")


def run(args: argparse.Namespace) -> int:
    cfg = C.load_suite(args.config)
    study = registry.study_of(cfg)
    if study.explain is None:
        raise UserError(f"explain: study {study.name} explains none of its tables")
    explain = registry.load(study.explain)
    cell = explain(cfg, C.results_root(cfg), C.ROOT / study.reference, args.table, args.row, args.column)
    print("\n".join(cell_lines(cfg, args.config, cell)))
    return 0


def pick(what: str, given: str | None, valid: dict[str, str], where: str) -> str:
    """The name in `valid` (name -> what the table calls it) that `given` names, by its name
    or by the table's name for it where that names one; else a UserError of one line that
    lists the valid ones (`what`: "table", "row", "column"; `where`: whose they are)."""
    listed = ", ".join(f"{k} ({v})" if v and v != k else k for k, v in valid.items())
    if given is not None:
        if given in valid:
            return given
        named = [k for k, v in valid.items() if v == given]
        if len(named) == 1:
            return named[0]
        if named:
            raise UserError(f"--{what} {given!r} names {len(named)} {what}s of {where}: {', '.join(named)}")
    said = (
        f"--{what} {given!r} is no {what} of {where}"
        if given is not None
        else f"--{what} is needed for {where}"
    )
    raise UserError(f"{said}; valid: {listed or 'none'}")


def compiled_row(path: Path, match: dict[str, str]) -> dict[str, str] | None:
    """The row of a compiled table's CSV whose columns hold `match`'s values (None: no such
    file or row)."""
    if not path.is_file():
        return None
    with path.open(newline="") as f:
        return next((r for r in csv.DictReader(f) if all(r.get(k) == v for k, v in match.items())), None)


# --- what every run records alike -----------------------------------------------------------


def point_text(cfg: dict[str, Any], results_dir: Path, run: Run) -> str:
    """The grid point a final run trained, from its experiment's selected.json: the selected
    one, or under `ties: draw` the point it drew ("draw 3 of 20: tied point 3 of 18")."""
    from psrnn.engine.selection import draw_order, overrides_for

    sel = read_selection(cfg, results_dir, run.experiment)
    if sel is None:
        return "no grid (fixed settings)"
    point, _ = overrides_for(sel, run.seed)
    draws = sel.get("draws") or []
    if not draws:
        return f"{point} (selected)"
    i = next(k for k, d in enumerate(draws) if d.get("seed") == run.seed)
    tied = draw_order(run.experiment, list(sel.get("tied") or []))
    j = tied.index(str(point)) + 1 if point in tied else 0
    return f"{point} (draw {i + 1} of {len(draws)}: tied point {j} of {len(tied)})"


def commands(cfg: dict[str, Any], suite: str | Path, experiment: str, seeds: list[int]) -> list[str]:
    """The shell lines the Snakefile's jobs run to make `experiment`'s final runs of `seeds`:
    one `train-group` line for all the config's seeds under `fused_finals` (rule
    final_group), else one `train` line per seed (rule train); with the config's job_env and
    threads, without the job's log redirection."""
    from psrnn import workflow as W
    from psrnn.engine.groups import fused_finals

    threads = W.train_threads(cfg)
    head = f"{W.job_env(cfg)}OMP_NUM_THREADS={threads} python -m psrnn"
    where = f"--config {shlex.quote(W.shown(suite))} --experiment {experiment}"
    selected = f"--selected {W.selection(cfg, experiment)}" if C.has_grid(cfg, experiment) else ""
    tail = f"--restart-on-change --threads {threads}"
    if fused_finals(cfg):
        every = " ".join(str(k) for k in cfg["seeds"])
        lines = [f"{head} train-group {where} --seeds {every} {selected} {tail}"]
    else:
        lines = [
            f"{head} train {where} --seed {k} {selected} --out {C.run_dir(cfg, experiment, k)} {tail}"
            for k in seeds
        ]
    return [" ".join(line.split()) for line in lines]


def snakemake_line(cfg: dict[str, Any], suite: str | Path, experiment: str, seeds: list[int]) -> str:
    """The Snakemake command whose targets are these final runs' metrics.json: the first
    one's alone under `fused_finals`, whose one job (rule final_group) makes every seed's."""
    from psrnn import workflow as W
    from psrnn.engine.groups import fused_finals

    targets = " ".join(W.run_metrics(cfg, experiment, k) for k in (seeds[:1] if fused_finals(cfg) else seeds))
    line = f"snakemake --cores all --configfile {shlex.quote(W.shown(suite))} {targets}"
    return line + ("  # one job makes every seed's run" if fused_finals(cfg) else "")


def table(rows: list[list[str]]) -> list[str]:
    """Rows of cells as aligned text, the first row the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def cell_lines(cfg: dict[str, Any], suite: str | Path, cell: Cell) -> list[str]:
    """What `explain` prints: the cell, its runs (one line each) and the commands that make them."""
    results_dir = C.results_root(cfg)
    out = [
        f"{cell.title} ({cell.table}), row {cell.row}, column {cell.column}",
        *[f"  {x}" for x in cell.lines],
    ]
    if not cell.runs:
        return [*out, "", f"No finished run of {cell.experiment or 'any experiment'} behind this cell."]
    rows = [["seed", f"value {cell.unit}", "folder", "grid point", "training code", "machine"]]
    for r, v in zip(cell.runs, cell.values):
        point = point_text(cfg, results_dir, r)
        if r.metrics.get("reused_from"):
            point += f"; record reused from {r.metrics['reused_from']}"
        code = str(r.metrics.get("training_code") or "unknown")[:12]
        value = "—" if v is None else f"{v:.2f}"
        rows.append([str(r.seed), value, str(r.dir), point, code, machine_text(r.metrics)])
    out += ["", f"{len(cell.runs)} runs of {cell.experiment} (config {cfg['name']}):", *table(rows)]
    if cell.left_out:
        out += ["", "Runs of the experiment not counted:"]
        out += [
            f"  seed {r.seed} ({r.dir}, {point_text(cfg, results_dir, r)}): {why}" for r, why in cell.left_out
        ]
    assert cell.experiment is not None  # runs have one
    seeds = sorted(r.seed for r in (*cell.runs, *(r for r, _ in cell.left_out)))
    out += [
        "",
        "Made by (Snakemake target, then the job's command as the Snakefile runs it):",
        f"  {snakemake_line(cfg, suite, cell.experiment, seeds)}",
        *[f"  {line}" for line in commands(cfg, suite, cell.experiment, seeds)],
    ]
    return out
