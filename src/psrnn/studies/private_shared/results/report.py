"""The reproduction report (REPORT.md) and the compact metrics summary for DVC.

    python -m psrnn compile --config config/paper.yaml   # -> results/paper/REPORT.md, metrics.json

The runs' commits, machines and compute time; runs whose training diverged; every
deviation from the paper's protocol, once, in one table; one line per paper number and the
paired same-seed comparisons (psrnn.studies.private_shared.results.numbers); what is missing; and the compiled
figures.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from psrnn.report import FOREST, fmt
from psrnn.report.collect import Suite, all_runs  # noqa: F401 (re-export)
from psrnn.report.provenance import hours, notes_lines, reused_note, run_time_line, search_points, tally_lines  # noqa: F401
from psrnn.report.stats import MARGIN_PP
from psrnn.studies.private_shared.results import FIGURE_TITLES as TITLES
from psrnn.studies.private_shared.results import FOREST_SENTENCE
from psrnn.studies.private_shared.results.deviations import deviation_lines
from psrnn.studies.private_shared.results.inert import inert_lines
from psrnn.studies.private_shared.results.numbers import (
    findings_lines,
    paired_lines,
    params_lines,
    table1_lines,
    table2_lines,
    table4_lines,
)
from psrnn.studies.private_shared.results.own import own_lines
from psrnn.studies.private_shared.results.tables import metric

# steps of the official images (the paper trains on them whole): 784, 784, 1024


# --- provenance -----------------------------------------------------------------------------


def provenance(s: Suite) -> list[str]:
    runs = all_runs(s)
    expected = len(s.experiments) * len(s.cfg["seeds"])
    commits = Counter(r.metrics.get("git_commit") or "unknown" for r in runs)
    machines = Counter(
        f"{r.metrics.get('device_name') or r.metrics.get('device') or 'unknown'}; "
        f"{r.metrics.get('platform') or 'unknown platform'}; torch {r.metrics.get('torch_version') or '?'}"
        + (f", CUDA {r.metrics['cuda_version']}" if r.metrics.get("cuda_version") else "")
        for r in runs
    )
    n = search_points(s)
    searched = f"{len(s.search)} of {fmt.plural(n, 'grid-search run')} finished" if n else "no grid search"
    lines = [
        f"- Paper: {s.reference.get('paper', '').strip()}",
        f"- Config: `{s.name}` (paper_scale: {str(s.paper_scale).lower()}), seeds {sorted(s.cfg['seeds'])}",
        f"- Runs: {len(runs)} of {expected} finished ({fmt.plural(len(s.experiments), 'experiment')} × "
        f"{fmt.plural(len(s.cfg['seeds']), 'seed')}); {searched}",
        *tally_lines(commits, machines),
        run_time_line([r.metrics for r in runs], s.search),
        *notes_lines(s),
    ]
    return lines


# --- diverged runs --------------------------------------------------------------------------


def diverged_lines(s: Suite) -> list[str]:
    """A table of the runs whose training loss exploded (metrics.json `diverged`: null or
    absent = fine, else {epoch, train_loss, first_loss}, or {epoch, non_finite} for a run
    that went non-finite and ended at its best epoch); [] when there are none."""
    rows = []
    for r in all_runs(s):
        d = r.metrics.get("diverged")
        if not d:
            continue
        d = d if isinstance(d, dict) else {}  # a bare `true` still lists the run
        loss, first = d.get("train_loss"), d.get("first_loss")
        ratio = loss / first if not fmt.is_missing(loss) and not fmt.is_missing(first) and first else None
        shown = "not finite (run ended at its best epoch)" if d.get("non_finite") else fmt.sig(loss)
        rows.append(
            f"| {r.experiment} | {r.seed} | {fmt.integer(d.get('epoch'))} | {shown} | "
            f"{fmt.sig(first)} | {fmt.sig(ratio)} |"
        )
    if not rows:
        return []
    return [
        "",
        "## Diverged runs",
        "",
        "Training loss exploded or went non-finite (metrics.json `diverged`; a non-finite run's "
        "result is its best epoch before that); these runs still count in the means below.",
        "",
        "| Experiment | Seed | Epoch | Training loss | First loss | Ratio |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
    ]


# --- the report -----------------------------------------------------------------------------


def missing_lines(s: Suite) -> list[str]:
    out = []
    for key in ("table2", "table4", "figures"):
        for ref in s.reference.get(key, []):
            if not s.experiments_for(ref["id"]):
                out.append(f"- `{ref['id']}`: no experiment in this config")
    n_seeds = len(s.cfg["seeds"])
    for exp in s.experiments:
        k = len(s.runs.get(exp, []))
        if k < n_seeds:
            out.append(f"- `{exp}`: {k} of {fmt.plural(n_seeds, 'run')} finished")
    return out or ["- nothing: every reference row has an experiment and every run finished"]


def figure_lines(outputs: list[str]) -> list[str]:
    """Markdown images of the compiled figures among `outputs` (their PNGs, by paths
    relative to REPORT.md): the paper's figures, then the training curves; [] for none."""
    stems = [
        o.removeprefix("figures/").removesuffix(".png")
        for o in outputs
        if o.startswith("figures/") and o.endswith(".png")
    ]
    paper = [(TITLES[st], st) for st in stems if st in TITLES]
    runs = [
        (f"Training curves: {st.removeprefix('curves_')}", st) for st in stems if st.startswith("curves_")
    ]
    if not paper and not runs:
        return []

    def images(pairs: list[tuple[str, str]]) -> list[str]:
        return [line for title, st in pairs for line in ("", f"![{title}](figures/{st}.png)")]

    lines = ["", "## Figures", *images(paper)]
    if runs:
        lines += [
            "",
            "### Training curves (validation accuracy and losses per epoch, seeds overlaid)",
            *images(runs),
        ]
    return lines


def group_outputs(paths: list[str]) -> list[str]:
    """["figures/a.pdf", "figures/a.png"] -> ["figures/a.{pdf,png}"], first-seen order."""
    groups: dict[str, list[str]] = {}
    for p in paths:
        stem, _, ext = p.rpartition(".")
        groups.setdefault(stem, []).append(ext)
    return [
        f"{stem}.{exts[0]}" if len(exts) == 1 else f"{stem}.{{{','.join(exts)}}}"
        for stem, exts in groups.items()
    ]


def output_lines(outputs: list[str]) -> list[str]:
    """The report's closing section: every compiled file, a figure's formats on one line."""
    return ["", "## Outputs", "", *[f"- `{o}`" for o in group_outputs(outputs)], ""]


SMALLEST_VERDICT_SEEDS = 3  # the fewest seeds whose t-interval can decide Table 2's closer rows
# what config/quick-3seeds.yaml costs, by `bench --only budget --times-from` (a test checks
# the number against the file)
QUICK_3SEEDS_BUDGET = "results/bench/graphs/grid4-budgets.md"
QUICK_3SEEDS_HOURS = "15.4 H200-hours at the 70-epoch cap"


def single_seed_lines(s: Suite) -> list[str]:
    """For a paper-scale config of one seed per row: that it gives no verdicts, and the
    smallest one that would."""
    if not s.paper_scale or len(s.cfg["seeds"]) != 1:
        return []
    return [
        "",
        f"> **One seed per row: this config gives no verdicts**, only single numbers beside the "
        f"paper's. The smallest config that gives them trains {SMALLEST_VERDICT_SEEDS} seeds per "
        f"row (`seeds: [0, 1, 2]`): for quick.yaml that is `config/quick-3seeds.yaml`, "
        f"{QUICK_3SEEDS_HOURS} (`{QUICK_3SEEDS_BUDGET}`).",
    ]


def forest_lines(s: Suite, outputs: list[str]) -> list[str]:
    """The sentence that points to the forest plot of Table 2's verdicts, where it is drawn."""
    if f"figures/{FOREST}.png" not in outputs:
        return []
    scale = "" if s.paper_scale else f' At this {s.scale_name} every row reads "not assessed".'
    return ["", FOREST_SENTENCE + scale]


def report_markdown(s: Suite, outputs: list[str]) -> str:
    head = [f"# Reproduction report: config `{s.name}`", ""]
    if not s.paper_scale:
        head += [
            f"> **{fmt.sentence(str(s.scale_label))}.** Every number below comes from a shrunken "
            "setup (see Deviations); none of them is a reproduction of the paper's results, and "
            + (
                "none is compared with the paper's: the paper's orderings are read on our seeds, "
                "at this scale (Findings)."
                if s.reduced_scale
                else "no verdict is given."
            ),
            "",
        ]
    findings = findings_lines(s)
    if findings:
        head += ["## Findings", "", *findings, *single_seed_lines(s), *forest_lines(s, outputs), ""]
    parts = (
        head
        + provenance(s)
        + diverged_lines(s)
        + [
            "",
            "## Deviations from the paper's protocol",
            "",
            *deviation_lines(s),
            "",
            "## Paper numbers, one per line",
            "",
            f"Ours = mean ± sample std over seeds; 95% CI from Student's t, cut to the range the number "
            f"can take; {fmt.WIDE_MARK} and {fmt.CLIPPED_MARK} mark an uninformative one (notes under each "
            f"table); Δ = ours − paper. Verdict (an equivalence test with a margin of ours, "
            f"±{MARGIN_PP:g} pp, as the paper gives none): reproduced when our whole CI lies within the "
            "margin of the paper's value, not reproduced when it lies wholly beyond it, inconclusive "
            "otherwise, with the seeds that would decide it at our seeds' spread. One seed gives no CI "
            "and no verdict.",
            "",
            "### Table 2: test accuracy",
            "",
            *table2_lines(s),
            "",
            "### Table 4: CIFAR-10 shared-proportion sweep",
            "",
            *table4_lines(s),
            "",
            "### Parameter counts (Tables 2 and 4)",
            "",
            *params_lines(s),
            "",
            "### Table 1: dataset statistics (from the prepared data)",
            "",
            *table1_lines(s),
            "",
            "Table 3 repeats published numbers of other papers (and the paper's best Table 2 rows); "
            "our rows are in `tables/table3.md`.",
            "",
            "## Paired comparisons (same seeds, test accuracy)",
            "",
            *paired_lines(s),
            *inert_lines(s),
            *own_lines(s),
            *figure_lines(outputs),
            "",
            "## Missing",
            "",
            *missing_lines(s),
            *output_lines(outputs),
        ]
    )
    return "\n".join(parts)


def _clean(x: float) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 6)


def summary_metrics(s: Suite) -> dict[str, Any]:
    """Compact per-experiment summary for `dvc metrics show` (null = no finished run)."""
    exps = {}
    for exp in s.experiments:
        acc = metric(s, exp, "test_acc")
        exps[exp] = {
            "ref": s.ref_of(exp),
            "n": acc.n,
            "test_acc_mean": _clean(acc.mean),
            "test_acc_std": _clean(acc.std),
            "best_valid_acc_mean": _clean(metric(s, exp, "best_valid_acc").mean),
        }
    runs = all_runs(s)
    return {
        "config": s.name,
        "paper_scale": s.paper_scale,
        "status": s.scale_label or "paper-scale",
        "runs_finished": len(runs),
        "runs_expected": len(s.experiments) * len(s.cfg["seeds"]),
        "compute_hours": {k: round(v, 4) for k, v in hours([r.metrics for r in runs]).items()},
        "experiments": exps,
    }
