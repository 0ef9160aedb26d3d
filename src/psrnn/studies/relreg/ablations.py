"""Ablations of the relation-level regularization study: each Table 4.5 experiment beside
the same experiment and grid with one run setting changed (ABLATION_SETTINGS), found from
the settings, shown as tables/ablations.{csv,md,tex} ("Table 4.5a") and REPORT.md's lines
about them (psrnn.studies.relreg.results.compile writes both).

    python -m psrnn compile --config config/relreg.yaml

config/relreg.yaml's ablations: transformer_l2_nomask (causal: false) and the *_valid3
experiments (valid_bits: [3], selected on the 3-bit training numbers). An ablation has no
`ref:`; every statement about it here is computed from the runs.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pandas as pd

from psrnn import config as C
from psrnn.report import fmt
from psrnn.report.collect import Suite
from psrnn.report.stats import Summary, difference_verdict
from psrnn.report.tables import Table
from psrnn.studies.relreg import verdicts as V
from psrnn.studies.relreg.collect import (
    RelRegSuite,
    bit_counts,
    paper_value,
    per_length,
    rows,
    selection_data,
    short,
    summary_columns,
    tied_points,
    verdict_at,
    with_ci,
)

# An experiment without a `ref:` that has a Table 4.5 experiment's settings and grid but for
# one of these is an ablation of it: the tables and REPORT.md show the two side by side.
ABLATION_SETTINGS = {
    "causal": "the Transformer's attention mask (true: step t attends to steps <= t only)",
    "valid_bits": "the numbers the grid point and the epoch are selected on",
}


@dataclass(frozen=True)
class Ablation:
    """`variant` is `main` (a Table 4.5 experiment) with one run setting changed."""

    main: str
    variant: str
    setting: str  # a key of ABLATION_SETTINGS
    main_value: Any
    variant_value: Any


def _design(cfg: dict[str, Any], exp: str) -> dict[str, Any]:
    """An experiment's settings before its grid (seed and point aside) and its grid."""
    run = C.resolve_run(cfg, exp, sorted(cfg["seeds"])[0]).to_dict()
    return {**run, "grid": json.dumps(cfg["experiments"][exp].get("grid") or {}, sort_keys=True)}


def ablations(s: Suite) -> list[Ablation]:
    """Every enabled experiment without a `ref:` whose settings and grid are those of a Table
    4.5 experiment but for one of ABLATION_SETTINGS, in Table 4.5's order, then config order."""
    design = {e: _design(s.cfg, e) for e in s.experiments}
    out = []
    for main in (e for _, e in rows(s, table=None) if e):
        for variant in s.experiments:
            if s.ref_of(variant) is not None:
                continue
            diff = [k for k in design[main] if design[main][k] != design[variant].get(k)]
            if len(diff) == 1 and diff[0] in ABLATION_SETTINGS:
                k = diff[0]
                out.append(Ablation(main, variant, k, design[main][k], design[variant][k]))
    return out


def setting_text(value: Any) -> str:
    """A run setting as the config writes it: true, 4, 5."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def per_seed(s: Suite, exp: str, bits: int) -> dict[int, float]:
    """seed -> test sequence accuracy (fraction) on `bits`-bit numbers."""
    out = {}
    for r in s.runs.get(exp, []):
        v = r.metrics.get("test", {}).get(str(bits), {}).get("seq_acc")
        if v is not None:
            out[r.seed] = float(v)
    return out


def ablation_cells(s: Suite) -> list[dict[str, Any]]:
    """One record per (ablation, number of bits): the thesis' value of the main row, both
    experiments' sequence accuracy and the difference of their means (variant − main; the
    seeds are not paired: under `ties: draw` a seed trains another point in each)."""
    refs = {e: ref for ref, e in rows(s, table=None) if e}
    out = []
    for a in ablations(s):
        for k in bit_counts(s):
            va, ma = per_seed(s, a.variant, k), per_seed(s, a.main, k)
            diff = V.difference([100.0 * v for v in va.values()], [100.0 * v for v in ma.values()])
            seeds = sorted(set(va) & set(ma))
            out.append(
                {
                    "ablation": a,
                    "bits": k,
                    "paper": paper_value(refs.get(a.main), k),
                    "main": per_length(s, a.main, k),
                    "variant": per_length(s, a.variant, k),
                    "diff": diff,
                    "diff_seeds": len(seeds),
                    "diff_verdict": difference_verdict(diff),
                }
            )
    return out


def ablation_table(s: Suite) -> Table:
    """Each Table 4.5 experiment beside its ablations: numbers per (ablation, bits) for the
    CSV; per ablation a block (thesis; the Table 4.5 experiment; the ablation; Δ) for
    Markdown and LaTeX."""
    recs = ablation_cells(s)
    bits = bit_counts(s)
    data = pd.DataFrame(
        [
            {
                "main": r["ablation"].main,
                "ablation": r["ablation"].variant,
                "setting": r["ablation"].setting,
                "main_value": setting_text(r["ablation"].main_value),
                "ablation_value": setting_text(r["ablation"].variant_value),
                "bits": r["bits"],
                "paper_acc": r["paper"],
                "main_n": r["main"].n,
                **summary_columns("main_seq_acc", r["main"]),
                "ablation_n": r["variant"].n,
                **summary_columns("ablation_seq_acc", r["variant"]),
                **summary_columns("diff", r["diff"]),
                "diff_seeds": r["diff_seeds"],
                "diff_verdict": r["diff_verdict"],
            }
            for r in recs
        ],
        columns=ABLATION_COLUMNS,
    )
    refs = {e: ref for ref, e in rows(s, table=None) if e}
    disp = []
    for i in range(0, len(recs), len(bits)):
        block = recs[i : i + len(bits)]
        a = block[0]["ablation"]
        ref = refs.get(a.main)
        lines = (
            (ref["model"] if ref else a.main, "thesis", lambda r: fmt.num(r["paper"], 2)),
            (a.main, f"{a.setting}: {setting_text(a.main_value)}", lambda r: with_ci(r["main"])),
            (a.variant, f"{a.setting}: {setting_text(a.variant_value)}", lambda r: with_ci(r["variant"])),
            ("", "Δ ablation − row", lambda r: _diff_text(r["diff"])),
        )
        for label, what, cell in lines:
            disp.append({"Model": label, "": what, **{f"{r['bits']} bits": cell(r) for r in block}})
    columns = ["Model", "", *(f"{k} bits" for k in bits)]
    return Table(
        "table4.5a",  # the LaTeX label (tab:table4.5a); the files are tables/ablations.*
        "Table 4.5a",
        "Ablations: each Table 4.5 experiment beside the same experiment and grid with one run setting "
        "changed: "
        + "; ".join(f"{k}, {what}" for k, what in ABLATION_SETTINGS.items())
        + ". Test sequence accuracy (%, exact match), mean [95% interval that sees failing seeds: "
        "psrnn.studies.relreg.verdicts] over seeds; "
        "Δ = ablation − Table 4.5 experiment in pp, the difference of the means [95% interval, "
        "each experiment's seeds resampled on their own].",
        data,
        pd.DataFrame(disp, columns=columns),
        "ll" + "r" * len(bits),
        [
            "No ablation in this config." if not recs else "Selected grid points: REPORT.md, grid searches.",
        ],
    )


ABLATION_COLUMNS = [
    "main",
    "ablation",
    "setting",
    "main_value",
    "ablation_value",
    "bits",
    "paper_acc",
    "main_n",
    "main_seq_acc_mean",
    "main_seq_acc_ci_low",
    "main_seq_acc_ci_high",
    "ablation_n",
    "ablation_seq_acc_mean",
    "ablation_seq_acc_ci_low",
    "ablation_seq_acc_ci_high",
    "diff_mean",
    "diff_ci_low",
    "diff_ci_high",
    "diff_seeds",
    "diff_verdict",
]


def _diff_text(x: Summary) -> str:
    if x.n == 0:
        return fmt.DASH
    return f"{x.mean:+.2f}" + (f" [{x.ci_low:+.2f}, {x.ci_high:+.2f}]" if x.n > 1 else "")


# --- REPORT.md --------------------------------------------------------------------------------


def span(s: RelRegSuite, exp: str) -> str:
    """An experiment's mean sequence accuracy over the lengths it was tested on, in words."""
    means = [(k, per_length(s, exp, k).mean) for k in bit_counts(s)]
    means = [(k, v) for k, v in means if not math.isnan(v)]
    if not means:
        return "no finished run"
    if all(v == 100.0 for _, v in means):
        return f"100.00 % at every length ({means[0][0]}-{means[-1][0]} bits)"
    (k0, v0), (k1, v1) = means[0], means[-1]
    return f"{v0:.2f} % at {k0} bits to {v1:.2f} % at {k1} bits"


def perfect(s: RelRegSuite, exp: str) -> bool:
    """Every seed exact on every test number of every length."""
    runs = s.runs.get(exp, [])
    return bool(runs) and all(
        per_length(s, exp, k).n == len(runs) and per_length(s, exp, k).mean == 100.0 for k in bit_counts(s)
    )


def thesis_span(ref: dict[str, Any] | None) -> tuple[float, float] | None:
    """(lowest, highest) value of a thesis row, in %."""
    vs = [100.0 * float(v) for v in (ref or {}).get("acc", {}).values()]
    return (min(vs), max(vs)) if vs else None


def against_thesis(s: RelRegSuite, exp: str, ref: dict[str, Any] | None) -> str:
    """`exp` at the longest length the thesis prints: ours, the thesis', the verdict and
    where our mean lies against the span of the thesis' row."""
    printed = sorted(int(k) for k in (ref or {}).get("acc", {}))
    if not printed or not s.runs.get(exp):
        return ""
    k = printed[-1]
    ours, theirs, (lo, hi) = per_length(s, exp, k), paper_value(ref, k), thesis_span(ref) or (0.0, 0.0)
    where = "inside" if lo <= ours.mean <= hi else ("below" if ours.mean < lo else "above")
    return (
        f"{exp} at {k} bits: {ours.mean:.2f} % {fmt.ci(ours)} against the thesis' {fmt.num(theirs, 2)} % "
        f"({verdict_short(s, exp, ref, k)}), {where} the thesis' row's span of {lo:.2f}-{hi:.2f} % over "
        f"{printed[0]}-{k} bits"
    )


def verdict_short(s: RelRegSuite, exp: str, ref: dict[str, Any] | None, k: int) -> str:
    return short(verdict_at(s, ref, exp, k))


def ablation_lines(s: RelRegSuite) -> list[str]:
    """Per ablation, what changed and what it did, from the numbers; then whether the rows at
    100 % keep it when selected without longer numbers."""
    refs = {e: ref for ref, e in rows(s, table=None) if e}
    by_pair: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in ablation_cells(s):
        by_pair[(r["ablation"].main, r["ablation"].variant)].append(r)
    lines = []
    for a in ablations(s):
        recs = by_pair[(a.main, a.variant)]
        clear = [f"{r['bits']} bits ({r['diff'].mean:+.2f} pp)" for r in recs if r["diff_verdict"] in _CLEAR]
        text = (
            f"- **{a.variant}** ({a.setting}: {setting_text(a.main_value)} → "
            f"{setting_text(a.variant_value)}): "
            f"{span(s, a.variant)}, against {a.main}'s {span(s, a.main)}. The difference is clear "
            f"(95% interval without 0) at " + (", ".join(clear) if clear else "no length") + "."
        )
        if a.setting == "valid_bits":
            text += " " + selection_text(s, a)
        thesis = [t for t in (against_thesis(s, e, refs.get(a.main)) for e in (a.main, a.variant)) if t]
        if thesis:
            text += " " + "; ".join(thesis) + "."
        lines.append(text)
    by_selection = [a for a in ablations(s) if a.setting == "valid_bits"]
    if by_selection:
        at_100 = [a for a in by_selection if perfect(s, a.main)]
        kept = [a.variant for a in at_100 if perfect(s, a.variant)]
        lost = [a.variant for a in at_100 if s.runs.get(a.variant) and not perfect(s, a.variant)]
        unrun = [a.variant for a in at_100 if not s.runs.get(a.variant)]
        printed = [k for k in bit_counts(s) if any(k in r["acc"] for r in s.reference["table45"])]
        means = [(per_length(s, a.variant, printed[-1]).mean, a.variant) for a in by_selection if printed]
        ranked = sorted(
            ((v, e) for v, e in means if not math.isnan(v)), key=lambda x: -x[0]
        )  # ties: config order
        if ranked:
            lines.append(
                f"- **The rows' order under the other selection.** At {printed[-1]} bits, selected without "
                "longer numbers: "
                + " > ".join(f"{e} {v:.2f}" for v, e in ranked)
                + " (sequence accuracy, %)."
            )
        lines.append(
            "- **Does the 100 % depend on the selection?** Rows exact on every test number for every seed "
            "with the Table 4.5 selection: "
            + (", ".join(a.main for a in at_100) or "none")
            + (
                f". Selected without longer numbers, still so: {', '.join(kept) or 'none'}; no longer: "
                f"{', '.join(lost) or 'none'}"
                + (f"; no finished run: {', '.join(unrun)}" if unrun else "")
                + "."
                if at_100
                else "."
            )
        )
    return lines


_CLEAR = ("better (CI above 0)", "worse (CI below 0)")  # psrnn.report.stats.difference_verdict


def selection_text(s: RelRegSuite, a: Ablation) -> str:
    """Both experiments' selection data, how many grid points tie at 100 % on it, the chosen points."""
    parts = []
    for e in (a.main, a.variant):
        sel = s.selections.get(e, {})
        if sel.get("draws"):
            chosen = f"the final runs draw {len({d['point'] for d in sel['draws']})} points of that tie set"
        else:
            chosen = f"chosen `{s.selected[e]}`" if e in s.selected else f"chosen {fmt.DASH}"
        parts.append(
            f"{e} selects on {selection_data(s.settings[e])}: {tied_points(s, e)} of "
            f"{len(s.points.get(e, []))} grid points tied at the best validation accuracy there, {chosen}"
        )
    return "; ".join(parts) + "."
