"""`python -m psrnn compile --config <suite.yaml>`: every table, figure, the summary
metrics and REPORT.md of one suite config, from its finished runs (psrnn.results says
what is written where; the same runs give byte-identical files).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn import studies
from psrnn.errors import UserError
from psrnn.results import FIGURE_FORMATS, TABLE_FORMATS, TABLES, curves, paper_figures


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="suite config (YAML)")
    p.add_argument(
        "--reference",
        default=None,
        help="reference numbers (default: the study's: config/reference.yaml, config/relreg-reference.yaml)",
    )


def compile_all(s, results_dir: Path) -> list[Path]:
    """Write every table, figure, the summary metrics and REPORT.md (last); returns paths."""
    from psrnn.files import write_json, write_text
    from psrnn.results import report, tables
    from psrnn.results.figures import write_figures
    from psrnn.results.paper import config_macros

    written: list[Path] = []
    for t in tables.all_tables(s):
        for ext, render in (("csv", tables.to_csv), ("md", tables.to_markdown), ("tex", tables.to_latex)):
            path = results_dir / "tables" / f"{t.name}.{ext}"
            write_text(path, render(t, s))
            written.append(path)
    runs = report.all_runs(s)
    summary = f"{len(runs)} of {len(s.experiments) * len(s.cfg['seeds'])} runs finished"
    write_text(results_dir / "tables" / "psrnn-config.tex", config_macros(s.cfg, summary))
    written.append(results_dir / "tables" / "psrnn-config.tex")
    written += write_figures(s, results_dir / "figures")
    written += curves.write_curves(s.runs, ("valid_acc", "train_main_loss", "valid_main_loss"), results_dir)
    written.append(curves.write_scores(s.runs, results_dir))
    write_json(results_dir / "metrics.json", report.summary_metrics(s))
    written.append(results_dir / "metrics.json")
    listed = [str(p.relative_to(results_dir)) for p in written] + ["REPORT.md"]
    write_text(results_dir / "REPORT.md", report.report_markdown(s, listed))
    return written + [results_dir / "REPORT.md"]


def output_paths(cfg: dict[str, Any]) -> list[Path]:
    """Every file `compile` writes for a validated first-study suite config."""
    root = C.results_root(cfg)
    stems = [*paper_figures(cfg), *(f"curves_{e}" for e in C.enabled_experiments(cfg))]
    return (
        [root / "tables" / f"{t}.{ext}" for t in TABLES for ext in TABLE_FORMATS]
        + [root / "tables" / "psrnn-config.tex"]
        + [root / "figures" / f"{stem}.{ext}" for stem in stems for ext in FIGURE_FORMATS]
        + curves.output_paths(root, C.enabled_experiments(cfg))
        + [root / "REPORT.md", root / "metrics.json"]
    )


def compile(cfg: dict[str, Any], results_dir: Path, reference_path: str | Path) -> list[Path]:
    """The first study's tables, figures, metrics.json and REPORT.md from its finished runs."""
    from psrnn.results.collect import gather, load_reference
    from psrnn.results.report import all_runs

    s = gather(cfg, load_reference(reference_path), results_dir, C.data_root(cfg))
    finished, expected = len(all_runs(s)), len(s.experiments) * len(cfg["seeds"])
    print(
        f"compile: from {finished} of {expected} runs"
        + ("" if s.scale_label is None else f" ({s.scale_label})")
    )
    return compile_all(s, results_dir)


def run(args: argparse.Namespace) -> int:
    cfg = C.load_suite(args.config)
    study = studies.study_of(cfg)
    results_dir = C.results_root(cfg)
    with staged_outputs(results_dir, study.output_paths(cfg)) as staging:
        try:
            written = study.compile(cfg, staging, args.reference or C.ROOT / study.reference)
        except UserError as err:  # it names the files where the user finds them, not their links
            raise UserError(str(err).replace(str(staging), str(results_dir))) from None
    print(f"compile: {len(written)} files in {results_dir} (study {study.name})")
    return 0


@contextlib.contextmanager
def staged_outputs(results_dir: Path, outputs: list[Path]) -> Iterator[Path]:
    """A staging folder for one compile: it holds links to everything in `results_dir` but
    the outputs' top-level entries (the runs and notes compile reads), the compile writes
    its outputs into it, and they replace the old ones together when it ends. A compile
    stopped half-way (an error, SIGINT, SIGTERM) changes no output: tables, figures and
    REPORT.md never disagree. The staging folder is removed either way."""
    results_dir.mkdir(parents=True, exist_ok=True)
    produced = {p.relative_to(results_dir).parts[0] for p in outputs}
    staging = Path(tempfile.mkdtemp(prefix=".compile-", dir=results_dir))
    try:
        for entry in sorted(results_dir.iterdir()):
            if entry.name not in produced and not entry.name.startswith(".compile-"):
                (staging / entry.name).symlink_to(entry.resolve())
        yield staging
        moves = [
            (Path(folder) / name, results_dir / Path(folder).relative_to(staging) / name)
            for folder, dirs, files in os.walk(staging)  # links are not followed into
            for name in files
            if not (Path(folder) / name).is_symlink()
        ]
        for src, dst in moves:
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
