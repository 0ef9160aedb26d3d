"""One cell of either Table 4.5 and the runs behind it, for `python -m psrnn explain`
(psrnn.explain prints it).

    python -m psrnn explain --config config/relreg-full.yaml --table table45 --row lstm_l2 --column 14

The cell's runs are the ones its numbers count (a tied point drawn again is left out,
psrnn.studies.relreg.collect.equal_draws, and listed apart); its value is recomputed from
their metrics.json with the verdict rule (psrnn.studies.relreg.verdicts) and set beside the
compiled table's CSV row.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.explain import Cell, compiled_row, pick
from psrnn.report.collect import load_reference, load_settings
from psrnn.report.stats import Summary
from psrnn.studies.relreg import verdicts as V
from psrnn.studies.relreg.collect import FIXED, SEARCH, RelRegSuite, bit_counts, cells, gather, rows, seq_at
from psrnn.studies.relreg.results import TABLE, THESIS_TABLE
from psrnn.studies.relreg.verdict_lines import TABLE_TITLES

TABLES = {TABLE: SEARCH, THESIS_TABLE: FIXED}  # each compiled Table 4.5's name


def outline(cfg: dict[str, Any], reference: dict[str, Any]) -> RelRegSuite:
    """The suite without its runs: its tables' rows and columns, from the config alone (a bad
    row or column is named before the runs are read)."""
    exps = C.enabled_experiments(cfg)
    return RelRegSuite(
        cfg=cfg,
        reference=reference,
        runs={},
        settings=load_settings(cfg, {e: [] for e in exps}),
        manifests={},
    )


def explain(
    cfg: dict[str, Any], results_dir: Path, reference_path: Path, table: str, row: str, column: str | None
) -> Cell:
    reference = load_reference(reference_path)
    name = pick("table", table, {k: TABLE_TITLES[v] for k, v in TABLES.items()}, f"config {cfg['name']}")
    which = TABLES[name]
    light = outline(cfg, reference)
    named = {e: (ref or {}).get("model", e) for ref, e in rows(light, table=which) if e}
    exp = pick("row", row, named, name)
    given = column.removesuffix(" bits").strip() if column else None
    bits = int(pick("column", given, {str(k): f"{k} bits" for k in bit_counts(light)}, name))
    s = gather(cfg, reference, results_dir)
    rec = next(r for r in cells(s, table=which) if r["experiment"] == exp and r["bits"] == bits)
    runs = s.runs.get(exp, [])
    values = [seq_at(r.metrics, bits) for r in runs]
    xs = [v for v in values if v is not None]
    ours = V.interval(xs)  # recomputed from the runs listed
    verdict = V.verdict(rec["paper"], ours, rec["margin"], s.paper_scale)
    paper = "—" if rec["paper"] is None else f"{rec['paper']:.2f} %"
    lines = [
        f"thesis {paper}; equivalence margin ±{rec['margin']:.2f} pp",
        f"ours {interval_text(ours)} over {ours.n} runs: test sequence accuracy, mean [95% interval of the "
        f"mean that sees the failing seeds]; seeds at >= {V.SUCCESS_PCT:g} %: {V.seeds_at(xs).text()}",
        f"verdict: {verdict}" + (f"; cause: {rec['cause']}: {rec['cause_text']}" if rec["cause"] else ""),
        compiled(results_dir / "tables" / f"{name}.csv", exp, bits, ours, verdict),
    ]
    left = [(r, "a tied point drawn again: drawn points count alike") for r in s.surplus.get(exp, [])]
    return Cell(
        table=name,
        title=TABLE_TITLES[which],
        row=f"{exp} ({named[exp]})",
        column=f"{bits} bits",
        experiment=exp,
        runs=tuple(runs),
        values=tuple(values),
        unit="%",
        lines=tuple(lines),
        left_out=tuple(left),
    )


def interval_text(x: Summary) -> str:
    return "—" if x.n == 0 else f"{x.mean:.2f} [{x.ci_low:.2f}, {x.ci_high:.2f}]"


def compiled(path: Path, exp: str, bits: int, ours: Summary, verdict: str) -> str:
    """The compiled CSV's numbers of the cell, and whether the recomputed ones are they (to
    the CSV's 6 decimals)."""
    row = compiled_row(path, {"experiment": exp, "bits": str(bits)})
    if row is None:
        return f"compiled {path}: no row for it (compile again)"
    got = [
        float(row[k]) if row[k] else math.nan for k in ("seq_acc_mean", "seq_acc_ci_low", "seq_acc_ci_high")
    ]
    mine = [ours.mean, ours.ci_low, ours.ci_high]
    same = all(abs(a - b) < 1e-5 or (math.isnan(a) and math.isnan(b)) for a, b in zip(got, mine))
    same = same and row["verdict"] == verdict
    shown = "—" if math.isnan(got[0]) else f"{got[0]:.2f} [{got[1]:.2f}, {got[2]:.2f}]"
    return f"compiled {path}: {shown}, {row['verdict']}: " + (
        "the same" if same else "differs from the runs' (compile again)"
    )
