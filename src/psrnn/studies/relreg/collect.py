"""A `study: relreg` suite's finished runs, read, and the numbers every output takes from
them: Table 4.5's rows and cells, the ablations (psrnn.studies.relreg.ablations), the figures
(psrnn.studies.relreg.figures) and REPORT.md (psrnn.studies.relreg.report); psrnn.studies.relreg.results
writes
them all.

    python -m psrnn compile --config config/relreg.yaml

Reads, under results/<name>/ (the layout of psrnn.config: run_dir, search_dir):
runs/<experiment>/seed<k>/metrics.json, search/<experiment>/<point>/metrics.json,
search/<experiment>/selected.json, and config/relreg-reference.yaml (the thesis' numbers).
Accuracies are in % like the first study's tables; missing runs give empty summaries.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from psrnn import config as C
from psrnn.report import collect as shared
from psrnn.report import fmt
from psrnn.report.collect import (
    Suite,
    check_selections,
    load_notes,
    load_runs,
    load_selections,
    load_settings,
    require_files,
    suite_run,
)
from psrnn.report.stats import Summary
from psrnn.studies.relreg import verdicts as V

REFERENCE_PATH = C.ROOT / "config" / "relreg-reference.yaml"


@dataclass
class RelRegSuite(Suite):
    """The first study's Suite (cfg, reference, final runs, settings; `search` = every search
    run's metrics.json) plus what this study's figures need."""

    points: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)  # exp -> grid order
    selected: dict[str, str] = field(default_factory=dict)  # exp -> point of search/<exp>/selected.json
    # exp -> the final runs left out of every number by equal_draws (a tied point drawn again)
    surplus: dict[str, list[Any]] = field(default_factory=dict)


# --- reading ----------------------------------------------------------------------------------


def reference_rows(reference: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """id -> row of every referable row: Table 4.5's and the figure-only ones."""
    return {r["id"]: r for key in ("table45", "figures") for r in reference.get(key, [])}


def reference_ids(reference: dict[str, Any]) -> set[str]:
    """The ids of config/relreg-reference.yaml's rows a suite config's `ref:` may name (its
    Study's reference_ids): Table 4.5's and the figure-only ones."""
    return set(reference_rows(reference))


def check_refs(cfg: dict[str, Any], reference: dict[str, Any]) -> None:
    """A `ref:` that names no reference row is a typo that would silently drop a row
    (psrnn.report.collect.check_refs); so is a row id in the reference's `equivalent` or
    `no_settings` that is no Table 4.5 row (the margin and the rows without settings read them)."""
    shared.check_refs(cfg, reference)
    where = reference.get("file", REFERENCE_PATH.name)
    table45 = {r["id"] for r in reference.get("table45", [])}
    listed = [("equivalent", i) for group in reference.get("equivalent", []) for i in group]
    listed += [("no_settings", i) for i in reference.get("no_settings", [])]
    for key, i in listed:
        if i not in table45:
            raise C.ConfigError(f"{where}: {key}: {i!r} is not a table45 row")


def _under(results_dir: Path, path: Path, cfg: dict[str, Any]) -> Path:
    """psrnn.config's path of a run folder, moved from results/<name> to `results_dir`."""
    return results_dir / path.relative_to(C.results_root(cfg))


def equal_draws(sel: dict[str, Any]) -> set[int] | None:
    """The final seeds whose runs a `ties: draw` selection's numbers count, so that every drawn
    point counts equally often: as often as the least-drawn one, by its first seeds in draw
    (seed) order. None where every final run counts (no draw, or every point drawn equally often).

    Final run i trains the tie set's (i mod T)-th point, so with T tied points and n seeds,
    n mod T points train once more than the rest (18 points, 20 seeds: two train twice), and a
    mean over all runs weights those points double. Counting the first ⌊n / T⌋·T runs (all n
    where T >= n) weights every tied point alike; the runs left out are REPORT's to show."""
    draws = sel.get("draws") or []
    by_point: dict[str, list[int]] = {}
    for d in draws:
        by_point.setdefault(str(d["point"]), []).append(int(d["seed"]))
    counts = {len(v) for v in by_point.values()}
    if len(counts) < 2:
        return None
    least = min(counts)
    return {seed for seeds in by_point.values() for seed in seeds[:least]}


def gather(cfg: dict[str, Any], reference: dict[str, Any], results_dir: Path) -> RelRegSuite:
    check_refs(cfg, reference)
    selections = load_selections(cfg, results_dir)
    points: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for exp in C.enabled_experiments(cfg):
        found = []
        for pid, _ in C.grid_points(cfg["experiments"][exp]):
            p = _under(results_dir, C.search_dir(cfg, exp, pid), cfg) / "metrics.json"
            if p.is_file():
                found.append((pid, suite_run(cfg, p, exp, C.search_seed(cfg), point=pid)))
        points[exp] = found
    # a selection is its search records' (before the final runs are read against it)
    check_selections(cfg, results_dir, selections, {exp: dict(found) for exp, found in points.items()})
    runs = load_runs(cfg, results_dir, selections)  # runs/<exp>/seed<k>/metrics.json, as C.run_dir lays out
    for r in (r for rs in runs.values() for r in rs if r.metrics["config"].get("model") == "proto"):
        require_files(r.dir, ("loading.npz",))  # psrnn.studies.relreg.hooks.finish writes it
    surplus: dict[str, list[Any]] = {}
    for exp, sel in selections.items():
        keep = equal_draws(sel)
        if keep is not None and exp in runs:
            surplus[exp] = [r for r in runs[exp] if r.seed not in keep]
            runs[exp] = [r for r in runs[exp] if r.seed in keep]
    return RelRegSuite(
        cfg=cfg,
        reference=reference,
        runs=runs,
        settings=load_settings(cfg, runs),
        manifests={},
        search=[m for exp in points for _, m in points[exp]],
        points=points,
        selected={exp: str(sel.get("point")) for exp, sel in selections.items()},
        selections=selections,
        notes=load_notes(results_dir),
        surplus={e: rs for e, rs in surplus.items() if rs},
    )


# --- numbers ------------------------------------------------------------------------------------


def bit_counts(s: Suite) -> list[int]:
    """Table 4.5's columns: the thesis' bit counts and every one our runs test."""
    out = {int(k) for r in s.reference["table45"] for k in r["acc"]}
    out |= {int(k) for st in s.settings.values() for k in st.get("test_bits", [])}
    out |= {int(k) for rs in s.runs.values() for r in rs for k in r.metrics.get("test", {})}
    return sorted(out)


def seed_values(s: Suite, exp: str | None, bits: int, key: str = "seq_acc") -> list[float]:
    """Test accuracy (%) on `bits`-bit numbers of each finished seed, in seed order."""
    runs = s.runs.get(exp, []) if exp else []
    return V.percent_values([r.metrics.get("test", {}).get(str(bits), {}).get(key) for r in runs])


def per_length(s: Suite, exp: str | None, bits: int, key: str = "seq_acc") -> Summary:
    """Test accuracy (%) on `bits`-bit numbers over the finished seeds: mean, std and the 95 %
    interval of the mean that sees the failing seeds (psrnn.studies.relreg.verdicts)."""
    return V.interval(seed_values(s, exp, bits, key))


# A run "never fits" the 3-bit training numbers when its training loss never leaves chance, the
# cross-entropy of a fair coin per output bit, ln 2: its lowest epoch stays above 0.9 ln 2 (the
# RMC's 3 of 20 at the thesis' settings stay at 0.69; a run that fits reaches 0.1 or less)
CHANCE_LOSS = math.log(2.0)
UNFIT_LOSS = 0.9 * CHANCE_LOSS


def unfit(run: Any) -> bool:
    """Whether a finished run never fit its training numbers: its lowest training loss over the
    epochs (history.csv; its metrics.json's last one without a history) >= UNFIT_LOSS."""
    return _lowest_loss(run.dir, run.metrics.get("epochs_run"), run.metrics.get("train_loss")) >= UNFIT_LOSS


@functools.lru_cache(maxsize=8192)
def _lowest_loss(run_dir: Path, epochs_run: Any, last: float | None) -> float:
    """Read through the checked reader (shared.load_history): a damaged history.csv (a
    non-UTF-8 byte, a garbled number) is one line naming it, not a traceback."""
    run = SimpleNamespace(dir=run_dir, metrics={"epochs_run": epochs_run})
    h = shared.load_history(run, ("train_loss",))
    if h is not None and len(h):
        return float(h["train_loss"].min())
    return math.nan if last is None else float(last)


def fit_values(s: Suite, exp: str | None, bits: int) -> tuple[list[float], int]:
    """(test sequence accuracy (%) at `bits` bits of the seeds that fit the training numbers,
    how many did not)."""
    runs = s.runs.get(exp, []) if exp else []
    fit = [r for r in runs if not unfit(r)]
    xs = V.percent_values([r.metrics.get("test", {}).get(str(bits), {}).get("seq_acc") for r in fit])
    return xs, len(runs) - len(fit)


def seq_at(metrics: dict[str, Any], bits: int) -> float | None:
    """A run's test sequence accuracy (%) on `bits`-bit numbers, None where it has none."""
    v = metrics.get("test", {}).get(str(bits), {}).get("seq_acc")
    return None if v is None else 100.0 * float(v)


def paper_value(ref: dict[str, Any] | None, bits: int) -> float | None:
    """The thesis' value in %, None where it prints none."""
    v = (ref or {}).get("acc", {}).get(bits)
    return None if v is None else 100.0 * float(v)


def sweep_points(s: RelRegSuite, exp: str) -> list[tuple[str, dict[str, Any]]]:
    """The grid points Figures 4.1-4.2 show: a proto experiment's with the reference's
    `figure_cells` cells ("4 Proto-LSTMs"), all of them where none has that many; every
    point of the other models."""
    points = s.points.get(exp, [])
    k = s.reference.get("figure_cells")
    if k is None or s.settings.get(exp, {}).get("model") != "proto":
        return points
    return [(p, m) for p, m in points if m.get("config", {}).get("cells") == k] or points


def tied_points(s: RelRegSuite, exp: str) -> int:
    """Grid points of `exp` whose search run reached the best validation sequence accuracy
    of its grid (the tie set)."""
    accs = [float(m.get("best_valid_acc", 0.0)) for _, m in s.points.get(exp, [])]
    return sum(1 for a in accs if a == max(accs)) if accs else 0


def short(v: str) -> str:
    """A verdict in a few words for the table: 'reproduced', 'not reproduced, ours lower'."""
    head, _, rest = v.partition(" (")
    if head == "not reproduced":
        return f"{head}, {rest.rstrip(')')}"
    return fmt.DASH if head in ("missing", "no paper value") else head


# The two Table 4.5s: its experiments with a grid (as our search selects them) and without
# one (fixed settings: config/relreg.yaml's *_thesis rows train the thesis' bolded ones)
SEARCH, FIXED = "search", "fixed"


def table_of(s: Suite, exp: str) -> str:
    """Which Table 4.5 a `ref:` experiment is a row of: SEARCH (it has a grid) or FIXED."""
    return SEARCH if C.has_grid(s.cfg, exp) else FIXED


def rows(
    s: Suite, extra: bool = False, table: str | None = SEARCH
) -> list[tuple[dict[str, Any] | None, str | None]]:
    """(reference row, experiment) of every row of one Table 4.5 (`table`: SEARCH, FIXED;
    None: both) in the thesis' order, one per experiment with that `ref` (experiment None
    when the config has none); with `extra`, then every other enabled experiment (its
    figure-only reference row or None)."""
    out: list[tuple[dict[str, Any] | None, str | None]] = []
    for ref in s.reference["table45"]:
        found = [e for e in s.experiments_for(ref["id"]) if table is None or table_of(s, e) == table]
        exps: list[str | None] = list(found) or [None]
        out += [(ref, e) for e in exps]
    if extra:
        known = reference_rows(s.reference)
        listed = {e for _, e in out}
        out += [
            (known.get(s.ref_of(e) or ""), e)
            for e in s.experiments
            if e not in listed and s.ref_of(e) not in {r["id"] for r in s.reference["table45"]}
        ]
    return out


def margin_of(s: Suite, ref: dict[str, Any] | None) -> float:
    """The equivalence margin (pp) of a thesis row (psrnn.studies.relreg.verdicts.thesis_margin);
    the equivalent rows' spread for a row without one."""
    return V.thesis_margin(s.reference, (ref or {}).get("acc", {}))


def no_settings(s: Suite, ref: dict[str, Any] | None) -> bool:
    """Whether the thesis gives no settings for this Table 4.5 row (reference `no_settings`)."""
    return ref is not None and ref["id"] in s.reference.get("no_settings", [])


NO_SETTINGS = "settings not given by the thesis"


def cells(s: Suite, extra: bool = False, table: str | None = SEARCH) -> list[dict[str, Any]]:
    """One record per (row, number of bits) of one Table 4.5 (rows' `table`): the thesis'
    value, ours (sequence accuracy per seed and summarised, bit accuracy as a diagnostic),
    the verdict (the thesis' value against our sequence accuracy, psrnn.studies.relreg.verdicts)
    and, where it is not reproduced, its cause."""
    out = []
    for ref, exp in rows(s, extra, table):
        thesis_row = {int(k): 100.0 * float(v) for k, v in (ref or {}).get("acc", {}).items()}
        m = margin_of(s, ref)
        for k in bit_counts(s):
            xs = seed_values(s, exp, k)
            seq, bit, paper = V.interval(xs), per_length(s, exp, k, "bit_acc"), paper_value(ref, k)
            count = test_count(s, exp, k)
            v = verdict_at(s, ref, exp, k)
            if exp is None and table == FIXED and no_settings(s, ref):
                v = NO_SETTINGS
            key, why = V.cause(v, paper, xs, m, thesis_row, evidence(s, ref, exp, k))
            out.append(
                {
                    "ref": ref["id"] if ref else "",
                    "model": ref["model"] if ref else str(exp),
                    "experiment": exp or "",
                    "bits": k,
                    "count": count,
                    "paper": paper,
                    "values": xs,
                    "seq": seq,
                    "bit": bit,
                    "seeds": V.seeds_at(xs),
                    "margin": m,
                    "verdict": v,
                    "cause": key,
                    "cause_text": why,
                }
            )
    return out


def evidence(s: Suite, ref: dict[str, Any] | None, exp: str | None, bits: int) -> V.Evidence:
    """What other runs say about `exp`'s cell at `bits` bits (psrnn.studies.relreg.verdicts.Evidence)."""
    if ref is None or exp is None:
        return V.Evidence()
    return V.Evidence(
        twin=twin_verdict(s, ref, exp, bits),
        other_reading=other_reading(s, ref, exp, bits),
        without_unfit=without_unfit(s, ref, exp, bits),
    )


def reading_name(st: dict[str, Any]) -> str:
    return "causal" if st.get("causal", False) else "unmasked"


def other_reading(s: Suite, ref: dict[str, Any], exp: str, bits: int) -> tuple[str, str, str, float] | None:
    """For a Transformer row: (its reading, the other's, the other's experiment, its mean %) where
    the same `ref` in the same Table 4.5 is also trained with the other attention mask."""
    st = s.settings.get(exp, {})
    if st.get("model") != "transformer":
        return None
    for e in s.experiments_for(ref["id"]):
        o = s.settings.get(e, {})
        if e != exp and table_of(s, e) == table_of(s, exp) and reading_name(o) != reading_name(st):
            xs = seed_values(s, e, bits)
            if xs:
                return reading_name(st), reading_name(o), e, math.fsum(xs) / len(xs)
    return None


def without_unfit(s: Suite, ref: dict[str, Any], exp: str, bits: int) -> tuple[str, float, int] | None:
    """(verdict, mean %, how many left out) of `exp`'s cell without the seeds that never fit the
    training numbers; None where every seed fit."""
    xs, u = fit_values(s, exp, bits)
    if not u:
        return None
    v = V.verdict(paper_value(ref, bits), V.interval(xs), margin_of(s, ref), s.paper_scale)
    return v, (math.fsum(xs) / len(xs) if xs else math.nan), u


def twin_verdict(s: Suite, ref: dict[str, Any] | None, exp: str | None, bits: int) -> bool | None:
    """For a SEARCH row: whether the same `ref` at fixed settings (a FIXED row) reaches the thesis
    at `bits` bits: reproduced, or higher, or inconclusive with its mean at or above the thesis'
    value less the margin (20 seeds at 100 % are inconclusive against 99.6, yet score above it);
    None for a FIXED row or where there is no such row."""
    if ref is None or exp is None or table_of(s, exp) != SEARCH:
        return None
    fixed = [e for e in s.experiments_for(ref["id"]) if table_of(s, e) == FIXED]
    if not fixed:
        return None
    paper, m = paper_value(ref, bits), margin_of(s, ref)
    return any(
        V.at_or_above(v)
        or (v.startswith("inconclusive") and paper is not None and per_length(s, e, bits).mean >= paper - m)
        for e in fixed
        for v in [verdict_at(s, ref, e, bits)]
    )


def test_count(s: Suite, exp: str | None, bits: int) -> int | None:
    """How many test numbers `exp`'s runs have at `bits` bits (None without a run)."""
    for r in s.runs.get(exp or "", []):
        if str(bits) in r.metrics.get("test", {}):
            return r.metrics["test"][str(bits)].get("count")
    return None


def verdict_at(s: Suite, ref: dict[str, Any] | None, exp: str | None, bits: int) -> str:
    """The verdict of `exp`'s cell at `bits` bits against the thesis' row `ref`."""
    return V.verdict(paper_value(ref, bits), per_length(s, exp, bits), margin_of(s, ref), s.paper_scale)


# --- the selection rule, stated from the settings ---------------------------------------------------


def joined(items: list[str]) -> str:
    """'4', '4 and 5', '4, 5 and 6'."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def on_training(st: dict[str, Any]) -> bool:
    """Whether a run with settings `st` selects on the training length alone."""
    valid = [int(k) for k in st.get("valid_bits", [])]
    return bool(valid) and set(valid) == {int(st["train_bits"])}


def selection_data(st: dict[str, Any]) -> str:
    """What a run with settings `st` selects on, e.g. 'all 48 numbers of 4 and 5 bits, longer
    than the 3-bit training numbers'."""
    valid, train, count = [int(k) for k in st.get("valid_bits", [])], int(st["train_bits"]), st["test_count"]
    if not valid:
        return fmt.DASH
    sizes = [min(2**k, int(count)) for k in valid]
    whole = all(2**k <= int(count) for k in valid)
    numbers = f"{'all ' if whole else ''}{sum(sizes):,} numbers of {joined([str(k) for k in valid])} bits"
    if min(valid) > train:
        return f"{numbers}, longer than the {train}-bit training numbers"
    if on_training(st):
        return f"{numbers}, the training numbers themselves (no longer number)"
    return f"{numbers}, the {train}-bit training length included"


def summary_columns(
    prefix: str, x: Summary, keys: tuple[str, ...] = ("mean", "ci_low", "ci_high")
) -> dict[str, Any]:
    """CSV columns `<prefix>_<key>` of a summary's numbers, in `keys`' order."""
    return {f"{prefix}_{k}": getattr(x, k) for k in keys}


def with_ci(x: Summary) -> str:
    return fmt.DASH if x.n == 0 else f"{x.mean:.2f}" + (f" {fmt.ci(x)}" if x.n > 1 else "")


# --- what a row's selection left of its regularisers -------------------------------------------

REGULARIZERS = ("l2", "l2_cell", "l2_noncell", "noise")  # the thesis' regularisers (eq. 3.5-3.7)


def grid_keys(grid: dict[str, Any] | None) -> set[str]:
    """The run settings a grid varies, tied ones included."""
    grid = grid or {}
    return (set(grid) - {C.TIED}) | {k for item in grid.get(C.TIED) or [] for k in item}


def unregularized(s: Suite, exp: str) -> tuple[list[str], int, int]:
    """(the regularisers `exp`'s grid searches, how many of its final runs train with all of
    them at 0, how many final runs)."""
    searched = [k for k in REGULARIZERS if k in grid_keys(s.cfg["experiments"][exp].get("grid"))]
    runs = s.runs.get(exp, [])
    off = sum(1 for r in runs if all(not float(r.metrics.get("config", {}).get(k, 0)) for k in searched))
    return searched, off, len(runs)


def unregularized_caption(s: Suite, exps: list[str]) -> str:
    """One sentence naming the experiments some of whose final runs train with every
    regulariser their grid searches at 0 (a row named for its regulariser, trained without
    it), with how many; '' when none."""
    parts = []
    for e in exps:
        searched, off, n = unregularized(s, e)
        if searched and off:
            parts.append(f"{e} {off} of {n} ({', '.join(k + ' = 0' for k in searched)})")
    if not parts:
        return ""
    return (
        "Final runs at a point with every searched regulariser at 0 (the thesis' grids include 0): "
        + "; ".join(parts)
        + ". "
    )


def cut_grids(s: Suite) -> list[str]:
    """Table 4.5's experiments whose grid leaves out values of the thesis' table for their
    model: fewer tied shapes, or fewer values of a key other than a regulariser they leave at 0."""
    by_model = {g["model"]: g for g in s.reference.get("grids", [])}
    out = []
    for exp in [e for _, e in rows(s) if e]:
        g = by_model.get(s.settings[exp].get("model"))
        if g is None:
            continue
        ours = s.cfg["experiments"][exp].get("grid") or {}
        skip = {k for k in set(REGULARIZERS) - grid_keys(ours) if not float(s.settings[exp].get(k, 0))}
        if len(ours.get(C.TIED) or []) < len(g["grid"].get(C.TIED) or []) or any(
            not set(v) <= set(ours.get(k, [])) for k, v in g["grid"].items() if k not in skip | {C.TIED}
        ):
            out.append(exp)
    return out
