"""`python -m psrnn compile --config <suite.yaml>`: every table, figure, the summary
metrics and REPORT.md of one suite config, from its finished runs (psrnn.results says
what is written where; the same runs give byte-identical files).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from psrnn import config as C
from psrnn import studies


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
    write_json(results_dir / "metrics.json", report.summary_metrics(s))
    written.append(results_dir / "metrics.json")
    listed = [str(p.relative_to(results_dir)) for p in written] + ["REPORT.md"]
    write_text(results_dir / "REPORT.md", report.report_markdown(s, listed))
    return written + [results_dir / "REPORT.md"]


def run(args: argparse.Namespace) -> int:
    cfg = C.load_suite(args.config)
    study = studies.study_of(cfg)
    if study.name != studies.DEFAULT:  # another study compiles its own tables and figures
        results_dir = C.results_root(cfg)
        written = studies.load(f"{study.results}:compile")(
            cfg, results_dir, args.reference or C.ROOT / study.reference
        )
        print(f"compile: {len(written)} files in {results_dir} (study {study.name})")
        return 0

    from psrnn.results.collect import REFERENCE_PATH, gather, load_reference
    from psrnn.results.fmt import SMALL_LABEL
    from psrnn.results.report import all_runs

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
