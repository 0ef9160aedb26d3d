"""The paper's numbers against ours, one line each, for REPORT.md: Tables 1, 2 and 4 and
the parameter counts, then paired same-seed comparisons of private/shared against full
share and the GRU baseline.

    python -m psrnn compile --config config/paper.yaml   # -> results/paper/REPORT.md

Each line: the paper's value, ours (mean ± std, 95% t-interval cut to the range the number
can take and marked when uninformative, n seeds), the difference and a verdict; the notes
under a table explain its marks (`ci_notes`).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from psrnn import config as C
from psrnn.report import fmt, stats
from psrnn.report.collect import Suite
from psrnn.report.stats import (
    MISSING,
    PP,
    WIDE_PP,
    Summary,
    bounded,
    difference_verdict,
    paired,
    resolve_text,
    seeds_to_resolve,
    t_quantile,
    verdict,
)
from psrnn.studies.private_shared.results.reading import manifest_stats
from psrnn.studies.private_shared.results.tables import (
    DATASET_LABEL,
    MODEL_LABEL,
    accuracy,
    best_experiment,
    loss,
    params,
    table2_experiments,
)


def number_row(
    what: str, paper: float | None, ours: Summary, scale: str | None, digits: int, paper_digits: int
) -> str:
    """One paper number against ours; scale: None at paper scale, else what the config is
    (Suite.scale_name), which the verdict cell names instead of comparing."""
    diff = ours.mean - paper if paper is not None and ours.n else math.nan
    cells = [
        what,
        fmt.num(paper, paper_digits),
        fmt.mean_std(ours, digits),
        fmt.ci(ours, digits),
        str(ours.n),
        fmt.signed(diff, digits),
        row_verdict(paper, ours, scale),
    ]
    return "| " + " | ".join(fmt.md(c) for c in cells) + " |"


def row_verdict(paper: float | None, ours: Summary, scale: str | None) -> str:
    """The verdict of one paper number against ours (scale: as number_row's), which REPORT.md,
    the forest plot and `psrnn explain` print."""
    return verdict(paper, ours, scale is None, scale=scale or stats.SMALL)


def scale_of(s: Suite) -> str | None:
    """number_row's `scale` of a suite: None at paper scale, else what the config is."""
    return None if s.paper_scale else s.scale_name


NUMBER_HEADER = [
    "| Paper number | Paper | Ours (mean ± std) | 95% CI | n | Δ | Verdict |",
    "|---|---:|---:|---:|---:|---:|---|",
]


def ci_notes(shown: list[Summary]) -> list[str]:
    """The notes under a table for the marks `fmt.ci` gave its intervals; [] for none."""
    flagged = [x for x in shown if x.uninformative]
    if not flagged:
        return []
    ts = ", ".join(f"{t_quantile(n):.2f} for n = {n}" for n in sorted({x.n for x in flagged}))
    notes = [
        f"Uninformative intervals: with n seeds the 95% interval is mean ± t · std / √n, "
        f"with t = {ts}: few seeds give wide intervals."
    ]
    if any(x.wide for x in flagged):
        notes.append(f"{fmt.WIDE_MARK} wider than {WIDE_PP:g} pp, too wide to tell the paper's models apart.")
    if any(x.clipped for x in flagged):
        notes.append(
            f"{fmt.CLIPPED_MARK} clipped: the interval ran past the range the number can take "
            "(0 to 100 % for an accuracy, −100 to 100 pp for a difference of two, at least 0 "
            "for a loss) and is shown cut to it; the uncut one is mean ± t · std / √n from "
            "the same row."
        )
    return ["", *[f"- {n}" for n in notes]]


def experiments_or_none(s: Suite, ref_id: str) -> list[str | None]:
    """The experiments of a reference row, or [None]: a row without one still gets a line."""
    return [*s.experiments_for(ref_id)] or [None]


def table2_lines(s: Suite) -> list[str]:
    """One line per Table 2 row this config runs; the rows it has no experiment for are
    counted below the table, not listed."""
    lines, shown, rows = list(NUMBER_HEADER), [], rows_run(s, "table2")
    for ref, exp in rows:
        acc = accuracy(s, exp)
        shown.append(acc)
        lines.append(
            number_row(
                f"{ref['id']} accuracy % ({exp})",
                ref["acc"],
                acc,
                scale_of(s),
                2,
                1,
            )
        )
    skipped = len(s.reference["table2"]) - len({ref["id"] for ref, _ in rows})
    note = ["", f"{skipped} of Table 2's {len(s.reference['table2'])} rows are not run by this config."]
    return lines + ci_notes(shown) + (note if skipped else [])


def rows_run(s: Suite, table: str) -> list[tuple[dict, str]]:
    """(reference row, experiment) for every row of `table` ("table2", "table4") this
    config runs."""
    return [(ref, exp) for ref in s.reference[table] for exp in s.experiments_for(ref["id"])]


def findings_lines(s: Suite) -> list[str]:
    """REPORT's opening: the verdict counts of the Table 2 and Table 4 rows the config runs
    and of the paper's orderings (none for a small config, which gives no verdict). A
    reduced-scale check reads the orderings only, each said to be at its scale."""
    if not (s.paper_scale or s.reduced_scale):
        return []
    out = []
    if s.reduced_scale:
        out.append(
            f"- **Table 2 accuracies**: not compared with the paper's ({s.scale_name}: the data "
            "and epochs are cut, so the values are not the paper's to reproduce)."
        )
    for name, table in (("Table 2", "table2"), ("Table 4", "table4")):
        rows = rows_run(s, table)
        if rows and s.paper_scale:
            verdicts = [verdict(ref["acc"], accuracy(s, exp), True) for ref, exp in rows]
            run = f"{len(rows)} of {len(s.reference[table])} rows run"
            out.append(f"- **{name} accuracies** ({run}): {tally(verdicts)}.")
    claims = [
        claim_reading(o.gap, o.diff, s.paper_scale, s.reduced_scale)
        for o in orderings(s)
        if o.diff is not None
    ]
    if claims:
        at = f" at this reduced scale ({s.scale_name})" if s.reduced_scale else ""
        out.append(f"- **The paper's orderings{at}** ({len(claims)} comparisons): {tally(claims)}.")
    return out


def tally(readings: list[str]) -> str:
    """'3 reproduced, 1 inconclusive': each reading's words before any parenthesis, counted
    (most first, then by name); a reading that starts with a number is set off ('1 × 1 seed:
    no verdict')."""
    counts = Counter(r.split(" (")[0] for r in readings)
    return ", ".join(
        f"{n} × {k}" if k[:1].isdigit() else f"{n} {k}"
        for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )


def table4_lines(s: Suite) -> list[str]:
    lines, shown = list(NUMBER_HEADER), []
    for ref in s.reference["table4"]:
        for exp in experiments_or_none(s, ref["id"]):
            for key, label, digits, pd in (
                ("acc", "accuracy %", 2, 1),
                ("main_loss", "main loss", 3, 3),
                ("aux_loss", "aux loss", 3, 3),
            ):
                if ref[key] is None:
                    continue  # the paper prints "-" (no auxiliary task at 0% shared)
                if not exp:
                    ours = MISSING
                elif key == "acc":
                    ours = accuracy(s, exp)
                else:
                    ours = loss(s, exp, {"main_loss": "test_main_loss", "aux_loss": "test_aux_loss"}[key])
                shown.append(ours)
                lines.append(
                    number_row(
                        f"{ref['id']} {label} ({exp or 'no experiment'})",
                        ref[key],
                        ours,
                        scale_of(s),
                        digits,
                        pd,
                    )
                )
    return lines + ci_notes(shown)


def params_lines(s: Suite) -> list[str]:
    lines = ["| Paper number | Paper | Ours | Ours / paper |", "|---|---:|---:|---:|"]
    rows = [(r["id"], r["params"]) for r in s.reference["table2"]] + [
        (r["id"], r["params"]) for r in s.reference["table4"]
    ]
    for ref_id, paper in rows:
        for exp in experiments_or_none(s, ref_id):
            p = params(s, exp) if exp else math.nan
            ratio = fmt.num(p / paper, 2) if not math.isnan(p) else fmt.DASH
            lines.append(
                f"| {ref_id} #params ({exp or 'no experiment'}) | {fmt.count(paper)} | "
                f"{fmt.count(p)} | {ratio} |"
            )
    return lines


def table1_lines(s: Suite) -> list[str]:
    """Dataset statistics are deterministic: 'same' or 'differs', no interval."""
    lines = ["| Paper number | Paper | Ours | Verdict |", "|---|---:|---:|---|"]
    for ref in s.reference["table1"]:
        m = s.manifests.get(ref["dataset"])
        ours = manifest_stats(m) if m else {}
        for key, label in (
            ("mean_length", "mean length"),
            ("classes", "classes"),
            ("train", "train size"),
            ("valid", "valid size"),
        ):
            o = ours.get(key)
            if o is None:
                v = "missing"
            elif abs(o - ref[key]) <= 0.005 * ref[key]:
                v = "same"
            else:
                v = f"differs ({100 * (o - ref[key]) / ref[key]:+.1f}%)"
            shown = fmt.num(o, 1) if key == "mean_length" else fmt.integer(o)
            lines.append(f"| table1/{ref['dataset']} {label} | {fmt.integer(ref[key])} | {shown} | {v} |")
    return lines


# --- paired comparisons ---------------------------------------------------------------------


def by_seed(s: Suite, exp: str) -> dict[int, float]:
    return {r.seed: r.value("test_acc") for r in s.runs.get(exp, []) if not math.isnan(r.value("test_acc"))}


def paper_acc(s: Suite, exp: str) -> float | None:
    """The paper's Table 2 accuracy of an experiment's row (None: no such row)."""
    ref = s.ref_of(exp)
    row = next((r for r in s.reference["table2"] if r["id"] == ref), None)
    return None if row is None else row.get("acc")


def paired_lines(s: Suite) -> list[str]:
    """The paper's orderings within a dataset, each as a claim read from our seeds: best
    private/shared vs best full share and best GRU ("best" = highest mean validation
    accuracy among the dataset's table2 experiments), same seeds. The claim holds when our
    paired difference's 95 % interval lies on the paper's side of 0, is reversed when it
    lies on the other side; else it is unresolved, with the seeds that would resolve our
    mean gap at its spread."""
    lines = [
        "| Dataset | Comparison | Experiments | Seeds | Paper gap (pp) | Our mean difference (pp) | 95% CI "
        "| Reading |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    shown = []
    for o in orderings(s):
        if o.diff is None:
            missing = "private/shared" if o.ps is None else MODEL_LABEL[o.other_kind]
            dashes = " | ".join([fmt.DASH] * 5)
            lines.append(
                f"| {DATASET_LABEL[o.dataset]} | {o.label} | {dashes} | missing (no finished {missing} run) |"
            )
            continue
        shown.append(o.diff)
        cells = [DATASET_LABEL[o.dataset], o.label, f"{o.ps} vs {o.other}", o.seeds or fmt.DASH]
        cells += [fmt.signed(o.gap, 1), fmt.signed(o.diff.mean), fmt.ci(o.diff)]
        lines.append(
            "| "
            + " | ".join(
                str(c) for c in [*cells, claim_reading(o.gap, o.diff, s.paper_scale, s.reduced_scale)]
            )
            + " |"
        )
    return lines + ci_notes(shown)


@dataclass(frozen=True)
class Ordering:
    """One of the paper's orderings on a dataset: best private/shared against the best full
    share or GRU; diff (ps − other over common seeds, pp) is None where either is missing."""

    dataset: str
    other_kind: str
    ps: str | None
    other: str | None
    diff: Summary | None = None
    seeds: list[int] = field(default_factory=list)
    gap: float = math.nan  # the paper's ps − other, pp

    @property
    def label(self) -> str:
        return f"private/shared − {MODEL_LABEL[self.other_kind]}"


def orderings(s: Suite) -> list[Ordering]:
    """The orderings paired_lines shows and findings_lines counts, per enabled dataset."""
    out = []
    for ds in C.enabled_datasets(s.cfg):
        ps = best_experiment(s, table2_experiments(s, ds, "ps"))
        for kind in ("full", "gru"):
            other = best_experiment(s, table2_experiments(s, ds, kind))
            if ps is None or other is None:
                out.append(Ordering(ds, kind, ps, other))
                continue
            diff, seeds = paired(by_seed(s, ps), by_seed(s, other), 100.0)
            a, b = paper_acc(s, ps), paper_acc(s, other)
            gap = a - b if a is not None and b is not None else math.nan
            out.append(Ordering(ds, kind, ps, other, bounded(diff, *PP, wide=WIDE_PP), seeds, gap))
    return out


def claim_reading(gap: float, diff: Summary, paper_scale: bool, reduced: bool = False) -> str:
    """Our seeds' reading of the paper's ordering (private/shared ahead by `gap` pp).
    reduced: a reduced-scale check (Suite.reduced_scale) reads it as at paper scale; the
    findings and tables say at which scale."""
    if diff.n == 0:
        return "missing"
    if not (paper_scale or reduced):
        return f"private/shared {difference_verdict(diff)}; not assessed (small config)"
    if diff.n < 2:
        return "1 seed: no verdict"
    if math.isnan(gap) or gap == 0:
        return f"private/shared {difference_verdict(diff)} (the paper orders them not)"
    ahead, behind = diff.ci_low > 0, diff.ci_high < 0  # private/shared ahead / behind
    if (gap > 0 and ahead) or (gap < 0 and behind):
        return "the paper's order holds (CI on its side of 0)"
    if (gap > 0 and behind) or (gap < 0 and ahead):
        return "reversed (CI on the other side of 0)"
    return f"unresolved (CI contains 0{resolve_text(seeds_to_resolve(diff, diff.mean))})"
