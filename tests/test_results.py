"""Tests of `python -m psrnn compile` (psrnn.studies.private_shared.results) on synthetic run folders.

    uv run pytest tests/test_results.py -q

The runs, manifests and suite config are written by hand below, so every expected
number (means, sample stds, t-intervals, paired differences) is computed here from the
seed values, independently of the code under test.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from psrnn import config as C
from psrnn import registry
from psrnn.cli import main
from psrnn.report.collect import gather, load_reference
from psrnn.report.fmt import DASH, SMALL_LABEL, ci
from psrnn.report.stats import (
    LOSS,
    PERCENT,
    PP,
    WIDE_PP,
    bounded,
    paired,
    seeds_to_resolve,
    summarize,
    t_quantile,
    verdict,
)
from psrnn.studies.private_shared.results import report, tables
from psrnn.studies.private_shared.results.numbers import claim_reading
from psrnn.studies.private_shared.results.reading import REFERENCE_PATH, manifest_stats

T975_2 = 4.302652729911275  # t quantile 0.975 with 2 degrees of freedom (3 seeds)
T975_1 = 12.706204736174707  # ... with 1 degree of freedom (2 seeds)

# test accuracy per seed (fractions, as in metrics.json)
ACC = {
    "mnist_gru": {0: 0.90, 1: 0.92, 2: 0.94},  # mean 92, std 2 (in %)
    "mnist_full": {0: 0.93, 1: 0.95},  # seed 2 never finished
    "mnist_ps": {0: 0.95, 1: 0.96, 2: 0.98},  # mean 96.333.., std 1.5275..
    "mnist_fig3": {0: 0.80},
    # cifar_s50 has no finished run at all
}
VALID = {"mnist_gru": 0.91, "mnist_full": 0.94, "mnist_ps": 0.97, "mnist_fig3": 0.8}


FIXTURE_INIT = {"init": {"value": "torch", "evidence": "a test fixture's choice, no measurement"}}


def suite_config(name: str, paper_scale: bool, latex: str = "auto") -> dict:
    chosen = {"settings": FIXTURE_INIT} if paper_scale else {}  # a paper-scale config chooses it
    return {
        "name": name,
        "paper_scale": paper_scale,
        "latex": latex,
        "seeds": [0, 1, 2],
        "datasets": {
            "mnist": {"prepare": {"downsample": 14, "train": 500}, **chosen},
            "cifar10": {"prepare": {"downsample": 8}, **chosen},
        },
        "defaults": {"hidden": 16, "max_epochs": 3, "patience": 50, "tasks": ["rec"]},
        "experiments": {
            "mnist_gru": {"dataset": "mnist", "ref": "table2/mnist/gru", "shared": 0.0},
            "mnist_full": {
                "dataset": "mnist",
                "ref": "table2/mnist/full-rec-a1",
                "shared": 1.0,
                "anchors": 1,
                "window": 50,
            },
            "mnist_ps": {
                "dataset": "mnist",
                "ref": "table2/mnist/ps30-predrec-a40",
                "shared": 0.5,
                "tasks": ["pred", "rec"],
                "anchors": 4,
                "window": 10,
            },
            "mnist_fig3": {
                "dataset": "mnist",
                "ref": "fig3/mnist-h16",
                "figure": "fig3",
                "shared": 0.5,
                "anchors": 1,
                "window": 10,
                "capture_epochs": [0, 1],
            },
            "cifar_s50": {
                "dataset": "cifar10",
                "ref": "table4/shared-50",
                "shared": 0.5,
                "anchors": 2,
                "window": 10,
            },
        },
    }


def write_run(root: Path, cfg: dict, exp: str, seed: int, test_acc: float, valid_acc: float) -> None:
    """A finished run folder with every file of the contract (small arrays)."""
    d = root / "results" / cfg["name"] / "runs" / exp / f"seed{seed}"
    d.mkdir(parents=True)
    run_cfg = C.resolve_run(cfg, exp, seed).to_dict()
    has_aux = run_cfg["shared"] > 0
    rng = np.random.default_rng(seed)
    t, hidden, r = 196, run_cfg["hidden"], int(round(run_cfg["shared"] * run_cfg["hidden"]))
    epochs = [1, 2, 3]
    lines = [
        "epoch,lr,train_main_loss,train_aux_loss,train_acc,valid_main_loss,valid_aux_loss,valid_acc,epoch_time_s"
    ]
    for e in epochs:
        aux = 0.5 / e if has_aux else 0.0
        lines.append(
            f"{e},0.05,{2.0 / e:.4f},{aux:.4f},{0.5 + 0.1 * e:.4f},{2.1 / e:.4f},{aux:.4f},"
            f"{valid_acc - 0.01 * (3 - e):.4f},1.5"
        )
    (d / "history.csv").write_text("\n".join(lines) + "\n")
    np.savez(
        d / "grad_norms.npz",
        ce_shared=np.abs(rng.normal(size=t)).astype(np.float32) * (r > 0),
        ce_private=np.abs(rng.normal(size=t)).astype(np.float32) * (r < hidden),
        aux_shared=np.abs(rng.normal(size=t)).astype(np.float32) * has_aux,
        aux_private=np.zeros(t, np.float32),
        shared_units=np.int64(r),
        hidden=np.int64(hidden),
    )
    if run_cfg["capture_epochs"]:
        caps = run_cfg["capture_epochs"]
        np.savez(
            d / "hidden_states.npz",
            epochs=np.array(caps, np.int64),
            states=np.tanh(rng.normal(size=(len(caps), 1, t, hidden))).astype(np.float32),
            x=rng.uniform(size=(1, t, 1)).astype(np.float32),
            y=np.array([7], np.int64),
            shared_units=np.int64(r),
        )
    metrics = {
        "experiment": exp,
        "config_name": cfg["name"],
        "seed": seed,
        "point": None,
        "dataset": run_cfg["dataset"],
        "test_acc": test_acc,
        "best_valid_acc": valid_acc,
        "best_epoch": 3,
        "epochs_run": 3,
        "stopped": "max_epochs",
        "kernel_env": dict(cfg.get("job_env") or {}),
        "test_main_loss": 1.0 - test_acc,
        "test_aux_loss": 0.25 if has_aux else 0.0,
        "valid_main_loss": 0.3,
        "valid_aux_loss": 0.2 if has_aux else 0.0,
        "train_main_loss": 0.2,
        "train_aux_loss": 0.1 if has_aux else 0.0,
        "params": 1000 * hidden + (500 if has_aux else 0),
        "params_main": 1000 * hidden - 170,  # params is the sum of the three parts, as trained
        "params_head": 170,
        "params_aux": 500 if has_aux else 0,
        "shared_units": r,
        "wall_time_s": 1800.0,
        "samples_per_s": 100.0,
        "device": "cpu",
        "device_name": "Test CPU",
        "torch_version": "2.14.1",
        "cuda_version": None,
        "platform": "Linux-test",
        "git_commit": "abc1234",
        "psrnn_version": "0.1.0",
        "config": run_cfg,
    }
    (d / "metrics.json").write_text(json.dumps(metrics))


def write_manifest(root: Path, name: str) -> None:
    """The keys `python -m psrnn prepare` writes (src/psrnn/studies/private_shared/data/prepare.py)."""
    d = root / "data" / name / "prepared" / "mnist"
    d.mkdir(parents=True)
    stats = {"mean": 196.0, "min": 196, "max": 196}
    (d / "manifest.json").write_text(
        json.dumps(
            {
                "dataset": "mnist",
                "input": "continuous",
                "features": 1,
                "scale": 255,
                "num_classes": 10,
                "counts": {"train": 500, "valid": 10000, "test": 10000},
                "length": {"train": stats, "valid": stats, "test": stats},
            }
        )
    )


def make_suite(
    root: Path,
    name: str = "t",
    paper_scale: bool = False,
    latex: str = "auto",
    keep: tuple[str, ...] | None = None,
    acc: dict | None = None,
) -> Path:
    """Config file, manifests and runs under `root`; returns the config path.

    keep: only these experiments (default all); acc: the runs' test accuracies (default ACC).
    """
    cfg = suite_config(name, paper_scale, latex)
    if keep is not None:
        cfg["experiments"] = {k: v for k, v in cfg["experiments"].items() if k in keep}
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    cfg = C.load_suite(path)
    for exp, seeds in (ACC if acc is None else acc).items():
        if exp in cfg["experiments"]:
            for seed, a in seeds.items():
                write_run(root, cfg, exp, seed, a, VALID.get(exp, a))
    write_manifest(root, name)
    return path


def load(root: Path, path: Path):
    cfg = C.load_suite(path)
    return gather(
        cfg, load_reference(REFERENCE_PATH), root / "results" / cfg["name"], root / "data" / cfg["name"]
    )


def row(table, **match) -> dict:
    df = table.data
    for k, v in match.items():
        df = df[df[k] == v]
    assert len(df) == 1, match
    return df.iloc[0].to_dict()


# --- reference numbers ----------------------------------------------------------------------

CONTRACT_IDS = """
table2/mnist/gru table2/mnist/full-rec-a1 table2/mnist/full-rec-a20 table2/mnist/ps30-rec-a1
table2/mnist/ps30-predrec-a40 table2/fmnist/gru table2/fmnist/full-rec-a5 table2/fmnist/ps60-rec-a20
table2/fmnist/ps50-predrec-a5 table2/cifar10/gru-small table2/cifar10/gru-large
table2/cifar10/full-rec-a20 table2/cifar10/ps40-rec-a20 table2/cifar10/ps60-predrec-a10
table2/imdb/gru table2/imdb/full-rec-a1 table2/imdb/ps60-predrec-a1 table2/imdb/ps60-predrec-a5
table2/dbpedia/gru table2/dbpedia/full-rec-a20 table2/dbpedia/ps50-rec-a20 table2/dbpedia/ps40-rec-a20
table4/shared-00 table4/shared-10 table4/shared-30 table4/shared-50 table4/shared-70 table4/shared-100
fig3/mnist-h16""".split()


def test_reference_file_has_the_contract_ids_and_the_papers_numbers():
    ref = load_reference(REFERENCE_PATH)
    ids = [r["id"] for key in ("table2", "table4", "figures") for r in ref[key]]
    assert ids == CONTRACT_IDS
    t2 = {r["id"]: r for r in ref["table2"]}
    assert [t2[i]["acc"] for i in CONTRACT_IDS[:5]] == [98.5, 98.8, 98.5, 98.8, 98.9]
    assert t2["table2/cifar10/ps60-predrec-a10"]["params"] == 4_700_000
    assert t2["table2/mnist/ps30-predrec-a40"]["tasks"] == ["pred", "rec"]
    t4 = {r["shared"]: (r["acc"], r["main_loss"], r["aux_loss"]) for r in ref["table4"]}
    assert t4[50] == (76.1, 0.865, 0.758) and t4[0] == (70.8, 1.523, None)
    assert {r["id"]: (r["mnist"], r["cifar10"]) for r in ref["table3"]}["table3/paper"] == (98.9, 76.2)
    # every Table 2 row agrees with itself: shared + private = 100, a GRU row has no task
    for r in ref["table2"]:
        assert (r["model"] == "gru") == (r["shared"] is None) == (not r["tasks"])
        if r["shared"] is not None:
            assert r["shared"] + r["private"] == 100 and (r["model"] == "full") == (r["shared"] == 100)


# --- statistics -----------------------------------------------------------------------------


def test_summary_mean_std_and_t_interval_by_hand():
    s = summarize([0.90, 0.92, 0.94], scale=100.0)
    half = T975_2 * 2.0 / math.sqrt(3)
    assert (s.n, s.mean, s.std) == (3, pytest.approx(92.0), pytest.approx(2.0))
    assert (s.ci_low, s.ci_high) == (pytest.approx(92.0 - half), pytest.approx(92.0 + half))
    one = summarize([0.5])
    assert one.n == 1 and one.mean == 0.5 and math.isnan(one.std) and math.isnan(one.ci_low)
    assert summarize([]).n == 0 and summarize([None, float("nan")]).n == 0


def test_accuracy_interval_from_two_seeds_is_clipped_at_100_and_flagged():
    # 95 % and 99 %: mean 97, std 4 / sqrt(2), t-interval 97 +- 12.71 * 2 = [71.59, 122.41]
    raw = summarize([0.95, 0.99], scale=100.0)
    assert raw.ci_high == pytest.approx(97.0 + 2 * T975_1) and not raw.uninformative
    acc = bounded(raw, *PERCENT, wide=WIDE_PP)
    assert (acc.n, acc.mean, acc.std) == (raw.n, raw.mean, raw.std)  # only the interval changes
    assert acc.ci_low == pytest.approx(97.0 - 2 * T975_1) and acc.ci_high == 100.0
    assert acc.clipped and acc.wide and acc.uninformative
    assert ci(acc) == "[71.59, 100.00]†‡"
    # inside 0-100 but 25.4 pp wide: flagged, not clipped
    wide = bounded(summarize([0.50, 0.52], scale=100.0), *PERCENT, wide=WIDE_PP)
    assert (wide.ci_low, wide.ci_high) == (pytest.approx(51 - T975_1), pytest.approx(51 + T975_1))
    assert wide.wide and not wide.clipped and ci(wide) == "[38.29, 63.71]†"
    # 3 seeds 2 pp apart: 9.94 pp wide, just informative
    ok = bounded(summarize([0.90, 0.92, 0.94], scale=100.0), *PERCENT, wide=WIDE_PP)
    assert not ok.uninformative and ci(ok) == "[87.03, 96.97]"
    # a loss is cut at 0 and has no width limit; a difference of accuracies at -100 pp
    loss = bounded(summarize([0.05, 0.15]), *LOSS)
    assert loss.ci_low == 0.0 and loss.ci_high == pytest.approx(0.1 + T975_1 * 0.05)
    assert ci(loss, 3) == "[0.000, 0.735]‡"
    diff = bounded(summarize([-0.90, -0.10], scale=100.0), *PP, wide=WIDE_PP)  # -50 +- 40 * 12.71
    assert (diff.ci_low, diff.ci_high) == (-100.0, 100.0) and ci(diff) == "[-100.00, 100.00]†‡"
    one = summarize([0.99], scale=100.0)
    assert bounded(one, *PERCENT, wide=WIDE_PP) == one and ci(one) == DASH


def test_paired_difference_uses_common_seeds_only():
    diff, seeds = paired({0: 0.95, 1: 0.96, 2: 0.98}, {0: 0.90, 1: 0.92, 2: 0.94, 5: 0.1}, 100.0)
    assert seeds == [0, 1, 2]
    sd = math.sqrt(((5 - 13 / 3) ** 2 + 2 * (4 - 13 / 3) ** 2) / 2)  # diffs 5, 4, 4
    assert diff.mean == pytest.approx(13 / 3) and diff.std == pytest.approx(sd)
    assert diff.ci_low == pytest.approx(13 / 3 - T975_2 * sd / math.sqrt(3))


def test_verdict_is_an_equivalence_test_with_a_margin():
    """Reproduced: our whole 95% t-interval within ±0.5 pp of the paper's value; not
    reproduced: wholly beyond; inconclusive: otherwise, with the seeds that would decide it
    at our spread. The old rule (paper value inside our interval) rewarded wide intervals."""
    tight = summarize([96.0, 96.1, 96.2])  # mean 96.1, std 0.1, CI 96.1 ± 4.303 x 0.1 / √3
    assert (tight.ci_low, tight.ci_high) == pytest.approx((96.1 - 0.24844, 96.1 + 0.24844), abs=1e-4)
    assert verdict(96.2, tight, paper_scale=True) == "reproduced (95% CI within ±0.5 pp)"
    assert verdict(97.5, tight, paper_scale=True) == "not reproduced (ours lower)"
    assert verdict(94.0, tight, paper_scale=True) == "not reproduced (ours higher)"
    assert verdict(96.9, tight, paper_scale=True) == "not reproduced (ours lower)"  # 96.35 < 96.4
    # 96.7: the margin starts at 96.2, inside our CI. The gap to clear is |96.1 - 96.7| - 0.5 =
    # 0.1 pp: t(n-1) x 0.1 / √n < 0.1 first at n = 7 (2.447 / √7 = 0.925; n = 6: 1.05)
    assert (
        verdict(96.7, tight, paper_scale=True)
        == "inconclusive (about 7 seeds would decide it at this spread)"
    )
    assert seeds_to_resolve(tight, 0.1) == 7
    # three seeds 3 pp apart hold both readings: the CI (92.5, 100.1) spans the margin
    wide = summarize([95.0, 96.0, 98.0])
    assert verdict(96.3, wide, paper_scale=True).startswith("inconclusive")
    assert verdict(98.9, summarize([0.99]), paper_scale=True) == "1 seed: no verdict"
    assert verdict(98.9, summarize([]), paper_scale=True) == "missing"
    assert seeds_to_resolve(summarize([90.0, 90.0]), 1.0) is None  # no spread to go by
    # a small config never claims a reproduction, even when the number falls inside the CI
    assert verdict(96.2, tight, paper_scale=False) == "not assessed (small config)"


def test_the_papers_orderings_are_read_as_paired_claims():
    """An ordering resolved, one reversed, one unresolved with the seeds that would resolve
    it, and a single-seed difference with no verdict."""
    ahead = summarize([1.0, 1.2, 0.9])  # private/shared ahead on every seed: CI above 0
    assert claim_reading(0.8, ahead, True) == "the paper's order holds (CI on its side of 0)"
    assert claim_reading(-0.8, ahead, True) == "reversed (CI on the other side of 0)"
    mixed = summarize([0.5, -0.3, 0.4])  # mean 0.2, std 0.436: CI contains 0
    n = seeds_to_resolve(mixed, mixed.mean)
    assert n is not None and T975_2 * mixed.std / math.sqrt(3) > 0.2
    assert claim_reading(0.8, mixed, True) == (
        f"unresolved (CI contains 0; about {n} seeds would decide it at this spread)"
    )
    assert n == next(k for k in range(2, 1000) if t_quantile(k) * mixed.std / math.sqrt(k) < 0.2)
    assert claim_reading(0.8, summarize([0.5]), True) == "1 seed: no verdict"
    assert claim_reading(0.8, ahead, False).endswith("not assessed (small config)")


# --- tables ---------------------------------------------------------------------------------


def test_table2_numbers_and_missing_rows(tmp_path):
    s = load(tmp_path, make_suite(tmp_path))
    t = tables.table2(s)
    assert len(t.data) == 22  # every reference row exactly once (one experiment per ref here)
    gru = row(t, ref="table2/mnist/gru")
    assert gru["experiment"] == "mnist_gru" and gru["n"] == 3
    assert gru["acc_mean"] == pytest.approx(92.0) and gru["acc_std"] == pytest.approx(2.0)
    assert gru["acc_ci_high"] == pytest.approx(92.0 + T975_2 * 2.0 / math.sqrt(3))
    assert gru["diff"] == pytest.approx(92.0 - 98.5) and gru["paper_params"] == 90000
    assert gru["params"] == 16000
    full = row(t, ref="table2/mnist/full-rec-a1")  # 2 of 3 seeds finished
    assert full["n"] == 2 and full["acc_mean"] == pytest.approx(94.0)
    assert full["acc_ci_low"] == pytest.approx(94.0 - T975_1 * math.sqrt(2) / math.sqrt(2))
    ps = row(t, ref="table2/mnist/ps30-predrec-a40")
    assert ps["settings"] == "d=16, shared 50% (paper 30%), anchors 4 (paper 40), window 10 (paper 20)"
    # rows without an experiment: missing, never zero
    fm = row(t, ref="table2/fmnist/gru")
    assert fm["n"] == 0 and math.isnan(fm["acc_mean"]) and fm["experiment"] == ""
    disp = t.display.set_index("Experiment")
    assert disp.loc["mnist_gru", "Ours acc %"] == "92.00 ± 2.00"
    assert disp.loc["mnist_gru", "Δ"] == "-6.50"
    assert disp.loc["mnist_full", "Ours acc %"] == "94.00 ± 1.41"
    missing = t.display[t.display["Experiment"] == DASH]
    assert len(missing) == 19 and set(missing["Ours acc %"]) == {DASH} and set(missing["Δ"]) == {DASH}
    csv_lines = tables.to_csv(t, s).splitlines()
    header = csv_lines[0].split(",")
    fm_line = next(line for line in csv_lines if ",table2/fmnist/gru," in line).split(",")
    assert fm_line[header.index("acc_mean")] == "" and fm_line[header.index("paper_acc")] == "90.5"


def test_two_seed_interval_is_clipped_and_flagged_in_table2_and_the_report(tmp_path):
    """mnist_full: 93 % and 95 %, t-interval 94 +- 12.71 = [81.29, 106.71] -> cut at 100."""
    s = load(tmp_path, make_suite(tmp_path))
    t = tables.table2(s)
    full, gru = row(t, ref="table2/mnist/full-rec-a1"), row(t, ref="table2/mnist/gru")
    assert full["acc_ci_low"] == pytest.approx(94.0 - T975_1) and full["acc_ci_high"] == 100.0
    assert full["acc_ci_clipped"] and full["acc_ci_uninformative"]
    assert not gru["acc_ci_clipped"] and not gru["acc_ci_uninformative"]  # 3 seeds, 9.94 pp wide
    csv_lines = tables.to_csv(t, s).splitlines()
    header = csv_lines[0].split(",")
    cells = next(x for x in csv_lines if ",mnist_full," in x).split(",")
    assert [cells[header.index(k)] for k in ("acc_ci_high", "acc_ci_clipped", "acc_ci_uninformative")] == [
        "100",
        "true",
        "true",
    ]
    assert "cut to [0, 100] (acc_ci_clipped)" in tables.to_markdown(t, s)

    text = report.report_markdown(s, [])
    line = next(x for x in text.splitlines() if x.startswith("| table2/mnist/full-rec-a1 accuracy"))
    assert "| 94.00 ± 1.41 | [81.29, 100.00]†‡ | 2 |" in line
    assert "| [87.03, 96.97] | 3 |" in next(
        x for x in text.splitlines() if x.startswith("| table2/mnist/gru acc")
    )
    table2_part = text.split("### Table 2")[1].split("### Table 4")[0]
    assert "with t = 12.71 for n = 2, 4.30 for n = 3: few seeds give wide intervals" in table2_part
    assert "† wider than 10 pp" in table2_part and "‡ clipped: the interval ran past" in table2_part
    assert "Uninformative" not in text.split("### Table 4")[1].split("### Parameter")[0]  # no intervals there


def test_table1_table3_table4(tmp_path):
    s = load(tmp_path, make_suite(tmp_path))
    t1 = tables.table1(s)
    mn = row(t1, dataset="mnist")
    assert (mn["mean_length"], mn["train"], mn["valid"], mn["test"], mn["classes"]) == (
        196,
        500,
        10000,
        10000,
        10,
    )
    cf = row(t1, dataset="cifar10")
    assert cf["status"] == "not prepared" and math.isnan(cf["train"])
    assert row(t1, dataset="imdb")["status"] == "not in this config"

    t3 = tables.table3(s)
    ours_ps = row(t3, model="private/shared (ours)")
    assert ours_ps["mnist_experiment"] == "mnist_ps" and ours_ps["mnist"] == pytest.approx(96.0 + 1 / 3)
    assert ours_ps["cifar10_n"] == 0 and math.isnan(ours_ps["cifar10"])
    assert row(t3, model="iRNN")["mnist"] == 97.0

    t4 = tables.table4(s)
    assert len(t4.data) == 6
    s50 = row(t4, ref="table4/shared-50")
    assert s50["experiment"] == "cifar_s50" and s50["n"] == 0 and math.isnan(s50["acc_mean"])
    assert s50["paper_main_loss"] == 0.865 and s50["shared_pct"] == 50.0
    assert set(t4.display["Ours acc %"]) == {DASH}


def test_best_experiment_is_chosen_on_validation_not_test(tmp_path):
    s = load(tmp_path, make_suite(tmp_path))
    # mnist_fig3 is also private/shared but not a table2 experiment; mnist_ps wins on validation
    assert tables.table2_experiments(s, "mnist", "ps") == ["mnist_ps"]
    assert tables.best_experiment(s, ["mnist_gru", "mnist_full"]) == "mnist_full"  # valid .94 > .91


def test_manifest_stats_reads_prepare_keys():
    m = {
        "num_classes": 2,
        "counts": {"train": 20000, "valid": 2200, "test": 19000},
        "length": {"train": {"mean": 1430.5, "min": 500, "max": 9000}},
    }
    assert manifest_stats(m) == {
        "classes": 2,
        "train": 20000,
        "valid": 2200,
        "test": 19000,
        "mean_length": 1430.5,
    }


def test_unknown_ref_is_a_config_error(tmp_path):
    cfg = suite_config("t", False)
    cfg["experiments"]["mnist_gru"]["ref"] = "table2/mnist/gru-typo"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(C.ConfigError, match="mnist_gru.ref"):
        load(tmp_path, path)


def test_two_experiments_for_one_reference_row_get_two_rows(tmp_path):
    path = make_suite(tmp_path)
    cfg = yaml.safe_load(path.read_text())
    cfg["experiments"]["mnist_gru_big"] = {**cfg["experiments"]["mnist_gru"], "hidden": 32}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    write_run(tmp_path, C.load_suite(path), "mnist_gru_big", 0, 0.97, 0.97)
    t = tables.table2(load(tmp_path, path))
    rows = t.data[t.data["ref"] == "table2/mnist/gru"]
    assert list(rows["experiment"]) == ["mnist_gru", "mnist_gru_big"] and list(rows["n"]) == [3, 1]
    assert rows.iloc[1]["acc_mean"] == pytest.approx(97.0) and math.isnan(rows.iloc[1]["acc_std"])


# --- figures --------------------------------------------------------------------------------


def test_square_and_mosaic_layout():
    from psrnn.studies.private_shared.results.figures import mosaic, square

    sq = square(np.arange(196.0))
    assert sq.shape == (14, 14) and sq[1, 0] == 14.0  # row-major: t = 14 starts row 2
    padded = square(np.arange(200.0))
    assert padded.shape == (15, 15) and padded[13, 4] == 199.0 and np.isnan(padded[13, 5])
    pics = [np.full((2, 2), float(u)) for u in range(8)]
    m = mosaic(pics, rows=4)  # 4 rows x 2 columns, 1-pixel nan gutters, column-major like the paper
    assert m.shape == (11, 5)
    assert m[0, 0] == 0.0 and m[3, 0] == 1.0 and m[9, 0] == 3.0 and m[0, 3] == 4.0 and m[10, 4] == 7.0
    assert np.isnan(m[2, 0]) and np.isnan(m[0, 2])


def test_fig3_puts_shared_units_left_and_private_right(tmp_path):
    from psrnn.studies.private_shared.results.figures import fig3_hidden_states, mosaic, square

    root = tmp_path
    s = load(root, make_suite(root, keep=("mnist_fig3",)))
    z = np.load(root / "results" / "t" / "runs" / "mnist_fig3" / "seed0" / "hidden_states.npz")
    fig = fig3_hidden_states(s)
    titles = [ax.get_title() for ax in fig.axes]
    assert "shared units 1-8" in titles and "private units 9-16" in titles
    shared_ax, private_ax = fig.axes[1], fig.axes[2]  # row "start": input, shared, private
    h = z["states"][0, 0]  # epoch 0, sample 0: (T, d)
    np.testing.assert_allclose(
        shared_ax.images[0].get_array().filled(np.nan), mosaic([square(h[:, u]) for u in range(8)], 4)
    )
    np.testing.assert_allclose(
        private_ax.images[0].get_array().filled(np.nan), mosaic([square(h[:, u]) for u in range(8, 16)], 4)
    )
    assert fig.axes[3].get_ylabel() == "after 1 epoch"


def test_fig2_has_an_accuracy_and_a_loss_panel_sharing_the_shared_proportion(tmp_path):
    from psrnn.studies.private_shared.results.figures import fig2_shared_proportion

    s = load(tmp_path, make_suite(tmp_path, keep=("cifar_s50",), acc={"cifar_s50": {0: 0.40, 1: 0.45}}))
    fig = fig2_shared_proportion(s)
    assert len(fig.axes) == 2  # no twin y-axis
    acc, loss = fig.axes
    assert (acc.get_xlabel(), acc.get_ylabel()) == ("shared proportion (%)", "test accuracy (%)")
    assert (loss.get_xlabel(), loss.get_ylabel()) == ("shared proportion (%)", "test loss")
    assert acc.get_shared_x_axes().joined(acc, loss)
    assert [x.get_text() for x in acc.get_legend().get_texts()] == ["paper", "ours ± std"]
    assert [x.get_text() for x in loss.get_legend().get_texts()] == [
        "main loss (paper)",
        "aux loss (paper)",
        "main loss (ours) ± std",
        "aux loss (ours) ± std",
    ]
    ours_acc = acc.containers[0].lines[0]  # errorbar: (40 + 45) / 2 at 50 % shared
    assert list(ours_acc.get_xdata()) == [50.0] and list(ours_acc.get_ydata()) == [pytest.approx(42.5)]
    ours_main, ours_aux = (c.lines[0] for c in loss.containers)  # main loss = 1 - acc, aux 0.25
    assert list(ours_main.get_ydata()) == [pytest.approx(0.575)] and list(ours_aux.get_ydata()) == [0.25]
    assert list(acc.lines[0].get_ydata()) == [70.8, 73.8, 74.0, 76.1, 74.6, 73.1]  # the paper's Table 4


def test_fig2_is_byte_identical_when_compiled_twice(tmp_path):
    import matplotlib

    from psrnn.studies.private_shared.results.figures import STYLE, fig2_shared_proportion, save

    s = load(tmp_path, make_suite(tmp_path, keep=("cifar_s50",), acc={"cifar_s50": {0: 0.40, 1: 0.45}}))
    digests = []
    for out in ("a", "b"):
        with matplotlib.rc_context(STYLE):  # as write_figures builds them
            paths = save(fig2_shared_proportion(s), tmp_path / out / "fig2_shared_proportion")
        digests.append([hashlib.sha256(p.read_bytes()).hexdigest() for p in paths])
    assert len(digests[0]) == 3 and digests[0] == digests[1]


def test_fig1_compares_gru_full_and_private_shared_of_one_dataset(tmp_path):
    from psrnn.studies.private_shared.results.figures import fig1_models

    s = load(tmp_path, make_suite(tmp_path))
    assert fig1_models(s) == [("gru", "mnist_gru", 0), ("full", "mnist_full", 0), ("ps", "mnist_ps", 0)]


# --- report ---------------------------------------------------------------------------------


def test_report_verdicts_paired_comparison_and_provenance(tmp_path):
    s = load(tmp_path, make_suite(tmp_path, name="p", paper_scale=True))
    text = report.report_markdown(s, ["REPORT.md"])
    lines = text.splitlines()

    def line(prefix: str) -> str:
        return next(x for x in lines if x.startswith(prefix))

    assert "not reproduced (ours lower)" in line("| table2/mnist/gru accuracy % (mnist_gru)")
    # 95, 96, 98 %: a CI of ±3.8 pp holds the paper's value and much else
    assert "| inconclusive (about " in line("| table2/mnist/ps30-predrec-a40 accuracy")
    assert "| 1 seed: no verdict |" not in line("| table2/mnist/full-rec-a1")  # n = 2 has a CI
    # a row the config has no experiment for is counted under the table, not listed
    assert not any(x.startswith(("| table2/fmnist/gru acc", "| table2/dbpedia/gru acc")) for x in lines)
    assert re.search(r"^\d+ of Table 2's \d+ rows are not run by this config\.$", text, flags=re.M)
    # the report opens with its findings: verdict counts of the rows and orderings it runs
    findings = text.split("## Findings\n\n")[1].split("\n\n")[0].splitlines()
    assert findings[0].startswith("- **Table 2 accuracies** (") and "rows run): " in findings[0]
    assert findings[1] == "- **Table 4 accuracies** (1 of 6 rows run): 1 missing."
    orderings = "- **The paper's orderings** (2 comparisons): 1 the paper's order holds, 1 unresolved."
    assert findings[2] == orderings
    assert line("| table4/shared-50 accuracy").endswith("| missing |")
    # paired: ps - gru per seed = 5, 4, 4 pp; ps - full on seeds 0, 1 = 2, 1 pp
    sd = math.sqrt(((5 - 13 / 3) ** 2 + 2 * (4 - 13 / 3) ** 2) / 2)
    half = T975_2 * sd / math.sqrt(3)
    gru_line = line("| MNIST | private/shared − GRU")
    assert f"| +4.33 | [{13 / 3 - half:.2f}, {13 / 3 + half:.2f}] |" in gru_line
    # the paper has private/shared ahead of the GRU (the gap column): our CI agrees
    assert "[0, 1, 2]" in gru_line and gru_line.endswith("| the paper's order holds (CI on its side of 0) |")
    full_line = line("| MNIST | private/shared − full share")
    assert "[0, 1]" in full_line and "| +1.50 |" in full_line and "| unresolved (CI contains 0; " in full_line
    assert "missing (no finished private/shared run)" in line("| CIFAR-10 | private/shared − GRU")
    # provenance: 9 runs x 1800 s on CPU = 4.50 CPU hours
    assert "- Runs: 9 of 15 finished" in text and "final runs 4.50 h on CPU" in text
    assert "`abc1234` (9 runs)" in text and "Test CPU; Linux-test; torch 2.14.1 (9 runs)" in text
    # deviations from the config and the reference file, one table row each
    assert "| image size | 28×28 (784 steps) | 14×14 (196 steps) | MNIST |" in lines
    assert "| train samples used | whole split | the first 500 of it | MNIST |" in lines
    assert (
        "| dataset | reported | not run (not in the config); its rows are missing | F-MNIST, IMDB, DBpedia |"
    ) in lines
    assert (
        "| fig3/mnist-h16 settings | pictures after epochs [0, 5, 25] | pictures after epochs [0, 1] "
        "| mnist_fig3 |"
    ) in lines
    assert "| the epoch budget (max_epochs) in 9 of 9 finished runs | all except cifar_s50 |" in text
    assert SMALL_LABEL not in text
    assert "- `mnist_full`: 2 of 3 runs finished" in text and "- `cifar_s50`: 0 of 3 runs finished" in text


def test_a_final_run_that_reused_its_search_run_is_not_counted_twice(tmp_path):
    """Its metrics.json's reused_from: its wall time is the search run's (compute counted once)."""
    s = load(tmp_path, make_suite(tmp_path, name="p", paper_scale=True))
    next(r for r in report.all_runs(s)).metrics["reused_from"] = "results/p/search/mnist_gru/lr-1.0"
    text = report.report_markdown(s, ["REPORT.md"])
    assert "final runs 4.00 h on CPU" in text  # 8 of the 9 runs x 1800 s
    assert "(1 final run reused its search run's record: counted in the search)" in text


def test_provenance_counts_the_grid_and_points_to_the_notes_beside_the_report(tmp_path):
    """'k of n grid-search runs finished' (n: the enabled experiments' grid points), and the
    notes a person left beside REPORT.md (how the runs were made) linked by name."""
    path = make_suite(tmp_path, name="p", paper_scale=True)
    cfg = yaml.safe_load(path.read_text())
    cfg["experiments"]["cifar_s50"]["grid"] = {"lr": [0.1, 0.3, 1.0]}  # an experiment with no runs
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    results = tmp_path / "results" / "p"
    text = report.report_markdown(load(tmp_path, path), [])
    assert "× 3 seeds); 0 of 3 grid-search runs finished\n" in text and "How the runs were made" not in text
    for name in ("RUN.md", "GPU-RUN.md", "REPORT.md"):
        (results / name).write_text("x")
    text = report.report_markdown(load(tmp_path, path), [])
    assert (
        "\n- How the runs were made (commands, machine, time): [GPU-RUN.md](GPU-RUN.md), [RUN.md](RUN.md)\n"
        in text
    )
    del cfg["experiments"]["cifar_s50"]["grid"]
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    assert "× 3 seeds); no grid search\n" in report.report_markdown(load(tmp_path, path), [])


def test_deviations_are_one_table_with_each_deviation_once(tmp_path):
    """F-MNIST prepared like MNIST: their shared deviations are one row naming both."""
    path = make_suite(tmp_path)
    cfg = yaml.safe_load(path.read_text())
    cfg["datasets"]["fmnist"] = {"prepare": {"downsample": 14, "train": 500}}
    cfg["experiments"]["fmnist_gru"] = {"dataset": "fmnist", "ref": "table2/fmnist/gru", "shared": 0.0}
    cfg["fixtures"] = "data/t/fixtures"  # synthetic archives, as the small config's
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    text = report.report_markdown(load(tmp_path, path), [])
    section = text.split("## Deviations from the paper's protocol")[1].split("\n## ")[0]
    table = [x for x in section.splitlines() if x.startswith("| ")]
    assert table[0] == "| Setting | Paper | This config | Applies to |"
    assert "| image size | 28×28 (784 steps) | 14×14 (196 steps) | MNIST, F-MNIST |" in table
    assert "| image size | 32×32 (1,024 steps) | 8×8 (64 steps) | CIFAR-10 |" in table
    assert "| train samples used | whole split | the first 500 of it | MNIST, F-MNIST |" in table
    assert (
        "| decoder input | its own previous estimate (thesis) | the true previous input (teacher "
        "forcing) | all except mnist_gru, fmnist_gru |"
    ) in table
    # the sources neither mention clipping nor publish a learning rate: both are stated for every run
    clip = "| gradient clipping | not mentioned | one norm over all parameters at norm 1 (results/recipe/"
    assert any(x.startswith(clip) for x in table)
    assert any(x.startswith("| learning rate | searched on validation (grid not given) |") for x in table)
    assert not any(x.startswith("| where our initialisation") for x in table)  # a small config's digits
    rows = [tuple(c.strip() for c in x.strip("|").split(" | ")[:3]) for x in table[1:]]
    assert (
        "| data | the real datasets | synthetic archives in the upstream formats (data/t/fixtures): no real "
        "images or texts | everything |"
    ) in table
    # SGDR's cycles against the cap and patience: one row for every experiment alike
    stopping = [x for x in table if x.startswith("| early stopping under warm restarts |")]
    assert len(stopping) == 1 and "checked only at cycle ends" in stopping[0], stopping
    assert len(rows) == len(set(rows)) == 16  # (setting, paper, ours): each deviation once
    # no per-dataset bullets any more; the reference file's notes follow the table, once each
    assert not any(x.startswith(("- MNIST:", "- F-MNIST:")) for x in section.splitlines())
    notes = [x for x in section.splitlines() if x.startswith("- ")]
    assert len(notes) == len(load_reference(REFERENCE_PATH)["deviations"]) == 7


def test_report_embeds_the_figures_that_were_compiled(tmp_path):
    s = load(tmp_path, make_suite(tmp_path))
    outputs = [
        "tables/table2.md",
        "figures/fig2_shared_proportion.pdf",
        "figures/fig2_shared_proportion.png",
        "figures/curves_mnist_gru.svg",
        "figures/curves_mnist_gru.png",
        "REPORT.md",
    ]
    text = report.report_markdown(s, outputs)
    images = [x for x in text.splitlines() if x.startswith("![")]
    assert images == [
        "![Figure 2: accuracy and losses against the shared proportion (CIFAR-10)]"
        "(figures/fig2_shared_proportion.png)",
        "![Training curves: mnist_gru](figures/curves_mnist_gru.png)",
    ]
    assert text.index("## Figures") < text.index("## Missing")
    assert "## Figures" not in report.report_markdown(s, ["REPORT.md"])  # nothing compiled, no links


def _set_diverged(root: Path, exp: str, seed: int, value) -> None:
    p = root / "results" / "t" / "runs" / exp / f"seed{seed}" / "metrics.json"
    m = json.loads(p.read_text())
    m["diverged"] = value
    p.write_text(json.dumps(m))


def test_report_lists_diverged_runs_and_only_those(tmp_path):
    path = make_suite(tmp_path)
    assert "Diverged" not in report.report_markdown(load(tmp_path, path), [])  # no key: not diverged
    _set_diverged(tmp_path, "mnist_gru", 0, None)  # null: not diverged either
    _set_diverged(tmp_path, "mnist_gru", 1, {"epoch": 3, "train_loss": 4600.0, "first_loss": 2.3})
    _set_diverged(tmp_path, "mnist_full", 0, {"epoch": 12, "train_loss": float("inf"), "first_loss": 2.0})
    lines = report.report_markdown(load(tmp_path, path), []).splitlines()
    start = lines.index("## Diverged runs")
    assert start < lines.index("## Deviations from the paper's protocol")
    rows = [
        x for x in lines[start : lines.index("## Deviations from the paper's protocol")] if x.startswith("| ")
    ]
    assert rows == [
        "| Experiment | Seed | Epoch | Training loss | First loss | Ratio |",
        "| mnist_gru | 1 | 3 | 4600 | 2.3 | 2000 |",
        "| mnist_full | 0 | 12 | inf | 2 | inf |",
    ]


def test_small_config_is_never_a_reproduction(tmp_path):
    s = load(tmp_path, make_suite(tmp_path))
    text = report.report_markdown(s, [])
    assert SMALL_LABEL.capitalize() in text.splitlines()[2]
    assert "reproduced (paper" not in text and "not assessed (small config)" in text
    for t in tables.all_tables(s):
        assert SMALL_LABEL in tables.to_markdown(t, s)
        assert SMALL_LABEL in tables.to_csv(t, s).splitlines()[1]
        assert r"\textbf{Small config --- not a reproduction of the paper.}" in tables.to_latex(t, s)
    from psrnn.studies.private_shared.results import figures

    for stem, build in figures.figure_builders(s)[:3]:
        assert SMALL_LABEL in build().get_suptitle(), stem
    assert report.summary_metrics(s)["status"] == SMALL_LABEL


def test_a_reduced_scale_check_names_itself_and_reads_the_orderings(tmp_path):
    """A config with its own scale_label (config/mnist-real.yaml) carries that label where a
    small config says "small config", compares no value with the paper's, and reads the
    paper's orderings on its seeds, saying at which scale."""
    path = make_suite(tmp_path)
    cfg = yaml.safe_load(path.read_text())
    cfg["scale_label"] = "reduced-scale check on real digits"
    cfg["description"] = "4,000 real digits, 10 epochs."
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    s = load(tmp_path, path)
    label = "reduced-scale check on real digits — not a reproduction of the paper"
    assert s.scale_label == label and s.reduced_scale
    text = report.report_markdown(s, [])
    lines = text.splitlines()
    assert lines[2].startswith("> **Reduced-scale check on real digits — not a reproduction of the paper.**")
    assert SMALL_LABEL not in text and "small config" not in text
    # ps − gru over seeds 0-2: 5, 4, 4 pp, CI 4.33 ± 4.303 x 0.577 / √3 = (2.90, 5.77): holds;
    # ps − full over seeds 0-1: 2, 1 pp, CI 1.5 ± 12.706 x 0.707 / √2: contains 0
    findings = lines[lines.index("## Findings") : lines.index("## Findings") + 4]
    assert any("not compared with the paper's (reduced-scale check on real digits" in x for x in findings)
    assert (
        "- **The paper's orderings at this reduced scale (reduced-scale check on real digits)** "
        "(2 comparisons): 1 the paper's order holds, 1 unresolved."
    ) in findings
    assert "**Table 2 accuracies** (" not in text  # no value verdicts
    scale_row = next(x for x in lines if x.startswith("| scale |"))
    assert (
        "| reduced-scale check on real digits: 4,000 real digits, 10 epochs; no value is compared "
        "with the paper's, its orderings are read at this scale (Findings) |"
    ) in scale_row
    for t in tables.all_tables(s):
        assert label in tables.to_markdown(t, s) and label in tables.to_csv(t, s).splitlines()[1]
    assert report.summary_metrics(s)["status"] == label


def test_summary_metrics_for_dvc(tmp_path):
    s = load(tmp_path, make_suite(tmp_path))
    m = report.summary_metrics(s)
    assert m["runs_finished"] == 9 and m["runs_expected"] == 15
    assert m["experiments"]["mnist_gru"] == {
        "ref": "table2/mnist/gru",
        "n": 3,
        "test_acc_mean": 0.92,
        "test_acc_std": 0.02,
        "best_valid_acc_mean": 0.91,
    }
    assert m["experiments"]["cifar_s50"]["n"] == 0 and m["experiments"]["cifar_s50"]["test_acc_mean"] is None


# --- the command: outputs, determinism, paper -----------------------------------------------


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _compile(cwd: Path, config: Path, hashseed: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONHASHSEED": hashseed}
    return subprocess.Popen(
        [sys.executable, "-m", "psrnn", "compile", "--config", str(config)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_compile_twice_is_byte_identical_and_writes_every_output(tmp_path):
    """Two processes with different hash seeds, on two copies of the same runs (at once,
    to halve the wait), must write the same bytes. Three experiments cover every kind of
    figure (Table 4 runs with error bars, hidden states, gradient norms, curves)."""
    runs = {**ACC, "cifar_s50": {0: 0.40, 1: 0.45}}
    config = make_suite(tmp_path / "a", keep=("mnist_ps", "mnist_fig3", "cifar_s50"), acc=runs)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    procs = [
        _compile(tmp_path / "a", Path(config.name), "1"),
        _compile(tmp_path / "b", Path(config.name), "2"),
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr
        assert "from 6 of 9 runs" in stdout and SMALL_LABEL in stdout
    out_a, out_b = tmp_path / "a" / "results" / "t", tmp_path / "b" / "results" / "t"
    cfg = C.load_suite(config)
    expected = set(registry.study_of(cfg).output_paths(cfg))  # relative to the working folder
    written = {
        p.relative_to(tmp_path / "a") for p in out_a.rglob("*") if p.is_file() and "runs" not in p.parts
    }
    assert written == expected
    digests_a = {k: v for k, v in _digests(out_a).items() if not k.startswith("runs")}
    digests_b = {k: v for k, v in _digests(out_b).items() if not k.startswith("runs")}
    assert len(digests_a) == len(expected) and digests_a == digests_b
    assert (out_a / "figures" / "fig3_hidden_states.png").stat().st_size > 10_000  # a real picture
    pdf = (out_a / "figures" / "fig2_shared_proportion.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and b"CreationDate" not in pdf
    report_text = (out_a / "REPORT.md").read_text()
    assert "- `figures/fig1_gradient_norms.{pdf,png,svg}`" in report_text
    # every compiled figure is embedded by its PNG, relative to REPORT.md, and every link resolves
    links = re.findall(r"^!\[[^\]]+\]\((figures/[^)]+)\)$", report_text, flags=re.M)
    assert sorted(links) == sorted(str(p.relative_to(out_a)) for p in (out_a / "figures").glob("*.png"))
    assert len(links) == 6 and "figures/fig2_shared_proportion.png" in links
    t4 = (out_a / "tables" / "table4.md").read_text()
    assert "| 50 / 50 | 76.1 | 42.50 ± 3.54 | 2 |" in t4  # (40 + 45) / 2, std 5 / sqrt(2)


def test_paper_is_skipped_cleanly_without_latexmk(tmp_path, monkeypatch, capsys):
    config = make_suite(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no latexmk anywhere
    monkeypatch.setattr(
        "psrnn.studies.private_shared.results.figures.write_figures", lambda s, d: []
    )  # speed: no figures
    assert main(["compile", "--config", str(config)]) == 0
    assert main(["paper", "--config", str(config)]) == 0
    assert "paper: skipped: latexmk not found (apt-get install latexmk" in capsys.readouterr().out
    status = json.loads((tmp_path / "results" / "t" / "paper" / "build.json").read_text())
    assert status["build"] is False and not (tmp_path / "results" / "t" / "paper" / "paper.pdf").exists()

    required = make_suite(tmp_path / "req", name="r", latex="require")
    monkeypatch.chdir(tmp_path / "req")
    assert main(["compile", "--config", str(required)]) == 0
    assert main(["paper", "--config", str(required)]) == 2
    assert "latexmk not found but the config says latex: require" in capsys.readouterr().err


def test_paper_build_needs_compiled_outputs(tmp_path):
    from psrnn.cli import UserError
    from psrnn.studies.private_shared.results.paper import build_paper

    cfg = C.load_suite(make_suite(tmp_path))
    with pytest.raises(UserError, match="nothing compiled yet"):
        build_paper(cfg, tmp_path / "results" / "t")


def test_report_lists_the_init_and_a_single_seed_as_deviations(tmp_path):
    path = make_suite(tmp_path, name="p", paper_scale=True, keep=("mnist_gru", "mnist_ps"), acc={})
    cfg = yaml.safe_load(path.read_text())
    cfg["seeds"] = [0]
    cfg["datasets"]["mnist"]["settings"] = {
        "init": {"value": "chrono", "evidence": "measured on real digits under SGDR (a test's words)"}
    }
    cfg["defaults"].update(clip=1.0, clip_scope="groups")
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    for exp, a in (("mnist_gru", 0.95), ("mnist_ps", 0.97)):  # runs trained with these settings
        write_run(tmp_path, C.load_suite(path), exp, 0, a, a)
    text = report.report_markdown(load(tmp_path, path), ["REPORT.md"])
    lines = text.splitlines()
    clip = [x for x in lines if x.startswith("| gradient clipping |")]
    assert len(clip) == 2 and clip[1] == (
        "| gradient clipping | not mentioned | the classifier path (main GRU, head) and the decoders apart, "
        "each at "
        "norm 1 (results/recipe/recipe.md) | mnist_ps |"
    )
    gru_clip = "| gradient clipping | not mentioned | one norm over all parameters at norm 1 (results/recipe/"
    assert any(x.startswith(gru_clip) and x.endswith("| mnist_gru |") for x in lines)
    init = next(x for x in lines if x.startswith("| main GRU initialisation |"))
    assert init.startswith(
        "| main GRU initialisation | not given | chrono (orthogonal recurrent weights, update-gate biases "
        "log U(1, T-1)): measured on real digits under SGDR (a test's words) |"
    )
    assert init.endswith("| all experiments |")
    assert (
        "| seeds per experiment | not given (one number per cell, no spread) | 1 (seed 0): every number is a "
        "single run" in text
    )
    # the initialisation and clip rule were chosen on the MNIST test digits: each MNIST row says so
    chosen = next(x for x in lines if x.startswith("| where our initialisation and clip rule were chosen |"))
    assert chosen == (
        "| where our initialisation and clip rule were chosen | not given | on the 10,000 MNIST test digits, "
        "re-split (results/recipe/): this row's test images | all experiments |"
    )
    line = next(x for x in text.splitlines() if x.startswith("| table2/mnist/gru accuracy"))
    assert line.endswith("| 1 seed: no verdict |")


def test_figure_1_has_one_legend_below_its_panels(tmp_path):
    from psrnn.studies.private_shared.results.figures import GRAD_LINES, fig1_gradient_norms

    s = load(tmp_path, make_suite(tmp_path, keep=("mnist_ps",)))
    fig = fig1_gradient_norms(s)
    fig.canvas.draw()
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == [label for *_, label in GRAD_LINES]
    assert fig.legends[0].get_window_extent().y1 <= min(ax.get_window_extent().y0 for ax in fig.axes)


def test_experiments_without_a_paper_number_get_their_numbers_settings_and_no_verdict(tmp_path):
    """A user's own experiment (no `ref:`) had appeared in no table and no REPORT line: it
    gets a row with its settings (those it sets itself included) and numbers, no verdict;
    an experiment that sets such a setting shows it in Table 2's settings too."""
    path = make_suite(tmp_path, name="p", paper_scale=True, keep=("mnist_gru", "mnist_ps"), acc={})
    cfg = yaml.safe_load(path.read_text())
    mine = {k: v for k, v in cfg["experiments"]["mnist_ps"].items() if k != "ref"}
    cfg["experiments"]["mine"] = {**mine, "aux_anchors": "mean", "lr": 0.1}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))

    def section() -> list[str]:
        text = report.report_markdown(load(tmp_path, path), [])
        return text.split("## Experiments without a paper number\n")[1].split("\n## ")[0].splitlines()

    settings = "private/shared, pred+rec, shared 50%, 4 anchors, window 10, d=16; aux_anchors mean, lr 0.1"
    assert section()[-1] == f"| mine | mnist | {settings} | 0 | — | — | — |"
    for seed, acc in enumerate((0.90, 0.92, 0.94)):
        write_run(tmp_path, C.load_suite(path), "mine", seed, acc, acc + 0.01)
    half = T975_2 * 2.0 / math.sqrt(3)
    assert section()[-1] == (
        f"| mine | mnist | {settings} | 3 | 92.00 ± 2.00 | [{92 - half:.2f}, {92 + half:.2f}] | 93.00 |"
    )
    assert not any(w in line for line in section() for w in ("reproduced", "inconclusive", "1 seed"))
    cfg["experiments"]["mnist_ps"]["aux_anchors"] = "mean"  # an ablation that keeps the paper's ref
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    from psrnn.studies.private_shared.results.tables import table2

    assert row(table2(load(tmp_path, path)), experiment="mnist_ps")["settings"].endswith("; aux_anchors mean")


def test_a_single_seed_paper_config_says_it_gives_no_verdicts_and_what_would(tmp_path):
    """quick.yaml's one seed: no interval, so no verdict; REPORT names the smallest config
    that gives them, at the cost its budget file gives (the H200 times `bench --only budget`
    measured, with paper.yaml's 4-point grid: results/bench/graphs/grid4.py)."""
    from psrnn.files import read_json

    budget = read_json(C.ROOT / report.QUICK_3SEEDS_BUDGET.replace(".md", ".json"))["quick-3seeds.yaml"]
    assert report.QUICK_3SEEDS_HOURS.startswith(f"{budget['total_hours']:.1f} H200-hours")
    assert budget["runs"] == 13 * (4 + 2)  # 13 rows: 4 search points, 2 more seeds each
    assert C.load_suite(C.ROOT / "config" / "quick-3seeds.yaml")["seeds"] == [0, 1, 2]
    s = load(tmp_path, make_suite(tmp_path, name="p", paper_scale=True))
    assert report.single_seed_lines(s) == []  # three seeds: verdicts
    s.cfg["seeds"] = [0]
    (line,) = [x for x in report.single_seed_lines(s) if x]
    assert "**One seed per row: this config gives no verdicts**" in line and "quick-3seeds.yaml" in line


def test_a_compile_without_the_prepared_data_says_so_on_stderr(tmp_path, monkeypatch, capsys):
    """Battery N-AB16: compile in a clone without the data rewrote a committed Table 1 with
    "not prepared" and said nothing; it now says which datasets are not here, and why the
    tables differ."""
    config = make_suite(tmp_path, keep=("mnist_gru",), acc={"mnist_gru": {0: 0.9, 1: 0.91, 2: 0.92}})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("psrnn.studies.private_shared.results.figures.write_figures", lambda s, d: [])
    assert main(["compile", "--config", str(config)]) == 0
    assert capsys.readouterr().err == ""
    shutil.rmtree(tmp_path / "data" / "t" / "prepared")
    assert main(["compile", "--config", str(config)]) == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        "compile: warning: mnist not prepared here (data/t/prepared/): Table 1 and the auxiliary tasks' "
        "floors say so instead of measuring it; prepare it first to compile what its data gives"
    ]
    assert "| not prepared |" in (tmp_path / "results" / "t" / "tables" / "table1.md").read_text()


def test_a_compile_stopped_half_way_changes_no_output(tmp_path, monkeypatch, capsys):
    """Outputs of one compile change together or not at all: a compile killed after its
    tables (SIGTERM, as a scheduler sends it) leaves the last compile's tables, figures and
    REPORT.md as they were, says what Ctrl-C says, and leaves no staging folder."""
    import os
    import signal

    config = make_suite(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        "psrnn.studies.private_shared.results.figures.write_figures", lambda s, d: []
    )  # speed: no figures
    assert main(["compile", "--config", str(config)]) == 0
    assert "compile: warning: 6 of 15 final runs not finished" in capsys.readouterr().err
    out = tmp_path / "results" / "t"
    before = _digests(out)
    # one more finished run: a whole compile would change the tables and REPORT.md
    extra = out / "runs" / "mnist_full" / "seed2"
    shutil.copytree(out / "runs" / "mnist_full" / "seed1", extra)
    m = json.loads((extra / "metrics.json").read_text())
    (extra / "metrics.json").write_text(json.dumps({**m, "seed": 2, "config": {**m["config"], "seed": 2}}))

    def killed(s, d):  # the tables are written by now; the scheduler's kill comes here
        assert (d.parent / "tables" / "table2.md").is_file()
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr("psrnn.studies.private_shared.results.figures.write_figures", killed)
    assert main(["compile", "--config", str(config)]) == 130
    said = capsys.readouterr().err.strip().splitlines()
    assert said[-1] == "psrnn compile: interrupted; the same command resumes"
    after = {k: v for k, v in _digests(out).items() if not k.startswith("runs")}
    assert after == {k: v for k, v in before.items() if not k.startswith("runs")}
    assert not list(out.glob(".compile-*"))
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # main gave the handler back
    monkeypatch.setattr("psrnn.studies.private_shared.results.figures.write_figures", lambda s, d: [])
    assert main(["compile", "--config", str(config)]) == 0  # the same command, whole
    assert _digests(out)["tables/table2.md"] != before["tables/table2.md"]


STAGED = (
    "import sys, time; from pathlib import Path; from psrnn.compile import staged_outputs\n"
    "with staged_outputs(Path(sys.argv[1]), [Path(sys.argv[1]) / 'REPORT.md']) as staging:\n"
    "    print(staging.name, flush=True); time.sleep(120)\n"
)


def test_a_compile_removes_the_staging_folder_a_killed_compile_left_not_a_running_ones(tmp_path):
    """kill -9 leaves a compile's staging folder (links to the runs by absolute path): the
    next compile of the folder removes it, the links and not what they name, and keeps
    the staging folder of a compile still at work."""
    import signal

    from psrnn.compile import staged_outputs

    out = tmp_path / "results" / "t"
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "kept").write_text("a run")
    env = {**os.environ, "PYTHONPATH": str(C.ROOT / "src")}
    compiling = subprocess.Popen(
        [sys.executable, "-c", STAGED, str(out)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        theirs = out / compiling.stdout.readline().strip()
        assert theirs.name.startswith(".compile-") and (theirs / "runs").is_symlink()
        with staged_outputs(out, [out / "REPORT.md"]) as staging:  # while it is at work
            assert theirs.is_dir() and sorted(p.name for p in staging.iterdir()) == ["runs"]
        compiling.send_signal(signal.SIGKILL)
        compiling.wait()
        assert theirs.is_dir()  # left behind
        with staged_outputs(out, [out / "REPORT.md"]) as staging:
            (staging / "REPORT.md").write_text("the report")
            assert not theirs.exists()
    finally:
        compiling.kill()
        compiling.wait()
    assert sorted(p.name for p in out.iterdir()) == ["REPORT.md", "runs"]
    assert (out / "runs" / "kept").read_text() == "a run"


def test_a_config_without_a_figures_experiments_draws_no_placeholder_for_it():
    """quick-imdb.yaml runs only IMDB rows: no CIFAR-10 sweep (Figure 2) and no Figure 3
    experiment, so neither is an output; Figure 1 stays (its private/shared rows)."""
    from psrnn.studies.private_shared.results import paper_figures

    imdb = C.load_suite(C.ROOT / "config" / "quick-imdb.yaml")
    assert paper_figures(imdb) == ["fig1_gradient_norms"]
    stems = {p.stem for p in registry.study_of(imdb).output_paths(imdb) if p.parent.name == "figures"}
    assert not {"fig2_shared_proportion", "fig3_hidden_states"} & stems
    paper = C.load_suite(C.ROOT / "config" / "paper.yaml")
    assert paper_figures(paper) == ["fig1_gradient_norms", "fig2_shared_proportion", "fig3_hidden_states"]
