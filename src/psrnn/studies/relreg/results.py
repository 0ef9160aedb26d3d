"""Table 4.5, Figures 4.1-4.4, REPORT.md and the summary metrics of a `study: relreg` suite.

    python -m psrnn compile --config config/relreg.yaml    # psrnn.studies.private_shared.results.compile
    dispatches here

Reads, under results/<name>/ (the layout of psrnn.config: run_dir, search_dir):
runs/<experiment>/seed<k>/{metrics.json, loading.npz}, search/<experiment>/<point>/metrics.json,
search/<experiment>/selected.json, and config/relreg-reference.yaml (the thesis' numbers).
Writes under results/<name>/:

    tables/table45.{csv,md,tex}     Table 4.5 as our grid search selects its rows: thesis vs ours
    tables/table45_thesis.{csv,md,tex}  Table 4.5 with its rows at the thesis' bolded settings
    tables/ablations.{csv,md,tex}   Table 4.5a: the ablations of Table 4.5 rows
    (psrnn.studies.relreg.ablations)
    figures/{fig41_lstm_vs_proto,fig42_regularizers,fig43_loading_steps,fig44_loading_epochs}.{pdf,png,svg}
    figures/verdicts_forest.{pdf,png,svg}   both Table 4.5s' verdicts as a forest plot, at paper
    scale (psrnn.studies.relreg.forest)
    REPORT.md, metrics.json    (REPORT.md: psrnn.studies.relreg.report)

What each shows: psrnn.studies.relreg.captions.

psrnn.studies.relreg.collect reads the runs and gives the numbers every output takes, with the
verdict rule of psrnn.studies.relreg.verdicts (an interval that sees failing seeds, a margin from
the thesis, seeds at
>= 99 %, a cause per cell not reproduced); the first study's machinery does the rest: fmt,
tables.Table and its renderers, figures.save. Accuracies are in % like the first
study's tables. The one compared with the thesis is sequence accuracy (exact match: all k
output bits right), which is what the thesis reports ("sequence-level", "best sentence"
accuracy); bit accuracy is shown as a diagnostic and never judged against the thesis.
Missing experiments and runs show "—"; the same runs give byte-identical files.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from psrnn import config as C
from psrnn.files import write_json, write_text
from psrnn.report import FIGURE_FORMATS, FOREST, TABLE_FORMATS, curves, fmt, forest_drawn
from psrnn.report.collect import Suite, load_reference
from psrnn.report.provenance import hours
from psrnn.report.stats import summarize
from psrnn.report.tables import Table, to_csv, to_latex, to_markdown
from psrnn.studies.relreg import figures
from psrnn.studies.relreg import verdicts as V
from psrnn.studies.relreg.ablations import ablation_table, ablations
from psrnn.studies.relreg.captions import FIGURE_TITLES
from psrnn.studies.relreg.collect import (  # noqa: F401 (re-exports: the gathered runs and their numbers)
    FIXED,
    REFERENCE_PATH,
    REGULARIZERS,
    SEARCH,
    RelRegSuite,
    bit_counts,
    cells,
    gather,
    no_settings,
    per_length,
    reference_rows,
    rows,
    selection_data,
    short,
    summary_columns,
    unregularized_caption,
    with_ci,
)
from psrnn.studies.relreg.report import report_markdown

TABLE = "table45"  # as our search selects the rows
THESIS_TABLE = "table45_thesis"  # the rows at the thesis' settings
ABLATION_TABLE = "ablations"


def output_paths(cfg: dict[str, Any]) -> list[Path]:
    """Every file `compile` writes for a validated `study: relreg` suite config."""
    root = C.results_root(cfg)
    return (
        [
            root / "tables" / f"{name}.{ext}"
            for name in (TABLE, THESIS_TABLE, ABLATION_TABLE)
            for ext in TABLE_FORMATS
        ]
        + [root / "figures" / f"{stem}.{ext}" for stem in FIGURE_TITLES for ext in FIGURE_FORMATS]
        + ([root / "figures" / f"{FOREST}.{ext}" for ext in FIGURE_FORMATS] if forest_drawn(cfg) else [])
        + curves.output_paths(root, C.enabled_experiments(cfg))
        + [root / "REPORT.md", root / "metrics.json"]
    )


# --- Table 4.5 ------------------------------------------------------------------------------------


def table45(s: Suite, table: str = SEARCH) -> Table:
    """Thesis vs ours for each row of one Table 4.5 (SEARCH: as our grid search selects the
    rows; FIXED: each row at fixed settings, the thesis' bolded ones in config/relreg.yaml):
    numbers per (row, bits) for the CSV, and per row a block of lines (thesis; ours,
    sequence accuracy with its interval; seeds at >= 99 %; ours, bit accuracy as a
    diagnostic; verdict; cause) with one column per number of bits for Markdown and LaTeX."""
    recs = cells(s, table=table)
    data = pd.DataFrame(
        [
            {
                **{k: r[k] for k in ("ref", "model", "experiment", "bits", "count")},
                "paper_acc": r["paper"],
                "n": r["seq"].n,
                **summary_columns("seq_acc", r["seq"], ("mean", "std", "ci_low", "ci_high")),
                "seeds_at_99": r["seeds"].k,
                "seeds_at_99_ci_low": r["seeds"].low,
                "seeds_at_99_ci_high": r["seeds"].high,
                "margin_pp": r["margin"],
                "diff": r["seq"].mean - r["paper"] if r["paper"] is not None else math.nan,
                **summary_columns("bit_acc", r["bit"], ("mean", "std")),
                "verdict": r["verdict"],
                "cause": r["cause"],
            }
            for r in recs
        ]
    )
    bits = bit_counts(s)
    disp = []
    for i in range(0, len(recs), len(bits)):
        block = recs[i : i + len(bits)]
        n = block[0]["seq"].n
        lines = (
            (block[0]["model"], "thesis", lambda r: fmt.num(r["paper"], 2)),
            (block[0]["experiment"] or fmt.DASH, f"ours, sequence (n={n})", lambda r: with_ci(r["seq"])),
            ("", f"seeds at >= {V.SUCCESS_PCT:g} %", lambda r: r["seeds"].text()),
            ("", "ours, bit (diagnostic)", lambda r: fmt.num(r["bit"].mean, 2)),
            ("", "verdict", lambda r: short(r["verdict"])),
            ("", "cause", lambda r: r["cause"] or ""),
        )
        for label, what, cell in lines:
            disp.append({"Model": label, "": what, **{f"{r['bits']} bits": cell(r) for r in block}})
    table_exps = [e for _, e in rows(s, table=table) if e]
    what = (
        "as our grid search selects its rows"
        if table == SEARCH
        else "with each row at fixed settings, the ones the thesis' Tables 4.1-4.4 bold"
    )
    how = selection_caption(s, table_exps) if table == SEARCH else fixed_caption(s, table_exps)
    return Table(
        "table4.5" if table == SEARCH else "table4.5-thesis",
        "Table 4.5" if table == SEARCH else "Table 4.5-thesis",
        f"Test accuracy (%) per number of bits of the Binary Counter (thesis Table 4.5), {what}. Thesis: as "
        'printed, its sequence-level ("best sentence") accuracy. Ours, sequence: the same metric, the '
        "fraction of test numbers whose k output bits are all right (exact match), mean [95% interval of the "
        "mean that sees the failing seeds] over seeds; seeds at >= "
        f"{V.SUCCESS_PCT:g} %: k/n [exact 95% interval of the "
        "share, %]. Verdict: reproduced when our whole interval lies within the margin of the thesis' value "
        "(the spread between the thesis' equivalent rows, "
        f"{V.equivalent_spread(s.reference):.2f} pp, or half "
        "the row's printed step where more), not reproduced when it lies wholly beyond it, else "
        f"inconclusive; fewer than {V.MIN_SEEDS} seeds give none "
        "(psrnn.studies.relreg.verdicts). Cause: why a cell "
        "is not reproduced, from runs; unexplained where none tests one (REPORT.md). "
        "Ours, bit: fraction of output bits right, a diagnostic only. "
        + how
        + (unregularized_caption(s, table_exps) if table == SEARCH else "")
        + model_caption(s, table_exps),
        data,
        pd.DataFrame(disp),
        "ll" + "r" * len(bits),
        [
            "— = no value: the thesis prints none (16 bits) or no finished run of this config.",
            "Test numbers per length: all 2^k up to the config's test_count, that many distinct random ones "
            "above (REPORT.md).",
        ],
    )


def fixed_caption(s: Suite, exps: list[str]) -> str:
    """Which fixed rows train the thesis' bolded settings (config/relreg-reference.yaml's
    `bold`), and where the others differ."""
    if not exps:
        return ""
    same: list[str] = []
    other: list[str] = []
    for e in exps:
        diff = thesis_differences(s, e)
        (same if not diff else other).append(e if not diff else f"{e} ({'; '.join(diff)})")
    parts = []
    if same:
        parts.append(f"At the thesis' bolded settings: {', '.join(same)}. ")
    if other:
        parts.append(f"Not at them: {', '.join(other)}. ")
    return "".join(parts) + "No grid search: every seed trains the same settings. "


def thesis_differences(s: Suite, exp: str) -> list[str]:
    """Where an experiment's settings differ from the thesis' bolded ones for its model
    ('key ours vs thesis'). Every regulariser counts (REGULARIZERS): one the bold set holds must
    be there at its value, one it does not hold must be 0, so a row that drops or adds one
    differs. A row the thesis gives no settings for (reference `no_settings`) differs as a whole."""
    st = s.settings.get(exp, {})
    model = st.get("model")
    if no_settings(s, reference_rows(s.reference).get(s.ref_of(exp) or "")):
        return ["the thesis gives no settings for this row"]
    table = next((g for g in s.reference.get("grids", []) if g["model"] == model), None)
    if table is None:
        return ["no thesis grid for this model"]
    bold: dict[str, Any] = {k: 0.0 for k in REGULARIZERS}
    for row in table.get("bold", []):
        values = row["value"] if len(row["keys"]) > 1 else [row["value"]]
        bold.update(dict(zip(row["keys"], values, strict=True)))
    return [
        f"{k} {st.get(k)} vs {v}"
        for k, v in bold.items()
        if (float(st.get(k) or 0.0) != float(v) if k in REGULARIZERS else st.get(k) != v)
    ]


def selection_caption(s: Suite, exps: list[str]) -> str:
    """The selection rule of `exps`, one sentence (per experiment where they differ)."""
    if not exps:
        return ""
    rules = {e: selection_data(s.settings[e]) for e in exps}
    differ = len(set(rules.values())) > 1
    rule = "; ".join(f"{e}: {r}" for e, r in rules.items()) if differ else rules[exps[0]]
    if s.cfg.get("ties") == "draw":
        how = (
            "Selection: the grid points with the best validation sequence accuracy (search seed "
            f"{C.search_seed(s.cfg)}) form the tie set, and final run i trains its i-th point in a hash "
            "order (config `ties: draw`, psrnn.engine.selection; no loss decides), each "
            "run keeping its epoch of "
            f"best validation sequence accuracy, on {rule}"
        )
    else:
        how = (
            "Selection: the grid point and each run's epoch with the best validation sequence accuracy "
            f"(ties: lower validation loss), on {rule}"
        )
    return how + "; the thesis does not say what it selected on (REPORT.md, Ablations). "


def model_caption(s: Suite, exps: list[str]) -> str:
    """How each Transformer row attends, from its settings (runs recorded before `causal`
    existed had no mask)."""
    tf = [e for e in exps if s.settings[e].get("model") == "transformer"]
    parts = [
        f"{e}: "
        + (
            "causal self-attention (step t attends to steps <= t)"
            if s.settings[e].get("causal", False)
            else "no attention mask (every step attends to the whole number)"
        )
        for e in tf
    ]
    return ("Transformer " + "; ".join(parts) + ".") if parts else ""


# --- summary metrics -----------------------------------------------------------------------------


def _clean(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 6)


def summary_metrics(s: Suite) -> dict[str, Any]:
    """Per experiment: mean test sequence / bit accuracy (fractions) per number of bits; the
    ablations (psrnn.studies.relreg.ablations)."""
    exps = {}
    for exp in s.experiments:
        bits = bit_counts(s)
        exps[exp] = {
            "ref": s.ref_of(exp),
            "n": len(s.runs.get(exp, [])),
            "test_acc_mean": _clean(summarize([r.value("test_acc") for r in s.runs.get(exp, [])]).mean),
            "seq_acc": {str(k): _clean(per_length(s, exp, k).mean / 100) for k in bits},
            "bit_acc": {str(k): _clean(per_length(s, exp, k, "bit_acc").mean / 100) for k in bits},
        }
    return {
        "config": s.name,
        "study": "relreg",
        "paper_scale": s.paper_scale,
        "status": s.scale_label or "paper-scale",
        "runs_finished": sum(len(rs) for rs in s.runs.values()),
        "runs_expected": len(s.experiments) * len(s.cfg["seeds"]),
        "search_runs": len(s.search),
        "compute_hours": {
            k: round(v, 4)
            for k, v in hours([r.metrics for rs in s.runs.values() for r in rs] + s.search).items()
        },
        "experiments": exps,
        "ablations": [
            {"experiment": a.variant, "of": a.main, "setting": a.setting, "value": a.variant_value}
            for a in ablations(s)
        ],
    }


# --- compile ------------------------------------------------------------------------------------


def compile(
    cfg: dict[str, Any], results_dir: Path, reference_path: str | Path = REFERENCE_PATH
) -> list[Path]:
    """Write Table 4.5, the ablations table, the four figures, metrics.json and REPORT.md
    (last); returns the paths."""
    s = gather(cfg, load_reference(reference_path), Path(results_dir))
    written = []
    t, tt, ab = table45(s, SEARCH), table45(s, FIXED), ablation_table(s)
    for name, table in ((TABLE, t), (THESIS_TABLE, tt), (ABLATION_TABLE, ab)):
        for ext, render in (("csv", to_csv), ("md", to_markdown), ("tex", to_latex)):
            path = results_dir / "tables" / f"{name}.{ext}"
            write_text(path, render(table, s))
            written.append(path)
    written += figures.write_figures(s, results_dir / "figures")
    written += curves.write_curves(s.runs, ("valid_seq_acc", "train_loss", "valid_loss"), results_dir)
    written.append(curves.write_scores(s.runs, results_dir))
    write_json(results_dir / "metrics.json", summary_metrics(s))
    written.append(results_dir / "metrics.json")
    listed = [str(p.relative_to(results_dir)) for p in written] + ["REPORT.md"]
    write_text(results_dir / "REPORT.md", report_markdown(s, t, tt, ab, listed))
    return written + [results_dir / "REPORT.md"]
