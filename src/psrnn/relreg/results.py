"""Table 4.5, Figures 4.1-4.4, REPORT.md and the summary metrics of a `study: relreg` suite.

    python -m psrnn compile --config config/relreg.yaml    # psrnn.results.compile dispatches here

Reads, under results/<name>/ (the layout of psrnn.config: run_dir, search_dir):
runs/<experiment>/seed<k>/{metrics.json, loading.npz}, search/<experiment>/<point>/metrics.json,
search/<experiment>/selected.json, and config/relreg-reference.yaml (the thesis' numbers).
Writes under results/<name>/:

    tables/table45.{csv,md,tex}     Table 4.5: thesis vs ours per number of bits
    tables/ablations.{csv,md,tex}   Table 4.5a: the ablations of Table 4.5 rows (psrnn.relreg.ablations)
    figures/{fig41_lstm_vs_proto,fig42_regularizers,fig43_loading_steps,fig44_loading_epochs}.{pdf,png,svg}
    REPORT.md, metrics.json    (REPORT.md: psrnn.relreg.report)

The first study's machinery does the work: collect (reading runs), stats (mean, 95%
t-interval cut to [0, 100] %, verdict), fmt, tables.Table and its renderers,
figures.save. Accuracies are in % like the first study's tables. The one compared with
the thesis is sequence accuracy (exact match: all k output bits right), which is what the
thesis reports ("sequence-level", "best sentence" accuracy); bit accuracy is shown as a
diagnostic and never judged against the thesis. Missing experiments and runs show "—";
the same runs give byte-identical files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from psrnn import config as C
from psrnn.files import read_json, write_json, write_text
from psrnn.results import TABLE_FORMATS, fmt
from psrnn.results.collect import Suite, load_reference, load_runs, load_settings
from psrnn.results.report import hours
from psrnn.results.stats import (
    PERCENT,
    WIDE_PP,
    Summary,
    bounded,
    summarize,
    verdict,
)
from psrnn.results.tables import Table, to_csv, to_latex, to_markdown

REFERENCE_PATH = C.ROOT / "config" / "relreg-reference.yaml"
TABLE = "table45"
ABLATION_TABLE = "ablations"
FIGURE_FORMATS = ("pdf", "png", "svg")
FIGURE_TITLES = {  # also their captions in REPORT.md
    "fig41_lstm_vs_proto": "Figure 4.1: test sequence accuracy against the number of bits, every grid "
    "point of the LSTM and the 4 proto-LSTMs (both with L2)",
    "fig42_regularizers": "Figure 4.2: test sequence accuracy against the number of bits, every grid "
    "point of the 4 proto-LSTMs with each regularization",
    "fig43_loading_steps": "Figure 4.3: loading probability of each proto-LSTM cell at each step "
    "(inference, two 9-bit examples)",
    "fig44_loading_epochs": "Figure 4.4: histogram of the loading probabilities on the validation "
    "data after each epoch",
}
REGULARIZERS = ("l2", "l2_cell", "l2_noncell", "noise")  # the run settings Figures 4.1-4.2 sweep
# Settings the thesis does not give; ours are listed in the report.
UNSTATED = ("optimizer", "epochs", "batch_size", "clip", "train_size", "valid_bits", "test_count", "slots")


@dataclass
class RelRegSuite(Suite):
    """The first study's Suite (cfg, reference, final runs, settings; `search` = every search
    run's metrics.json) plus what this study's figures need."""

    points: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)  # exp -> grid order
    selected: dict[str, str] = field(default_factory=dict)  # exp -> point of search/<exp>/selected.json


def output_paths(cfg: dict[str, Any]) -> list[Path]:
    """Every file `compile` writes for a validated `study: relreg` suite config."""
    root = C.results_root(cfg)
    return (
        [root / "tables" / f"{name}.{ext}" for name in (TABLE, ABLATION_TABLE) for ext in TABLE_FORMATS]
        + [root / "figures" / f"{stem}.{ext}" for stem in FIGURE_TITLES for ext in FIGURE_FORMATS]
        + [root / "REPORT.md", root / "metrics.json"]
    )


# --- reading ----------------------------------------------------------------------------------


def reference_rows(reference: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """id -> row of every referable row: Table 4.5's and the figure-only ones."""
    return {r["id"]: r for key in ("table45", "figures") for r in reference.get(key, [])}


def check_refs(cfg: dict[str, Any], reference: dict[str, Any]) -> None:
    """A `ref:` that names no reference row is a typo that would silently drop a row."""
    known = reference_rows(reference)
    for name, exp in cfg["experiments"].items():
        if exp.get("ref") is not None and exp["ref"] not in known:
            raise C.ConfigError(
                f"experiments.{name}.ref: {exp['ref']!r} is not a row of {REFERENCE_PATH.name}"
            )


def _under(results_dir: Path, path: Path, cfg: dict[str, Any]) -> Path:
    """psrnn.config's path of a run folder, moved from results/<name> to `results_dir`."""
    return results_dir / path.relative_to(C.results_root(cfg))


def gather(cfg: dict[str, Any], reference: dict[str, Any], results_dir: Path) -> RelRegSuite:
    check_refs(cfg, reference)
    runs = load_runs(cfg, results_dir)  # runs/<exp>/seed<k>/metrics.json, as C.run_dir lays out
    points: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    selected = {}
    for exp in C.enabled_experiments(cfg):
        found = []
        for pid, _ in C.grid_points(cfg["experiments"][exp]):
            p = _under(results_dir, C.search_dir(cfg, exp, pid), cfg) / "metrics.json"
            if p.is_file():
                found.append((pid, read_json(p)))
        points[exp] = found
        sel = _under(results_dir, C.selection_path(cfg, exp), cfg)
        if sel.is_file():
            selected[exp] = read_json(sel).get("point")
    return RelRegSuite(
        cfg=cfg,
        reference=reference,
        runs=runs,
        settings=load_settings(cfg, runs),
        manifests={},
        search=[m for exp in points for _, m in points[exp]],
        points=points,
        selected=selected,
    )


# --- numbers ------------------------------------------------------------------------------------


def bit_counts(s: Suite) -> list[int]:
    """Table 4.5's columns: the thesis' bit counts and every one our runs test."""
    out = {int(k) for r in s.reference["table45"] for k in r["acc"]}
    out |= {int(k) for st in s.settings.values() for k in st.get("test_bits", [])}
    out |= {int(k) for rs in s.runs.values() for r in rs for k in r.metrics.get("test", {})}
    return sorted(out)


def per_length(s: Suite, exp: str | None, bits: int, key: str = "seq_acc") -> Summary:
    """Test accuracy (%) on `bits`-bit numbers over the finished seeds, CI cut to [0, 100]."""
    runs = s.runs.get(exp, []) if exp else []
    values = [r.metrics.get("test", {}).get(str(bits), {}).get(key) for r in runs]
    return bounded(summarize(values, 100.0), *PERCENT, wide=WIDE_PP)


def paper_value(ref: dict[str, Any] | None, bits: int) -> float | None:
    """The thesis' value in %, None where it prints none."""
    v = (ref or {}).get("acc", {}).get(bits)
    return None if v is None else 100.0 * float(v)


def tied_points(s: RelRegSuite, exp: str) -> int:
    """Grid points of `exp` whose search run reached 100 % validation sequence accuracy."""
    return sum(1 for _, m in s.points.get(exp, []) if m.get("best_valid_acc") == 1.0)


def short(v: str) -> str:
    """A verdict in a few words for the table: 'reproduced', 'not reproduced, ours lower'."""
    head, _, rest = v.partition(" (")
    if head == "not reproduced":
        return f"{head}, {rest.rstrip(')')}"
    return fmt.DASH if head in ("missing", "no paper value") else head


def rows(s: Suite, extra: bool = False) -> list[tuple[dict[str, Any] | None, str | None]]:
    """(reference row, experiment) of every Table 4.5 row in the thesis' order, one per
    experiment with that `ref` (experiment None when the config has none); with `extra`,
    then every other enabled experiment (its figure-only reference row or None)."""
    out: list[tuple[dict[str, Any] | None, str | None]] = []
    for ref in s.reference["table45"]:
        exps: list[str | None] = list(s.experiments_for(ref["id"])) or [None]
        out += [(ref, e) for e in exps]
    if extra:
        known = reference_rows(s.reference)
        listed = {e for _, e in out}
        out += [(known.get(s.ref_of(e) or ""), e) for e in s.experiments if e not in listed]
    return out


def cells(s: Suite, extra: bool = False) -> list[dict[str, Any]]:
    """One record per (row, number of bits): the thesis' value, ours (sequence accuracy, and
    bit accuracy as a diagnostic), the verdict (the thesis' value against our sequence accuracy)."""
    out = []
    for ref, exp in rows(s, extra):
        for k in bit_counts(s):
            seq, bit, paper = per_length(s, exp, k), per_length(s, exp, k, "bit_acc"), paper_value(ref, k)
            runs = s.runs.get(exp or "", [])
            tested = [r.metrics["test"][str(k)] for r in runs if str(k) in r.metrics.get("test", {})]
            out.append(
                {
                    "ref": ref["id"] if ref else "",
                    "model": ref["model"] if ref else str(exp),
                    "experiment": exp or "",
                    "bits": k,
                    "count": tested[0].get("count") if tested else None,  # numbers per length
                    "paper": paper,
                    "seq": seq,
                    "bit": bit,
                    "verdict": verdict(paper, seq, s.paper_scale),
                }
            )
    return out


# --- Table 4.5 ------------------------------------------------------------------------------------


def table45(s: Suite) -> Table:
    """Thesis vs ours for each Table 4.5 row: numbers per (row, bits) for the CSV, and per
    row a block of four lines (thesis; ours, sequence accuracy with CI; ours, bit accuracy as
    a diagnostic; verdict) with one column per number of bits for Markdown and LaTeX."""
    recs = cells(s)
    data = pd.DataFrame(
        [
            {
                **{k: r[k] for k in ("ref", "model", "experiment", "bits", "count")},
                "paper_acc": r["paper"],
                "n": r["seq"].n,
                "seq_acc_mean": r["seq"].mean,
                "seq_acc_std": r["seq"].std,
                "seq_acc_ci_low": r["seq"].ci_low,
                "seq_acc_ci_high": r["seq"].ci_high,
                "seq_acc_ci_clipped": r["seq"].clipped,
                "seq_acc_ci_uninformative": r["seq"].uninformative,
                "diff": r["seq"].mean - r["paper"] if r["paper"] is not None else math.nan,
                "bit_acc_mean": r["bit"].mean,
                "bit_acc_std": r["bit"].std,
                "verdict": r["verdict"],
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
            ("", "ours, bit (diagnostic)", lambda r: fmt.num(r["bit"].mean, 2)),
            ("", "verdict", lambda r: short(r["verdict"])),
        )
        for label, what, cell in lines:
            disp.append({"Model": label, "": what, **{f"{r['bits']} bits": cell(r) for r in block}})
    table_exps = [e for _, e in rows(s) if e]
    return Table(
        "table4.5",  # the thesis' number, for the captions; the files are tables/table45.*
        "Test accuracy (%) per number of bits of the Binary Counter (thesis Table 4.5). Thesis: as "
        'printed, its sequence-level ("best sentence") accuracy. Ours, sequence: the same metric, the '
        "fraction of test numbers whose k output bits are all right (exact match), mean [95% t-interval] "
        "over seeds. Verdict: reproduced when the thesis' value lies inside our interval. Ours, bit: "
        "fraction of output bits right, a diagnostic only. "
        + selection_caption(s, table_exps)
        + model_caption(s, table_exps),
        data,
        pd.DataFrame(disp),
        "ll" + "r" * len(bits),
        [
            "— = no value: the thesis prints none (16 bits) or no finished run of this config.",
            f"{fmt.CLIPPED_MARK} interval cut to [0, 100]; {fmt.WIDE_MARK} wider than {WIDE_PP:g} pp.",
            "Test numbers per length: all 2^k up to the config's test_count, that many distinct random ones "
            "above (REPORT.md).",
        ],
    )


# --- the selection rule, stated from the settings ---------------------------------------------------


def _and(items: list[str]) -> str:
    """'4', '4 and 5', '4, 5 and 6'."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def selection_data(st: dict[str, Any]) -> str:
    """What a run with settings `st` selects on, e.g. 'all 48 numbers of 4 and 5 bits, longer
    than the 3-bit training numbers'."""
    valid, train, count = [int(k) for k in st.get("valid_bits", [])], int(st["train_bits"]), st["test_count"]
    if not valid:
        return fmt.DASH
    sizes = [min(2**k, int(count)) for k in valid]
    whole = all(2**k <= int(count) for k in valid)
    numbers = f"{'all ' if whole else ''}{sum(sizes):,} numbers of {_and([str(k) for k in valid])} bits"
    if min(valid) > train:
        return f"{numbers}, longer than the {train}-bit training numbers"
    if set(valid) == {train}:
        return f"{numbers}, the training numbers themselves (no longer number)"
    return f"{numbers}, the {train}-bit training length included"


def selection_caption(s: Suite, exps: list[str]) -> str:
    """The selection rule of `exps`, one sentence (per experiment where they differ)."""
    if not exps:
        return ""
    rules = {e: selection_data(s.settings[e]) for e in exps}
    differ = len(set(rules.values())) > 1
    rule = "; ".join(f"{e}: {r}" for e, r in rules.items()) if differ else rules[exps[0]]
    return (
        "Selection: the grid point and each run's epoch with the best validation sequence accuracy (ties: "
        f"lower validation loss), on {rule}; the thesis does not say what it selected on (REPORT.md, "
        "Ablations). "
    )


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


def with_ci(x: Summary) -> str:
    return fmt.DASH if x.n == 0 else f"{x.mean:.2f}" + (f" {fmt.ci(x)}" if x.n > 1 else "")


# --- summary metrics -----------------------------------------------------------------------------


def _clean(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 6)


def summary_metrics(s: Suite) -> dict[str, Any]:
    """Per experiment: mean test sequence / bit accuracy (fractions) per number of bits; the
    ablations (psrnn.relreg.ablations)."""
    from psrnn.relreg.ablations import ablations

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
        "status": "paper-scale" if s.paper_scale else fmt.SMALL_LABEL,
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
    from psrnn.relreg import figures
    from psrnn.relreg.ablations import ablation_table
    from psrnn.relreg.report import report_markdown

    s = gather(cfg, load_reference(reference_path), Path(results_dir))
    written = []
    t, ab = table45(s), ablation_table(s)
    for name, table in ((TABLE, t), (ABLATION_TABLE, ab)):
        for ext, render in (("csv", to_csv), ("md", to_markdown), ("tex", to_latex)):
            path = results_dir / "tables" / f"{name}.{ext}"
            write_text(path, render(table, s))
            written.append(path)
    written += figures.write_figures(s, results_dir / "figures")
    write_json(results_dir / "metrics.json", summary_metrics(s))
    written.append(results_dir / "metrics.json")
    listed = [str(p.relative_to(results_dir)) for p in written] + ["REPORT.md"]
    write_text(results_dir / "REPORT.md", report_markdown(s, t, ab, listed))
    return written + [results_dir / "REPORT.md"]
