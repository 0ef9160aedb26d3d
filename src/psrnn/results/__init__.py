"""`python -m psrnn compile`: the paper's tables and figures, a reproduction report and the
paper build, from finished runs.

    python -m psrnn compile --config config/small.yaml            # tables, figures, REPORT.md
    python -m psrnn paper --config config/paper.yaml      # then the paper PDF (latexmk; psrnn.results.paper)

Reads `results/<name>/runs/<experiment>/seed<k>/` (metrics.json, history.csv,
hidden_states.npz, grad_norms.npz), `data/<name>/prepared/<dataset>/manifest.json` and
`config/reference.yaml`; writes under `results/<name>/`:

    tables/table{1,2,3,4}.{csv,md,tex}, tables/psrnn-config.tex (config macros for paper/main.tex)
    figures/{fig1_gradient_norms,fig2_shared_proportion,fig3_hidden_states,curves_<exp>}.{pdf,png,svg}
    REPORT.md, metrics.json (summary for `dvc metrics show`)
    (paper/paper.pdf and paper/build.json come from `python -m psrnn paper`, psrnn.results.paper)

Same inputs give byte-identical outputs; unfinished runs are shown as missing ("—").
Modules: collect (reading), stats, tables, figures, report, paper.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from psrnn import config as C

TABLES = ("table1", "table2", "table3", "table4")
TABLE_FORMATS = ("csv", "md", "tex")
FIGURE_FORMATS = ("pdf", "png", "svg")
FIGURE_TITLES = {  # the figures' titles, also their captions in REPORT.md and --report
    "fig1_gradient_norms": "Figure 1, measured: gradient norm per time step w.r.t. the hidden state "
    "(best checkpoint)",
    "fig2_shared_proportion": "Figure 2: accuracy and losses against the shared proportion (CIFAR-10)",
    "fig3_hidden_states": "Figure 3: hidden-state pictures "
    "(each unit's values over time, one square per unit)",
}


def output_paths(cfg: dict[str, Any]) -> list[Path]:
    """Every file `compile` writes for a validated suite config (for workflow rules)."""
    root = C.results_root(cfg)
    stems = [
        "fig1_gradient_norms",
        "fig2_shared_proportion",
        "fig3_hidden_states",
        *(f"curves_{e}" for e in C.enabled_experiments(cfg)),
    ]
    return (
        [root / "tables" / f"{t}.{ext}" for t in TABLES for ext in TABLE_FORMATS]
        + [root / "tables" / "psrnn-config.tex"]
        + [root / "figures" / f"{stem}.{ext}" for stem in stems for ext in FIGURE_FORMATS]
        + [root / "REPORT.md", root / "metrics.json"]
    )


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="suite config (YAML)")
    p.add_argument(
        "--reference", default=None, help="reference numbers (default: config/reference.yaml of the project)"
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
    write_json(results_dir / "metrics.json", report.summary_metrics(s))
    written.append(results_dir / "metrics.json")
    listed = [str(p.relative_to(results_dir)) for p in written] + ["REPORT.md"]
    write_text(results_dir / "REPORT.md", report.report_markdown(s, listed))
    return written + [results_dir / "REPORT.md"]


def run(args: argparse.Namespace) -> int:
    from psrnn.results.collect import REFERENCE_PATH, gather, load_reference
    from psrnn.results.fmt import SMALL_LABEL
    from psrnn.results.report import all_runs

    cfg = C.load_suite(args.config)
    reference = load_reference(args.reference or REFERENCE_PATH)
    results_dir = C.results_root(cfg)
    s = gather(cfg, reference, results_dir, C.data_root(cfg))
    finished, expected = len(all_runs(s)), len(s.experiments) * len(cfg["seeds"])
    written = compile_all(s, results_dir)
    print(
        f"compile: {len(written)} files in {results_dir} from {finished} of {expected} runs"
        + ("" if s.paper_scale else f" ({SMALL_LABEL})")
    )
    return 0
