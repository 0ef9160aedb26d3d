"""The first study's compile (psrnn.registry names it; `python -m psrnn compile`, psrnn.compile,
calls it): every table, figure, the summary metrics and REPORT.md of one suite config, from
its finished runs (psrnn.studies.private_shared.results says what is written where; the
same runs give byte-identical files).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.report import FIGURE_FORMATS, FOREST, TABLE_FORMATS, curves, forest_drawn
from psrnn.studies.private_shared.results import TABLES, paper_figures


def compile_all(s, results_dir: Path) -> list[Path]:
    """Write every table, figure, the summary metrics and REPORT.md (last); returns paths."""
    from psrnn.files import write_json, write_text
    from psrnn.studies.private_shared.results import report, tables
    from psrnn.studies.private_shared.results.figures import write_figures
    from psrnn.studies.private_shared.results.paper import config_macros

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
    forest = [FOREST] if forest_drawn(cfg) else []
    stems = [*paper_figures(cfg), *forest, *(f"curves_{e}" for e in C.enabled_experiments(cfg))]
    return (
        [root / "tables" / f"{t}.{ext}" for t in TABLES for ext in TABLE_FORMATS]
        + [root / "tables" / "psrnn-config.tex"]
        + [root / "figures" / f"{stem}.{ext}" for stem in stems for ext in FIGURE_FORMATS]
        + curves.output_paths(root, C.enabled_experiments(cfg))
        + [root / "REPORT.md", root / "metrics.json"]
    )


def compile(cfg: dict[str, Any], results_dir: Path, reference_path: str | Path) -> list[Path]:
    """The first study's tables, figures, metrics.json and REPORT.md from its finished runs."""
    from psrnn.report.collect import gather, load_reference
    from psrnn.studies.private_shared.results.report import all_runs

    s = gather(cfg, load_reference(reference_path), results_dir, C.data_root(cfg))
    finished, expected = len(all_runs(s)), len(s.experiments) * len(cfg["seeds"])
    print(
        f"compile: from {finished} of {expected} runs"
        + ("" if s.scale_label is None else f" ({s.scale_label})")
    )
    if absent := [ds for ds in C.enabled_datasets(cfg) if ds not in s.manifests]:
        # battery N-AB16: a clone without the data rewrote a committed Table 1 without a word
        print(
            f"compile: warning: {', '.join(absent)} not prepared here ({C.data_root(cfg)}/prepared/): "
            "Table 1 and the auxiliary tasks' floors say so instead of measuring it; prepare it first "
            "to compile what its data gives",
            file=sys.stderr,
        )
    return compile_all(s, results_dir)
