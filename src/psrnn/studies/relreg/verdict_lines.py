"""The verdict sections of a `study: relreg` REPORT.md (psrnn.studies.relreg.report puts them in
place): the summary that opens it (each Table 4.5's verdict counts and causes, and what
the numbers say about the thesis' claim), the detail table with a verdict and cause per
cell, the list of causes, where we match and where not, and why.

    python -m psrnn compile --config config/relreg-full.yaml

Every sentence is computed from the runs (psrnn.studies.relreg.collect) by the rule of
psrnn.studies.relreg.verdicts.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from psrnn.report import fmt
from psrnn.report.tables import Table, to_markdown
from psrnn.studies.relreg import verdicts as V
from psrnn.studies.relreg.collect import (
    FIXED,
    SEARCH,
    RelRegSuite,
    bit_counts,
    cells,
    per_length,
    rows,
    seed_values,
    short,
    unregularized_caption,
)
from psrnn.studies.relreg.ties import selection_lines

TABLE_TITLES = {
    FIXED: "Table 4.5 as the thesis trained it: each row at its bolded settings",
    SEARCH: "Table 4.5 as our grid search selects it",
}


def detail_lines(s: RelRegSuite) -> list[str]:
    lines = [
        "| Model | Experiment | Table | Bits | Thesis % | Ours, sequence % | 95% interval | Seeds at >= 99 % "
        "| Δ (pp) | Margin (pp) | Verdict | Cause | Ours, bit % (diagnostic) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for table in (FIXED, SEARCH):
        for r in cells(s, extra=table == SEARCH, table=table):
            seq, paper = r["seq"], r["paper"]
            row = [
                r["model"],
                r["experiment"] or fmt.DASH,
                "thesis' settings" if table == FIXED else "our search",
                str(r["bits"]),
                fmt.num(paper, 2),
                fmt.mean_std(seq),
                fmt.ci(seq),
                r["seeds"].text(),
                fmt.signed(seq.mean - paper) if paper is not None and seq.n else fmt.DASH,
                f"{r['margin']:.2f}",
                r["verdict"],
                r["cause"] or "",
                fmt.mean_std(r["bit"]),
            ]
            lines.append("| " + " | ".join(fmt.md(c) for c in row) + " |")
    return lines


def cause_lines(s: RelRegSuite) -> list[str]:
    """The fixed list of causes, each with the cells it names (counted over both tables)."""
    named: dict[str, list[str]] = defaultdict(list)
    for table in (FIXED, SEARCH):
        for r in cells(s, table=table):
            if r["cause"]:
                named[r["cause"]].append(f"{r['experiment']} {r['bits']}")
    lines = [
        "**Causes.** Each cell that is not reproduced names the first of these that its numbers show "
        "(psrnn.studies.relreg.verdicts.cause):",
        "",
    ]
    for key, text in V.CAUSE_SUMMARY.items():
        where = named.get(key, [])
        lines.append(f"- **{key}** ({len(where)} cells{': ' + ', '.join(where) if where else ''}): {text}.")
    return lines


VERDICT_ORDER = (
    "reproduced",
    "inconclusive",
    "not reproduced, ours higher",
    "not reproduced, ours lower",
    "too few seeds",
    "not assessed",
)


def match_lines(s: RelRegSuite, table: str = SEARCH) -> list[str]:
    """The verdicts of one Table 4.5 grouped: each kind once, with every row and number of bits."""
    recs = [r for r in cells(s, table=table) if r["paper"] is not None]
    groups: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for r in recs:
        key = short(r["verdict"]) if r["experiment"] and r["seq"].n else "no finished run"
        groups[key][r["model"]].append(r["bits"])
    lines = []
    for key in (*VERDICT_ORDER, "no finished run"):
        if groups.get(key):
            where = "; ".join(f"{m} at {', '.join(map(str, ks))} bits" for m, ks in groups[key].items())
            lines.append(f"- **{key}** ({sum(map(len, groups[key].values()))} of {len(recs)}): {where}")
    return lines + best_lines(s, table)


def match_section(s: RelRegSuite, table: str) -> list[str]:
    """match_lines under the table's title ([] when the config has none of its rows)."""
    if not [e for _, e in rows(s, table=table) if e]:
        return []
    return [f"### {TABLE_TITLES[table]}", "", *match_lines(s, table), ""]


def table_section(s: RelRegSuite, table: str, t: Table) -> list[str]:
    """One Table 4.5 under its heading ([] when the config has none of its rows)."""
    if not [e for _, e in rows(s, table=table) if e]:
        return []
    return [f"## {TABLE_TITLES[table]}", "", to_markdown(t, s)]


def tally(s: RelRegSuite, table: str) -> tuple[Counter[str], dict[str, Counter[str]], int]:
    """(verdicts, causes per verdict kind, cells compared) of one Table 4.5's cells with a
    thesis value and an experiment."""
    recs = [r for r in cells(s, table=table) if r["paper"] is not None and r["experiment"]]
    verdicts = Counter(short(r["verdict"]) if r["seq"].n else "no finished run" for r in recs)
    causes: dict[str, Counter[str]] = defaultdict(Counter)
    for r in recs:
        if r["cause"]:
            causes[short(r["verdict"])][r["cause"]] += 1
    return verdicts, causes, len(recs)


def tally_at(s: RelRegSuite, table: str, m: float | None) -> Counter[str]:
    """One Table 4.5's verdicts with every row's margin set to `m` pp (None: each row's own,
    psrnn.studies.relreg.verdicts.thesis_margin)."""
    recs = [r for r in cells(s, table=table) if r["paper"] is not None and r["experiment"] and r["seq"].n]
    return Counter(
        short(V.verdict(r["paper"], r["seq"], r["margin"] if m is None else m, s.paper_scale)) for r in recs
    )


def sensitivity_lines(s: RelRegSuite) -> list[str]:
    """REPORT.md's table: each Table 4.5's verdict tally at the margins V.SENSITIVITY_PP beside
    the chosen ones ([] for a small config)."""
    tables = [t for t in (FIXED, SEARCH) if [e for _, e in rows(s, table=t) if e]]
    if not s.paper_scale or not tables:
        return []
    kinds = ("reproduced", "inconclusive", "not reproduced, ours higher", "not reproduced, ours lower")
    lines = [
        "**The margin's weight.** Each Table 4.5's verdicts (reproduced / inconclusive / ours higher / "
        "ours lower) with every row's margin set to the value in the column, beside the chosen margins "
        f"(the thesis' spread between its equivalent rows, {V.equivalent_spread(s.reference):.2f} pp, or "
        "half a row's printed step where more: psrnn.studies.relreg.verdicts.thesis_margin).",
        "",
        "| Table | Chosen | " + " | ".join(f"{m:g} pp" for m in V.SENSITIVITY_PP) + " |",
        "|---|---|" + "---|" * len(V.SENSITIVITY_PP),
    ]
    for t in tables:
        counts = [tally_at(s, t, None), *(tally_at(s, t, m) for m in V.SENSITIVITY_PP)]
        lines.append(
            f"| {TABLE_TITLES[t]} | "
            + " | ".join(" / ".join(str(c[k]) for k in kinds) for c in counts)
            + " |"
        )
    return lines


def summary_lines(s: RelRegSuite) -> list[str]:
    """The report's first section: each Table 4.5's verdict counts with their causes, and
    what the numbers say about the thesis' claim."""
    lines = []
    for table in (FIXED, SEARCH):
        if not [e for _, e in rows(s, table=table) if e]:
            continue
        verdicts, causes, n = tally(s, table)
        counts = ", ".join(f"{c} {k}" for k, c in sorted(verdicts.items(), key=lambda kv: (-kv[1], kv[0])))
        why = " ".join(
            f"Causes of the {sum(causes[kind].values())} {kind}: "
            + "; ".join(f"{k}: {c}" for k, c in sorted(causes[kind].items(), key=lambda kv: (-kv[1], kv[0])))
            + "."
            for kind in VERDICT_ORDER
            if causes.get(kind)
        )
        decisive = sum(c for k, c in verdicts.items() if V.decisive(k))
        lines.append(
            f"- **{TABLE_TITLES[table]}** ({n} cells with a thesis value): {counts or 'none'}; "
            f"{decisive} of {n} decisive." + (f" {why}" if why else "")
        )
    return lines + ["", *sensitivity_lines(s), "", *claim_lines(s)]


def claim_lines(s: RelRegSuite) -> list[str]:
    """What the numbers say about the thesis' claim at its longest length: which rows
    extrapolate (seeds at >= 99 %), and whether the thesis' order of the rows is resolved
    (each adjacent pair: the thesis' gap against our difference of means, its 95 % interval)."""
    table = FIXED if [e for _, e in rows(s, table=FIXED) if e] else SEARCH
    common = [k for k in bit_counts(s) if any(k in r["acc"] for r in s.reference["table45"])]
    present = [
        (ref, e) for ref, e in rows(s, table=table) if e and ref and len(s.runs.get(e, [])) >= V.MIN_SEEDS
    ]
    present = [(ref, e) for i, (ref, e) in enumerate(present) if ref not in [r for r, _ in present[:i]]]
    if not common or not present or not s.paper_scale:
        return []
    k = max(common)
    extrapolate = "; ".join(f"{ref['model']} {V.seeds_at(seed_values(s, e, k)).text()}" for ref, e in present)
    ordered = sorted(
        ((100 * float(ref["acc"][k]), ref, e) for ref, e in present if k in ref["acc"]),
        key=lambda x: -x[0],
    )
    m = V.equivalent_spread(s.reference)
    pairs = []
    readings: Counter[str] = Counter()
    equal_gaps: list[str] = []
    for (pa, ra, ea), (pb, rb, eb) in zip(ordered, ordered[1:], strict=False):
        d = V.difference(seed_values(s, ea, k), seed_values(s, eb, k))
        reading = V.difference_reading(d, m)
        readings[reading] += 1
        if reading == "equal within the margin":
            equal_gaps.append(f"{pa - pb:.2f}")
        said = {
            "resolved, first higher": "resolved, the thesis' order",
            "resolved, second higher": "resolved, the other order",
        }.get(reading, reading)
        pairs.append(
            f"{ra['model']} − {rb['model']}: thesis +{pa - pb:.2f} pp, ours {fmt.signed(d.mean)} "
            f"{fmt.ci(d)} pp ({said})"
        )
    where = "at the thesis' settings" if table == FIXED else "as our search selects them"
    n = len(seed_values(s, ordered[0][2], k)) if ordered else 0
    return [
        f"**The claim at {k} bits ({where}).** Seeds that extrapolate (at >= {V.SUCCESS_PCT:g} %): "
        f"{extrapolate}. The thesis orders the rows by their values; each adjacent pair, the thesis' gap "
        f"against our difference of means [95% interval] and the margin of {m:.2f} pp: "
        f"{'; '.join(pairs)}. Of {len(pairs)} adjacent gaps: {readings['resolved, first higher']} resolved "
        f"in the thesis' order, {readings['resolved, second higher']} in the other, "
        f"{readings['equal within the margin']} equal within the margin"
        + (
            f" (our rows differ by less than {m:.2f} pp where the thesis prints {', '.join(equal_gaps)} pp)"
            if equal_gaps
            else ""
        )
        + f", {readings['not resolved']} not resolved by {n} seeds.",
    ]


def why_lines(s: RelRegSuite) -> list[str]:
    """The reasons the numbers differ, each with the numbers that show it: the rows' order
    (the thesis' claim) at the longest length both have, seed spread, selection ties."""
    lines = []
    common = [k for k in bit_counts(s) if any(k in r["acc"] for r in s.reference["table45"])]
    if common:
        k = max(common)
        theirs = sorted(
            ((float(r["acc"][k]) * 100, r["model"]) for r in s.reference["table45"] if k in r["acc"]),
            reverse=True,
        )
        order = ranked
        lines.append(f"- **The claim (the rows' order).** At {k} bits the thesis ranks {order(theirs)}.")
        for table in (FIXED, SEARCH):
            ours = sorted(
                (
                    (per_length(s, e, k).mean, ref["model"])
                    for ref, e in rows(s, table=table)
                    if e and ref and s.runs.get(e)
                ),
                reverse=True,
            )
            if ours:
                lines.append(f"  {TABLE_TITLES[table]}: {order(ours)} (sequence accuracy, %).")
    wide = [
        (e, k, per_length(s, e, k))
        for e in s.experiments
        for k in bit_counts(s)
        if s.runs.get(e) and per_length(s, e, k).n > 1
    ]
    spread = max(wide, key=lambda w: w[2].std, default=None)
    if spread is not None and spread[2].std > 0:
        e, k, x = spread
        per_seed = ", ".join(fmt.num(100 * r.metrics["test"][str(k)]["seq_acc"], 1) for r in s.runs[e])
        lines.append(
            f"- **Seeds.** Most runs score 100 % at a length or well below it; the RMC's also land in "
            f"between. The widest spread is {e} at {k} bits "
            f"(per seed: {per_seed} %); the thesis reports one number per cell, without seeds. Hence "
            f"{x.n} seeds per row, an interval that sees the failing seeds and the count of seeds at >= "
            f"{V.SUCCESS_PCT:g} % (psrnn.studies.relreg.verdicts)."
        )
    if off := unregularized_caption(s, [e for _, e in rows(s) if e]):
        lines.append(f"- **Regularisers.** {off.strip()}")
    return lines + selection_lines(s)


def best_lines(s: RelRegSuite, table: str = SEARCH) -> list[str]:
    """Which rows are best at each number of bits, in the thesis and in ours (by mean); ties all named."""
    out = []
    for k in sorted({int(b) for r in s.reference["table45"] for b in r["acc"]}):
        theirs = [(100 * float(r["acc"][k]), r["model"]) for r in s.reference["table45"] if k in r["acc"]]
        ours = [(per_length(s, e, k).mean, ref["model"]) for ref, e in rows(s, table=table) if e and ref]
        out.append(f"- Best at {k} bits: thesis {_best(theirs)}; ours {_best(ours)}.")
    return out


def _best(scored: list[tuple[float, str]]) -> str:
    scored = [(v, label) for v, label in scored if not math.isnan(v)]
    if not scored:
        return fmt.DASH
    top = max(v for v, _ in scored)
    return f"{', '.join(label for v, label in scored if v == top)} ({top:.2f} %)"


def ranked(scored: list[tuple[float, str]]) -> str:
    """'A 99.60 > B 99.49 = C 99.49': rows by value, highest first (sorted), '=' where the
    printed values are equal."""
    out = ""
    for i, (v, m) in enumerate(scored):
        sep = "" if i == 0 else (" = " if fmt.num(v, 2) == fmt.num(scored[i - 1][0], 2) else " > ")
        out += f"{sep}{m} {fmt.num(v, 2)}"
    return out
