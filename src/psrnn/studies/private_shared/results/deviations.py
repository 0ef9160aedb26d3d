"""REPORT.md's "Deviations from the paper's protocol": every way a first-study config
departs from the paper, each once with everything it applies to (scale and seeds, data
preparation, run settings), and the reference file's notes that hold for every config.

    python -m psrnn compile --config config/paper.yaml
"""

from __future__ import annotations

import math

from psrnn import config as C
from psrnn.report import fmt
from psrnn.report.collect import Suite, all_runs
from psrnn.studies.private_shared import settings as S
from psrnn.studies.private_shared.datasets import REGISTRY
from psrnn.studies.private_shared.results.reading import kind_of
from psrnn.studies.private_shared.results.tables import DATASET_LABEL, settings_diffs

PAPER_PATIENCE = 50
PAPER_IMAGE_STEPS = {name: ds.image_side**2 for name, ds in REGISTRY.items() if ds.image_side}


Deviation = tuple[str, str, str, str]  # setting, the paper's, this config's, what it applies to


def deviations(s: Suite) -> list[Deviation]:
    """Every way this config departs from the paper's protocol, each once with everything
    it applies to: scale and seeds, data preparation (datasets), run settings (experiments).
    The reference file's notes that hold for every config are listed apart (`general_notes`)."""
    out = []
    if not s.paper_scale:
        out.append(
            (
                "scale",
                "full data and models",
                f"{s.scale_label}: data, models and epoch budgets shrunk for a quick end-to-end "
                "run; its numbers say nothing about the paper's claims"
                if not s.reduced_scale
                else ": ".join(
                    filter(None, [s.scale_name, " ".join(s.cfg.get("description", "").split()).rstrip(".")])
                )
                + "; no value is compared with the paper's, its orderings are read at this scale (Findings)",
                "everything",
            )
        )
    if s.cfg.get("fixtures"):  # the datasets come from archives the suite writes itself
        ours = f"synthetic archives in the upstream formats ({s.cfg['fixtures']}): no real images or texts"
        out.append(("data", "the real datasets", ours, "everything"))
    seeds = sorted(s.cfg["seeds"])
    if len(seeds) == 1:
        ours = (
            f"1 (seed {seeds[0]}): every number is a single run, with no spread, no confidence "
            "interval and no verdict"
        )
    else:
        ours = f"{len(seeds)} ({', '.join(map(str, seeds))}): mean, std and 95% t-interval over seeds"
    out.append(
        ("seeds per experiment", "not given (one number per cell, no spread)", ours, "all experiments")
    )
    return out + dataset_deviations(s) + setting_deviations(s)


def general_notes(s: Suite) -> list[str]:
    """The reference file's deviations, which hold for every config (one line each)."""
    return [" ".join(d.split()) for d in s.reference.get("deviations", [])]


def _grouped(found: list[tuple[str, str, str, str]]) -> dict[tuple[str, str, str], list[str]]:
    """(setting, paper, ours, name) -> {(setting, paper, ours): [names]}, rows of one setting
    next to each other, otherwise in first-seen order."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for setting, paper, ours, name in found:
        names = groups.setdefault((setting, paper, ours), [])
        if name not in names:
            names.append(name)
    first: dict[str, int] = {}
    for key in groups:
        first.setdefault(key[0], len(first))
    return dict(sorted(groups.items(), key=lambda kv: first[kv[0][0]]))


def dataset_deviations(s: Suite) -> list[Deviation]:
    found = []  # (setting, paper, ours, dataset)
    enabled = C.enabled_datasets(s.cfg)
    paper = {r["dataset"]: r for r in s.reference["table1"]}
    for ds in paper:
        if ds not in enabled:
            why = "disabled" if ds in s.cfg["datasets"] else "not in the config"
            found.append(("dataset", "reported", f"not run ({why}); its rows are missing", ds))
    for ds in enabled:
        source = s.cfg["datasets"][ds].get("source") or {}
        if source.get("official") is False and not s.cfg.get("fixtures"):  # a copy of the user's
            places = [p for p in [source.get("local_dir"), *(source.get("mirrors") or [])] if p]
            check = (
                "md5-checked against the config's own sums"
                if source.get("md5")
                else "md5-checked"
                if source.get("verify", True)
                else "not checked"
            )
            found.append(
                ("data source", "the official archives", f"a local copy ({', '.join(places)}), {check}", ds)
            )
        opts = s.cfg["datasets"][ds].get("prepare") or {}
        side = opts.get("downsample")
        if side and ds in PAPER_IMAGE_STEPS:
            steps = PAPER_IMAGE_STEPS[ds]
            found.append(
                (
                    "image size",
                    f"{math.isqrt(steps)}×{math.isqrt(steps)} ({steps:,} steps)",
                    f"{side}×{side} ({side * side:,} steps)",
                    ds,
                )
            )
        for split in ("train", "valid", "test"):
            if opts.get(split):
                found.append((f"{split} samples used", "whole split", f"the first {opts[split]:,} of it", ds))
        if opts.get("valid_size") and ds != "cifar10" and opts["valid_size"] != paper[ds]["valid"]:
            ours = f"{opts['valid_size']:,}"
            found.append(("validation split (held out of training)", f"{paper[ds]['valid']:,}", ours, ds))
        if ds == "imdb" and opts.get("min_chars", 500) != 500:
            found.append(("shortest review kept", "500 characters", f"{opts['min_chars']} characters", ds))
        if ds == "imdb" and opts.get("alphabet_size", 60) != 60:
            found.append(("one-hot symbols", "60", str(opts["alphabet_size"]), ds))
        if opts.get("max_length"):
            found.append(("sequence length", "no cut given", f"the first {opts['max_length']:,} steps", ds))
    return [(*key, ", ".join(DATASET_LABEL[d] for d in names)) for key, names in _grouped(found).items()]


def _applies_to(s: Suite, exps: list[str]) -> str:
    """ "all experiments", "all except a, b" when that is shorter, else the list (config order)."""
    rest = [e for e in s.experiments if e not in exps]
    if not rest:
        return "all experiments"
    if len(rest) < len(exps):
        return "all except " + ", ".join(rest)
    return ", ".join(e for e in s.experiments if e in exps)


INIT_TEXT = {
    "torch": "PyTorch's default",
    "orthogonal": "orthogonal recurrent weights, zero biases",
    "chrono": "orthogonal recurrent weights, update-gate biases log U(1, T-1)",
}


def init_text(s: Suite, exp: str, st: dict) -> str:
    """The initialisation a run used and the evidence its config gives for the dataset's
    choice (datasets.<ds>.settings.init), or where it came from when there is none."""
    init = st.get("init", "torch")
    chosen = C.dataset_choices(s.cfg, st.get("dataset", "")).get("init")
    if "init" in s.cfg["experiments"][exp] or chosen is None or chosen[0] != init:
        why = "set by the experiment, the command line or the run settings' default"
    else:
        why = chosen[1]
    return f"{init} ({INIT_TEXT.get(init, init)}): {why}"


def setting_deviations(s: Suite) -> list[Deviation]:
    """Run settings that differ from the paper; a reference row's differences make one row."""
    found = []  # (setting, paper, ours, experiment)
    table2 = {r["id"]: r for r in s.reference["table2"]}
    fig_ref = {r["id"]: r for r in s.reference.get("figures", [])}
    for exp in s.experiments:
        st, aux = s.settings[exp], kind_of(s, exp) != "gru"
        if st.get("optimizer", "sgdr") != "sgdr":
            found.append(("optimizer", "SGDR", st["optimizer"], exp))
        found.append(("main GRU initialisation", "not given", init_text(s, exp, st), exp))
        found.append(("epoch budget (max_epochs)", "not given", str(st.get("max_epochs")), exp))
        clip, scope = float(st.get("clip", 0.0)), st.get("clip_scope", "global")
        if clip > 0:  # the sources mention no clipping; results/recipe/ measures the rule
            where = (
                "the classifier path (main GRU, head) and the decoders apart, each"
                if scope == "groups" and aux
                else "one norm over all parameters"
            )
            found.append(
                (
                    "gradient clipping",
                    "not mentioned",
                    f"{where} at norm {clip:g} (results/recipe/recipe.md)",
                    exp,
                )
            )
        if (
            s.paper_scale
            and st.get("dataset") == "mnist"
            and (clip > 0 or st.get("init", "torch") != "torch")
        ):
            ours = "on the 10,000 MNIST test digits, re-split (results/recipe/): this row's test images"
            found.append(("where our initialisation and clip rule were chosen", "not given", ours, exp))
        grid = s.cfg["experiments"][exp].get("grid") or {}
        if "lr" in grid:
            rates = ", ".join(f"{v:g}" for v in grid["lr"])
            found.append(
                (
                    "learning rate",
                    "searched on validation (grid not given)",
                    f"searched on validation over {rates}",
                    exp,
                )
            )
        elif "lr" in st:
            found.append(
                (
                    "learning rate",
                    "searched on validation (grid not given)",
                    f"{st['lr']:g}, not searched",
                    exp,
                )
            )
        if aux and st.get("aux_anchors", "sum") != "sum":
            found.append(("auxiliary loss over anchors", "sum", f"{st['aux_anchors']} (ablation)", exp))
        if int(st.get("patience", PAPER_PATIENCE)) != PAPER_PATIENCE:
            found.append(("early-stopping patience (epochs)", str(PAPER_PATIENCE), str(st["patience"]), exp))
        if aux and float(st.get("aux_weight", 1.0)) != 1.0:
            found.append(("auxiliary loss weight", "1", str(st["aux_weight"]), exp))
        if aux and st.get("sampling") == "uniform":
            found.append(("anchor positions", "one per region", "drawn uniformly over the sequence", exp))
        if aux and st.get("decoder_input") == "teacher":
            found.append(
                (
                    "decoder input",
                    "its own previous estimate (thesis)",
                    "the true previous input (teacher forcing)"
                    + DECODER_REASON.get(str(st.get("dataset")), ""),
                    exp,
                )
            )
        ref = s.ref_of(exp)
        diffs = settings_diffs(table2[ref], st) if ref in table2 else []
        if ref in fig_ref:
            f = fig_ref[ref]
            if int(st["hidden"]) != f["hidden"]:
                diffs.append(("hidden size", str(f["hidden"]), str(st["hidden"])))
            caps = [int(e) for e in st.get("capture_epochs", [])]
            if caps != f["capture_epochs"]:
                diffs.append(("pictures after epochs", str(f["capture_epochs"]), str(caps)))
        if diffs:
            found.append(
                (
                    f"{ref} settings",
                    ", ".join(f"{k} {p}" for k, p, _ in diffs),
                    ", ".join(f"{k} {o}" for k, _, o in diffs),
                    exp,
                )
            )
        found += stopping_deviations(s, exp, st) + grid_edge_deviations(s, exp)
    budget = [r for r in all_runs(s) if r.metrics.get("stopped") == "max_epochs"]
    for r in budget:
        found.append(
            (
                "stopped by",
                f"early stopping (patience {PAPER_PATIENCE})",
                f"the epoch budget (max_epochs) in {len(budget)} of {len(all_runs(s))} finished runs",
                r.experiment,
            )
        )
    return [(*key, _applies_to(s, names)) for key, names in _grouped(found).items()]


# why a dataset's decoders are teacher-forced, where they are (measured on real data)
DECODER_REASON = {
    "imdb": "; measured on real reviews (results/recipe/imdb-decoder/): estimate-fed decoders stay "
    "at the constant-prediction floor (1.000 of it after 3 epochs) while teacher-forced ones "
    "leave it (0.917)",
}


def cycle_ends(run: S.RunConfig, until: int) -> list[int]:
    """SGDR's cycle ends up to `until`, as psrnn.studies.private_shared.hooks.cycle_ends has them (which the
    training stops by; a test holds the two equal). Not imported from there: compile must
    not depend on the training code (psrnn.engine.codehash's compile digest)."""
    ends: list[int] = []
    length = end = run.restart_epochs
    while end <= until:
        ends.append(end)
        length *= run.restart_mult
        end += length
    return ends


def stopping_deviations(s: Suite, exp: str, st: dict) -> list[tuple[str, str, str, str]]:
    """Early stopping under SGDR: ours ends a run only at a cycle's end
    (psrnn.studies.private_shared.hooks.may_stop),
    where the paper says nothing of restarts; and whether the epoch cap is a cycle end."""
    if st.get("optimizer", "sgdr") not in ("sgdr", "adamwr"):
        return []
    cap, patience = int(st["max_epochs"]), int(st.get("patience", 0))
    run = C.coerce_run(st)
    ends = cycle_ends(run, cap)
    where = f"cycles end at epochs {', '.join(map(str, ends)) or 'none'}"
    cap_note = "a cycle end"
    if cap not in ends:
        cap_note = f"**mid-cycle** (the next cycle ends at {cycle_ends(run, 10 * cap)[len(ends)]})"
    ours = f"the cap of {cap} epochs is {cap_note}; {where}"
    if patience > 0:
        checked = "checked only at cycle ends (never in the trough after a warm restart)"
        ours = f"patience {patience}, {checked}; {ours}"
    return [("early stopping under warm restarts", "patience 50; restarts not discussed", ours, exp)]


def grid_edge_deviations(s: Suite, exp: str) -> list[tuple[str, str, str, str]]:
    """A selected grid value at an end of its axis: the best may lie beyond the grid."""
    grid = s.cfg["experiments"][exp].get("grid")
    if not isinstance(grid, dict) or exp not in s.selections:
        return []
    chosen = s.selections[exp]["overrides"]
    out = []
    for key, values in grid.items():
        nums = sorted(v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool))
        v = chosen.get(key)
        if len(nums) < 2 or not isinstance(v, (int, float)) or v not in (nums[0], nums[-1]):
            continue
        end = "top" if v == nums[-1] else "bottom"
        grid_text = ", ".join(f"{x:g}" for x in nums)
        ours = f"**{key} {v:g} chosen at the {end} of its grid** ({grid_text}): the best may lie beyond it"
        out.append(("grid edge", "searched on validation (grid not given)", ours, exp))
    return out


def deviation_lines(s: Suite) -> list[str]:
    lines = ["| Setting | Paper | This config | Applies to |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(fmt.md(c) for c in row) + " |" for row in deviations(s)]
    return lines + ["", "In every config (config/reference.yaml):", "", *[f"- {n}" for n in general_notes(s)]]
