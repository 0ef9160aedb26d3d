"""The benchmark: its slow reference computes the same model, its arithmetic (ratios,
targets, budget, extrapolation) is right, its generated archives go through the real
`prepare`, and `bench --quick` writes well-formed JSON and Markdown. Speeds are not
asserted: the machine running the tests is not the one the numbers are for."""

import dataclasses
import json
import math
import sys

import numpy as np
import pytest
import torch

from psrnn import bench, machine
from psrnn import config as C
from psrnn.bench import budget, measure, report, speed
from psrnn.bench import stored as stored_budget
from psrnn.cli import UserError, main
from psrnn.studies.private_shared.data import fixtures
from psrnn.studies.private_shared.models import build_model, sample_anchors
from psrnn.studies.private_shared.naive import NaivePSRNN

# --- the naive reference is the same model -------------------------------------------------


@pytest.mark.parametrize(
    "kind,features,embedding", [("continuous", 3, 0), ("categorical", 7, 0), ("categorical", 7, 5)]
)
def test_naive_reference_computes_the_same_losses_and_gradients(kind, features, embedding):
    torch.manual_seed(0)
    cfg = C.coerce_run(
        dict(
            dataset="imdb" if kind == "categorical" else "mnist",
            hidden=12,
            shared=0.5,
            tasks=["rec", "pred"],
            anchors=3,
            window=4,
            embedding=embedding,
        )
    )
    model = build_model(cfg, kind, features, 5)
    naive = NaivePSRNN.from_model(model)
    assert sum(p.numel() for p in naive.parameters()) == sum(p.numel() for p in model.parameters())
    lengths = torch.tensor([30, 25, 9, 30, 12, 20])  # ragged, one too short for both windows
    x = torch.randint(0, features, (6, 30)) if kind == "categorical" else torch.rand(6, 30, features)
    anchors = sample_anchors(lengths, 3, 4, "stratified", torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    outs = []
    for m in (model, naive):
        logits, aux = m(x, lengths, anchors)
        loss = torch.nn.functional.cross_entropy(logits, y) + aux.mean()
        loss.backward()
        outs.append(
            (
                logits.detach(),
                aux.detach(),
                m.head.weight.grad.clone(),
                next(iter(m.decoders.values())).gru.weight_hh_l0.grad.clone(),
            )
        )
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert float(outs[0][1].min()) > 0  # the aux loss is really there
    # the main GRU's input-hidden gradient is the same through GRUCell steps
    torch.testing.assert_close(model.gru.weight_ih_l0.grad, naive.cell.weight_ih.grad, rtol=1e-4, atol=1e-5)


def test_naive_plain_gru_has_no_aux():
    cfg = C.coerce_run(dict(dataset="mnist", hidden=8, shared=0.0))
    naive = NaivePSRNN.from_model(build_model(cfg, "continuous", 1, 10))
    logits, aux = naive(torch.rand(2, 5, 1), torch.tensor([5, 5]), None)
    assert logits.shape == (2, 10) and aux is None and not naive.has_aux


# --- arithmetic ----------------------------------------------------------------------------


def _timed(median, lo, hi):
    return {"status": "ok", "step_ms": {"median": median, "min": lo, "max": hi, "n": 3}}


def test_ratio_of_medians_and_conservative_range():
    r = speed.ratio(_timed(30.0, 25.0, 40.0), _timed(10.0, 8.0, 12.5))
    assert r == pytest.approx({"median": 3.0, "min": 2.0, "max": 5.0})
    assert speed.ratio({"status": "error: x"}, _timed(1, 1, 1)) is None


def test_ratios_pair_variants_per_shape():
    rows = [
        {"shape": "mnist", "variant": v, **_timed(t, t, t)}
        for v, t in (("gru", 10.0), ("full", 13.0), ("ps50", 11.0), ("naive", 220.0))
    ]
    got = {(r["kind"], r["numerator"]): r["median"] for r in speed.ratios(rows)}
    assert got == pytest.approx(
        {("aux_overhead", "full"): 1.3, ("aux_overhead", "ps50"): 1.1, ("speedup", "naive"): 20.0}
    )


def _result(device, overhead, speedup, prepare=None, snake=None, quick=False):
    return {
        "quick": quick,
        "environment": {"device": device, "cpu_count": 2},
        "ratios": [
            {"shape": "mnist", "numerator": "ps50", "denominator": "gru", "median": overhead},
            {"shape": "mnist", "numerator": "naive", "denominator": "ps50", "median": speedup},
        ],
        "prepare": prepare or [],
        "snakemake": snake,
    }


def _budget(*peaks):
    return {
        "config": "config/paper.yaml",
        "experiments": [
            {"experiment": f"e{i}", "enabled": True, "peak_mb": p, "longest_batch_peak_mb": lp}
            for i, (p, lp) in enumerate(peaks)
        ],
    }


def test_memory_target_is_the_largest_enabled_peak_on_a_gpu_and_fails_on_a_failed_long_batch():
    gpu = {**_result("cuda", 1.1, 25.0), "budget": _budget((900.0, None), (15000.0, 15000.0))}
    t = report.memory_target(gpu)
    assert (t["status"], t["measured"], t["note"]) == ("met", 15000 / 1024, "largest: e1 (config/paper.yaml)")
    gpu["budget"] = _budget((900.0, None), (17000.0, 17000.0))
    assert report.memory_target(gpu)["status"] == "not met"
    gpu["budget"] = _budget((900.0, "error: OutOfMemoryError: CUDA out of memory"))
    t = report.memory_target(gpu)
    assert (t["status"], t["note"]) == ("not measured", "failed: e0")
    cpu = {**_result("cpu", 1.1, 25.0), "budget": _budget((900.0, None))}
    assert report.memory_target(cpu)["status"] == "not measured"


def test_packed_budget_divides_each_small_experiments_hours_by_its_shapes_measured_speedup():
    budget_part = {
        "config": "config/paper.yaml",
        "experiments": [
            {"experiment": "m", "dataset": "mnist", "hidden": 128, "hours": 30.0, "enabled": True},
            {"experiment": "f", "dataset": "fmnist", "hidden": 50, "hours": 10.0, "enabled": True},
            {"experiment": "c", "dataset": "cifar10", "hidden": 1024, "hours": 20.0, "enabled": True},
            {"experiment": "d", "dataset": "dbpedia", "hidden": 128, "hours": 90.0, "enabled": False},
        ],
    }
    packing = [
        {"shape": "mnist", "jobs": 1, "speedup": 1.0, "status": "ok"},
        {"shape": "mnist", "jobs": 4, "speedup": 2.5, "status": "ok"},
        {"shape": "cifar10", "jobs": 4, "speedup": 2.0, "status": "ok"},
        {"shape": "imdb", "jobs": 4, "speedup": 3.0, "status": "ok"},
    ]
    result = {**_result("cuda", 1.1, 25.0), "budget": budget_part, "packing": packing}
    p = report.packed_hours(result)
    # fmnist takes mnist's speed-up, dbpedia imdb's; the 1024-unit model runs alone
    assert p["experiments"] == pytest.approx({"m": 12.0, "f": 4.0, "c": 20.0, "d": 30.0})
    assert (p["jobs"], p["total_hours"], p["disabled_hours"]) == (4, pytest.approx(36.0), pytest.approx(30.0))
    t = report.budget_target(result)
    assert (t["status"], t["measured"]) == ("met", pytest.approx(36.0))


def test_targets_met_not_met_and_not_measured():
    imdb = {
        "dataset": "imdb",
        "items": 50_000,
        "prepare_s": 61.0,
        "prepared_mb": 64.0,
        "dense_onehot_gb": 15.2,
    }
    snake = {"status": "ok", "seconds": 3.2, "paper": True}
    t = {x["target"].split(",")[0]: x for x in report.targets(_result("cuda", 1.15, 25.0, [imdb], snake))}
    status = {k: v["status"] for k, v in t.items()}
    assert status == {
        "private/shared 50 % step time / plain GRU step time": "met",
        "vectorised speed-up over the naive loop (GPU)": "met",
        "vectorised speed-up over the naive loop (CPU)": "not measured",
        "IMDB preparation of 50K reviews": "not met",  # 61 s > 60 s
        "IMDB prepared size on disk": "met",
        "snakemake -n of the paper config": "met",
        "peak GPU memory of every experiment (longest text batch under max_tokens)": "not measured",
        "GPU hours of config/paper.yaml": "not measured",
        "relreg runs per CPU-hour": "not measured",
    }
    cpu = {x["target"]: x["status"] for x in report.targets(_result("cpu", 1.6, 4.0))}
    assert list(cpu.values())[:3] == ["not met", "not measured", "not met"]
    quick = report.targets(_result("cpu", 1.0, 50.0, quick=True))
    assert all(x["status"] == "not measured" for x in quick)


def test_linear_extrapolation_in_sequence_length():
    assert budget.extrapolate([(100, 1.5), (200, 2.5)], 784) == pytest.approx(1.5 + 684 * 0.01)
    assert budget.extrapolate([(784, 3.0)], 784) == 3.0
    assert budget.extrapolate([(100, 2.0), (200, 1.8)], 784) == 1.8  # noise, not a speed-up
    cpu = budget.budget_lengths(1024, 64, 10, torch.device("cpu"), quick=False)
    assert cpu == [139, 556]  # 2 * 64 + 10 + 1: the shortest length anchors fit in
    assert budget.budget_lengths(1024, 0, 0, torch.device("cpu"), quick=False) == [128, 512]
    assert budget.budget_lengths(1024, 64, 10, torch.device("cuda"), quick=False) == [1024]
    assert budget.budget_lengths(100, 64, 10, torch.device("cpu"), quick=False) == [100]


def test_padded_length_is_the_mean_batch_maximum_and_bucketing_cuts_it():
    rng = np.random.default_rng(0)
    assert budget.padded_length(np.full(1000, 700), 128, 0, 20_000) == 700
    assert budget.padded_length(np.full(1000, 700), 128, 50, 20_000) == 700
    lengths = fixtures.imdb_lengths(100_000, rng)
    kept = lengths[lengths >= 500]
    assert 0.86 < len(kept) / len(lengths) < 0.92  # paper: 22.2K of 25K training reviews kept
    assert 1350 < kept.mean() < 1510  # paper Table 1: mean length 1430
    padded = budget.padded_length(kept, 128, 0, 20_000)
    assert 4500 < padded < 7000  # 5,980: a random batch of 128 runs as long as its longest
    bucketed = budget.padded_length(kept, 128, 50, 20_000)  # config/paper.yaml's IMDB batches
    assert kept.mean() < bucketed < 1.25 * kept.mean()  # 1,665 against a mean of 1,427
    assert padded / bucketed > 3.3  # 3.6x fewer GRU steps per epoch


def _suite():
    return C.validate_suite(
        {
            "name": "t",
            "seeds": [0, 1],
            "datasets": {"mnist": {"prepare": {"valid_size": 10_000}}},
            "defaults": {"batch_size": 100, "max_epochs": 10},
            "experiments": {
                "a": {"dataset": "mnist", "hidden": 8, "shared": 0.0, "grid": {"lr": [0.1, 0.2, 0.3]}},
                "b": {
                    "dataset": "mnist",
                    "hidden": 8,
                    "shared": 0.5,
                    "tasks": ["rec"],
                    "anchors": 2,
                    "window": 10,
                    "max_epochs": 20,
                },
            },
        }
    )


def test_budget_hours_from_step_times(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no prepared data here: sizes from the official counts
    calls = []

    def fake(spec, isolate):
        calls.append(spec)
        ms = 200.0 if spec.shared else 100.0
        return {"status": "ok", "step_ms": {"min": ms}, "eval_batch_ms": 50.0, "peak_mem_mb": ms * 10}

    monkeypatch.setattr(budget, "run_measurement", fake)
    b = budget.bench_budget(
        _suite(), torch.device("cuda"), quick=False, batch_cap=None, repeats=(1, 1), log=lambda m: None
    )
    assert len(calls) == 2  # one shape per experiment: the lr grid does not change the step
    assert all(c.seq_len == 784 for c in calls)  # GPU: timed at the full length
    e = {x["experiment"]: x for x in b["experiments"]}
    epoch_a = 500 * 0.1 + 100 * 0.05  # 50K / 100 steps + 10K / 100 validation batches
    assert e["a"]["epoch_s"] == pytest.approx(epoch_a)
    # 3 search runs + 1 final: the first seed's final run is its search run (train --reuse)
    assert e["a"]["hours"] == pytest.approx((3 + 1) * 10 * epoch_a / 3600) and e["a"]["runs"] == 4
    epoch_b = 500 * 0.2 + 100 * 0.05
    assert e["b"]["hours"] == pytest.approx(2 * 20 * epoch_b / 3600)  # no grid: seeds only
    assert b["total_hours"] == pytest.approx(e["a"]["hours"] + e["b"]["hours"])
    # images: every batch is as long as the timed one, so its peak is the experiment's
    assert (e["a"]["peak_mb"], e["b"]["peak_mb"]) == (1000.0, 2000.0)
    assert e["a"]["longest_batch_peak_mb"] is None


def test_budget_measures_the_longest_text_batch_under_max_tokens_on_a_gpu(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    calls = []

    def fake(spec, isolate):  # memory grows with the padded steps of a piece
        calls.append(spec)
        piece = min(spec.batch * spec.seq_len, spec.max_tokens or spec.batch * spec.seq_len)
        return {"status": "ok", "step_ms": {"min": 1.0}, "eval_batch_ms": 1.0, "peak_mem_mb": piece / 1000}

    monkeypatch.setattr(budget, "run_measurement", fake)
    suite = C.validate_suite(
        {
            "name": "t",
            "seeds": [0],
            "datasets": {"imdb": {"enabled": True}},
            "defaults": {"batch_size": 128, "bucket": 50, "max_tokens": 400_000, "max_epochs": 1},
            "experiments": {"t": {"dataset": "imdb", "hidden": 8}},
        }
    )
    e = budget.bench_budget(suite, torch.device("cuda"), False, None, (1, 1), lambda m: None)["experiments"][
        0
    ]
    timed, longest = calls
    assert timed.seq_len == e["seq_len"] < longest.seq_len == e["longest"]  # the mean padded, the longest
    assert longest.max_tokens == 400_000 and longest.batch == 128
    assert e["longest_batch_peak_mb"] == 400.0 and e["peak_mb"] == 400.0  # bounded by the budget
    calls.clear()
    budget.bench_budget(suite, torch.device("cpu"), False, 32, (1, 1), lambda m: None)
    assert all(c.seq_len < 1000 for c in calls)  # no 13K-step batch on a CPU


def test_budget_on_cpu_extrapolates_and_scales_batch(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)

    def fake(spec, isolate):  # 1 ms per step of sequence at batch 25
        t = spec.seq_len
        return {"status": "ok", "step_ms": {"min": t * 1.0}, "eval_batch_ms": t * 0.5, "peak_mem_mb": 1.0}

    monkeypatch.setattr(budget, "run_measurement", fake)
    b = budget.bench_budget(
        _suite(), torch.device("cpu"), quick=False, batch_cap=25, repeats=(1, 1), log=lambda m: None
    )
    a = next(x for x in b["experiments"] if x["experiment"] == "a")
    assert a["timed_lengths"] == [128, 512] and a["timed_batch"] == 25
    assert a["step_ms"] == pytest.approx(784 * 4)  # extrapolated to T = 784, x 100 / 25
    assert a["epoch_s"] == pytest.approx(500 * 3.136 + 100 * 1.568)


def test_budget_with_one_cpu_thread_uses_process_cpu_time(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)

    def fake(spec, isolate):  # wall clock inflated 3x by other processes
        return {
            "status": "ok",
            "step_ms": {"min": 300.0},
            "step_cpu_ms": {"min": 100.0},
            "eval_batch_ms": 10.0,
            "peak_mem_mb": 1.0,
        }

    monkeypatch.setattr(budget, "run_measurement", fake)
    kw = dict(device=torch.device("cpu"), quick=False, batch_cap=None, repeats=(1, 1), log=lambda m: None)
    one = budget.bench_budget(_suite(), threads=1, **kw)
    two = budget.bench_budget(_suite(), threads=2, **kw)
    assert one["experiments"][0]["step_ms"] == pytest.approx(100.0)
    assert two["experiments"][0]["step_ms"] == pytest.approx(300.0)
    assert "process CPU time" in one["method"] and "wall clock" in two["method"]


# --- the budget from stored times (--times-from) -------------------------------------------


def _stored(tmp_path, suite, monkeypatch, legacy=False):
    """A bench result of `suite`'s budget with fake GPU times (as `bench` writes it), its path."""

    def fake(spec, isolate):  # the aux model's step is slower; validation batches are cheap
        ms = 37.0 if spec.shared else 11.0
        return {"status": "ok", "step_ms": {"min": ms}, "eval_batch_ms": ms / 4, "peak_mem_mb": 5.0}

    monkeypatch.setattr(budget, "run_measurement", fake)
    b = budget.bench_budget(suite, torch.device("cuda"), False, None, (1, 1), lambda m: None)
    b.update(config="config/t.yaml", unit="GPU hours", device_name="NVIDIA H100 80GB HBM3")
    if legacy:  # as written before the budget recorded its shapes
        del b["shapes"]
        for e in b["experiments"]:
            del e["eval_batch_ms"]
    result = {
        "schema": report.SCHEMA,
        "quick": False,
        "command": "python -m psrnn bench --device cuda --only budget --config config/t.yaml",
        "sections": ["budget"],
        "environment": {
            "device": "cuda",
            "device_slug": "cuda-nvidia-h100-80gb-hbm3",
            "device_name": "NVIDIA H100 80GB HBM3",
            "torch_version": "2.11.0+cu130",
            "cuda_version": "13.0",
            "cudnn_version": 91900,
            "psrnn_version": "0.1.0",
            "python": "3.12.3",
            "platform": "Linux",
            "cpu_model": "Xeon",
            "cpu_count": 16,
            "torch_threads": 4,
            "gpu_memory_gb": 79.2,
        },
        "measured_at": None if legacy else {"date": "2026-11-23T09:00:00+00:00", "commit": "abc1234"},
        "notes": ["fake H100 times"],
        "settings": {},
        "budget": b,
    }
    path = tmp_path / "stored.json"
    path.write_text(json.dumps(result))
    return path, result


def _hours_by_name(b):
    return {e["experiment"]: e["hours"] for e in b["experiments"]}


@pytest.mark.parametrize("legacy", [False, True])
def test_budget_from_stored_times_of_the_measured_config_is_the_stored_budget(monkeypatch, tmp_path, legacy):
    monkeypatch.chdir(tmp_path)
    path, stored = _stored(tmp_path, _suite(), monkeypatch, legacy)
    monkeypatch.setattr(budget, "run_measurement", None)  # nothing is measured from here on
    b = stored_budget.budget_from_file(_suite(), path, json.loads(path.read_text()))
    want = _hours_by_name(stored["budget"])
    assert _hours_by_name(b) == pytest.approx(want, rel=1e-12) and len(want) == 2
    assert b["total_hours"] == pytest.approx(stored["budget"]["total_hours"], rel=1e-12)
    src = b["times_from"]
    assert src["file"] == str(path) and src["device_name"] == "NVIDIA H100 80GB HBM3"
    assert ("predates recorded shapes" in src["match"]) == legacy
    assert str(path) in b["method"] and "NVIDIA H100 80GB HBM3" in b["method"]
    assert ("2026-11-23T09:00:00+00:00 at commit abc1234" in b["method"]) != legacy


@pytest.mark.parametrize("legacy", [False, True])
def test_budget_from_stored_times_with_a_three_point_grid_reuses_the_selected_search_run(
    monkeypatch, tmp_path, legacy
):
    monkeypatch.chdir(tmp_path)
    measured = _suite()
    del measured["experiments"]["a"]["grid"]  # measured with one run per experiment
    path, stored = _stored(tmp_path, measured, monkeypatch, legacy)
    data = json.loads(path.read_text())
    for seeds in ([0], [0, 1, 2]):
        searched = _suite()  # a: lr grid of 3 points; b: none
        searched["seeds"] = seeds
        b = stored_budget.budget_from_file(searched, path, data)
        # by hand from the stored times: 50K/100 steps + 10K/100 validation batches per epoch
        e = {x["experiment"]: x for x in stored["budget"]["experiments"]}
        step_a = e["a"]["step_ms"] / 1e3
        eval_a = (e["a"]["epoch_s"] - 500 * step_a) / 100  # = 11 / 4 ms
        assert eval_a == pytest.approx(11 / 4 / 1e3)
        epoch_a = 500 * step_a + 100 * eval_a
        # 3 search runs on the first seed; its final run is the selected one (not trained
        # again); each further seed one final run; 10 epochs each
        runs_a = 3 + len(seeds) - 1
        got = {x["experiment"]: x for x in b["experiments"]}
        assert got["a"]["runs"] == runs_a and got["a"]["grid_points"] == 3
        assert got["a"]["hours"] == pytest.approx(runs_a * 10 * epoch_a / 3600, rel=1e-12)
        epoch_b = 500 * 0.037 + 100 * 0.037 / 4
        assert got["b"]["hours"] == pytest.approx(len(seeds) * 20 * epoch_b / 3600, rel=1e-12)
        assert b["total_hours"] == pytest.approx(got["a"]["hours"] + got["b"]["hours"])


@pytest.mark.parametrize("legacy", [False, True])
def test_budget_from_stored_times_names_each_experiment_whose_shapes_are_missing(
    monkeypatch, tmp_path, legacy
):
    monkeypatch.chdir(tmp_path)
    path, _ = _stored(tmp_path, _suite(), monkeypatch, legacy)
    other = _suite()
    other["experiments"]["b"]["hidden"] = 9
    other["experiments"]["c"] = {**other["experiments"]["a"], "dataset": "mnist", "hidden": 4}
    with pytest.raises(UserError) as err:
        stored_budget.budget_from_file(other, path, json.loads(path.read_text()))
    msg = str(err.value)
    assert "\n" not in msg and "2 experiment(s)" in msg
    assert "b (hidden 9 here, 8 there" in msg and "c (" in msg and " a (" not in msg


def test_bench_times_from_writes_the_recomputed_budget_and_names_its_source(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    path, stored = _stored(tmp_path, _suite(), monkeypatch)
    cfg = tmp_path / "t.yaml"
    cfg.write_text(json.dumps(_suite()))  # YAML reads JSON
    args = ["bench", "--only", "budget", "--config", str(cfg), "--times-from", str(path)]
    assert main([*args, "--out", str(tmp_path / "out"), "--name", "t-recomputed"]) == 0
    r = json.loads((tmp_path / "out" / "t-recomputed.json").read_text())
    assert r["environment"] == stored["environment"] and r["sections"] == ["budget"]
    assert r["budget"]["total_hours"] == pytest.approx(stored["budget"]["total_hours"], rel=1e-12)
    assert r["recomputed"]["from"] == str(path) and "--times-from" in r["command"]
    md = (tmp_path / "out" / "t-recomputed.md").read_text()
    assert "**Nothing was measured for this file.**" in md and f"`{path}`" in md
    assert "2026-11-23T09:00:00+00:00 at commit abc1234" in md
    capsys.readouterr()
    # a missing shape, a device, another section, its own file as output: one line each, no traceback
    other = _suite()
    other["experiments"]["b"]["anchors"] = 3
    cfg.write_text(json.dumps(other))
    for extra in (
        [],
        ["--device", "cuda"],
        ["--only", "budget,train"],
        ["--out", str(tmp_path), "--name", "stored"],
    ):
        if extra and extra[0] == "--only":
            cmd = [*args[:1], *args[3:], *extra]
        else:
            cmd = [*args, *extra]
        if extra and extra[0] == "--out":
            cfg.write_text(json.dumps(_suite()))
        assert main(cmd) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert json.loads(path.read_text()) == stored  # not overwritten


def test_quick_yaml_budget_from_the_stored_h100_quick_budget(monkeypatch, tmp_path):
    """The committed H100 file measured config/quick.yaml's rows without a grid: recomputed
    for those rows it gives its own hours; with a 3-point lr grid and one seed, 3 x each."""
    monkeypatch.chdir(tmp_path)  # no prepared data: sizes and lengths as the file had them
    path = C.ROOT / "results" / "bench" / "cuda-nvidia-h100-80gb-hbm3-quick-budget.json"
    data = json.loads(path.read_text())
    stored = {e["experiment"]: e for e in data["budget"]["experiments"]}
    suite = C.load_suite(C.ROOT / "config" / "quick.yaml")
    table2 = [n for n, e in suite["experiments"].items() if stored.get(n, {}).get("enabled")]
    assert len(table2) == 13
    as_measured = {**suite, "seeds": [0], "defaults": {**suite["defaults"], "max_epochs": 70}}
    as_measured["experiments"] = {
        n: {k: v for k, v in e.items() if k != "grid"} if n in table2 else e
        for n, e in suite["experiments"].items()
    }
    b = stored_budget.budget_from_file(as_measured, path, data)
    assert b["total_hours"] == pytest.approx(data["budget"]["total_hours"], rel=1e-12)
    searched = {**as_measured, "experiments": {**as_measured["experiments"]}}
    for n in table2:
        searched["experiments"][n] = {**searched["experiments"][n], "grid": {"lr": [0.1, 0.3, 1.0]}}
    b = stored_budget.budget_from_file(searched, path, data)
    got = {e["experiment"]: e for e in b["experiments"]}
    for n in table2:  # every epoch as the stored one: 3 search runs, the selected one reused
        assert got[n]["runs"] == 3
        assert got[n]["hours"] == pytest.approx(3 * 70 * stored[n]["epoch_s"] / 3600, rel=1e-12)
    assert b["total_hours"] == pytest.approx(3 * data["budget"]["total_hours"], rel=1e-12)


# --- memory --------------------------------------------------------------------------------


def test_cpu_peak_memory_sees_a_transient_allocation():
    probe = measure.PeakMemory(torch.device("cpu"))
    probe.start()
    block = torch.ones(48 * 2**20 // 4)  # 48 MB, written, then freed
    del block
    assert 40 * 2**20 < probe.peak() < 400 * 2**20


# --- generated archives through the real prepare -------------------------------------------


def test_generated_archives_prepare_like_the_real_datasets(tmp_path):
    from psrnn.studies.private_shared.data.prepare import prepare

    gen = fixtures.write_imdb_like(tmp_path / "imdb" / "aclImdb_v1.tar.gz", 400)
    assert gen["reviews"] == 800 and 1150 < gen["mean_chars"] < 1500
    m = prepare("imdb", tmp_path / "imdb", tmp_path / "imdb_out", {"train_size": 300})
    assert m["features"] == 60  # enough distinct characters for the paper's alphabet
    assert m["length"]["train"]["min"] >= 500
    assert 0.84 < m["filtered"]["train"]["kept"] / 400 < 0.95
    assert m["class_balance"]["test"][0] > 100 and m["class_balance"]["test"][1] > 100

    fixtures.write_idx_like(tmp_path / "mnist", 300, 50)
    m = prepare("mnist", tmp_path / "mnist", tmp_path / "mnist_out", {"valid_size": 50})
    assert m["counts"] == {"train": 250, "valid": 50, "test": 50}
    x = torch.load(tmp_path / "mnist_out" / "train.pt", weights_only=True)["x"]
    assert x.shape == (250, 784, 1) and 0.05 < float((x > 0).float().mean()) < 0.5


# --- the command ---------------------------------------------------------------------------


def test_quick_bench_writes_well_formed_json_and_markdown(tmp_path, capsys):
    out = tmp_path / "bench"
    rc = main(
        [
            "bench",
            "--quick",
            "--only",
            "train,options,profile",
            "--shapes",
            "mnist",
            "--isolate",
            "off",
            "--repeats",
            "1",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    env = machine.bench_environment(torch.device("cpu"))
    [json_path] = out.glob("*.json")
    assert json_path.name == f"{env['device_slug']}.json" and env["device_slug"].startswith("cpu-")
    r = json.loads(json_path.read_text())
    assert r["schema"] == "psrnn-bench/1" and r["quick"] is True
    for key in (
        "device",
        "device_name",
        "torch_version",
        "cuda_version",
        "cudnn_version",
        "platform",
        "cpu_count",
    ):
        assert key in r["environment"]
    assert [t["variant"] for t in r["train"]] == ["gru", "full", "ps50", "naive"]
    for t in r["train"]:
        assert t["status"] == "ok" and t["seq_len"] == measure.QUICK_LEN and t["batch"] == 16
        s = t["step_ms"]
        assert s["n"] == 1 and 0 < s["min"] <= s["median"] <= s["max"]
        assert t["samples_per_s"] == pytest.approx(16 / (s["median"] / 1e3))
        assert t["step_cpu_ms"]["median"] > 0
        assert isinstance(t["peak_mem_mb"], float) and isinstance(t["params"], int)
    params = {t["variant"]: t["params"] for t in r["train"]}
    assert params["naive"] == params["ps50"] > params["gru"] and params["full"] > params["ps50"]
    assert {(x["kind"], x["numerator"]) for x in r["ratios"]} == {
        ("aux_overhead", "full"),
        ("aux_overhead", "ps50"),
        ("speedup", "naive"),
    }
    options = {(o["option"], str(o["value"]), o["variant"]): o["status"] for o in r["options"]}
    assert options[("amp", "bf16", "ps50")] == "ok"  # CPU autocast: the GPU's code path runs here
    assert options[("batch", "8", "ps50")] == "ok"
    assert len(r["targets"]) == 9 and all(t["status"] == "not measured" for t in r["targets"])
    # profile: counted per step on the CPU (no device kernels); the aux models run more ops
    prof = {p["variant"]: p for p in r["profile"]}
    assert list(prof) == ["gru", "full", "ps50"] and all(p["status"] == "ok" for p in prof.values())
    assert prof["gru"]["per_step"]["device_kernels"] == 0
    assert 0 < prof["gru"]["per_step"]["aten_ops"] < prof["ps50"]["per_step"]["aten_ops"]
    assert "## Profile" in json_path.with_suffix(".md").read_text()

    md = json_path.with_suffix(".md").read_text()
    assert (
        "--quick" in md
        and "| shape | model | T x F | batch | step ms | CPU ms | samples/s | peak MB | params |" in md
    )
    rows = [line for line in md.splitlines() if line.startswith("| mnist | ")]
    assert len(rows) == 4 + 3 + 3  # one per model, one per ratio, one per profiled model
    assert sum("naive private/shared" in line for line in md.splitlines()) == 1
    assert math.isfinite(r["total_s"])


def test_the_profile_section_prints_no_profiler_markers(tmp_path):
    """torch.profiler's kineto writes "USDT: ... profiler_start/stop" on stderr around every
    measurement; the profile section silences them (bench.profile.KINETO_QUIET), in a fresh
    process because kineto reads its level once."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    args = ["--quick", "--only", "profile", "--shapes", "mnist", "--isolate", "off", "--repeats", "1"]
    res = subprocess.run(
        [sys.executable, "-m", "psrnn", "bench", *args, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "profile mnist" in res.stdout and "USDT" not in res.stderr and "profiler_st" not in res.stderr


def test_unknown_section_or_shape_is_a_one_line_error(capsys):
    assert main(["bench", "--only", "train,warp"]) == 2
    assert "unknown section warp" in capsys.readouterr().err
    assert main(["bench", "--shapes", "svhn"]) == 2


def _part(sections, quick=False, **data):
    return {
        "schema": report.SCHEMA,
        "quick": quick,
        "sections": sections,
        "command": f"bench {sections}",
        "notes": [],
        "load_average": {"start": [1.0], "end": [2.0]},
        "total_s": 10.0,
        "environment": {"device": "cpu", "cpu_count": 2},
        **data,
    }


def test_merge_keeps_sections_not_rerun_and_redoes_targets():
    imdb = {
        "dataset": "imdb",
        "items": 50_000,
        "prepare_s": 20.0,
        "prepared_mb": 64.0,
        "dense_onehot_gb": 15.2,
    }
    old = _part(
        ["train", "prepare"],
        train=[{"variant": "old"}],
        ratios=[],
        settings={"batch": 128},
        memory_method="m",
        prepare=[imdb],
    )
    new = _part(
        ["train", "budget"],
        train=[{"variant": "new"}],
        ratios=[],
        settings={"batch": 64},
        memory_method="m",
        budget={"total_hours": 1.0},
    )
    out = report.merge(old, new)
    assert out["sections"] == ["train", "prepare", "budget"]
    assert out["train"] == [{"variant": "new"}] and out["settings"] == {"batch": 64}
    assert out["prepare"] == [imdb] and out["budget"] == {"total_hours": 1.0}
    assert out["total_s"] == 20.0 and len(out["load_average"]["earlier_parts"]) == 1
    assert {t["target"]: t["status"] for t in out["targets"]}[
        "IMDB preparation of 50K reviews, time"
    ] == "met"
    with pytest.raises(UserError):
        report.merge(_part(["train"], quick=True), new)


def test_a_failing_section_is_recorded_and_the_rest_still_written(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no torchvision here")

    monkeypatch.setattr(bench, "bench_prepare", broken)
    assert main(["bench", "--quick", "--only", "prepare", "--out", str(tmp_path)]) == 0
    [path] = tmp_path.glob("*.json")
    r = json.loads(path.read_text())
    assert r["errors"] == {"prepare": "RuntimeError: no torchvision here"} and "prepare" not in r
    assert (
        "**Section prepare failed:** RuntimeError: no torchvision here" in path.with_suffix(".md").read_text()
    )
    assert {t["target"]: t["status"] for t in r["targets"]}["IMDB prepared size on disk"] == "not measured"


def test_budget_sizes_without_prepare_fall_back_to_the_papers_table1(monkeypatch):
    assert budget.split_sizes("cifar10", {"valid_size": 5000}, None)[:2] == (45_000, 5_000)
    manifest = {"counts": {"train": 7, "valid": 3}}
    assert budget.split_sizes("mnist", {}, manifest) == (7, 3, "prepared manifest")
    monkeypatch.setitem(
        sys.modules, "psrnn.studies.private_shared.data.prepare", None
    )  # e.g. no torchvision on a GPU box
    train, valid, source = budget.split_sizes("cifar10", {"valid_size": 5000}, None)
    assert (train, valid) == (45_000, 15_000) and source.startswith("paper Table 1")
    lengths, _ = budget.text_lengths("imdb", {}, None, np.random.default_rng(0))
    assert lengths.min() >= 500


def test_packing_speedup_is_all_jobs_throughput_over_one_jobs(monkeypatch):
    calls = []

    def fake(specs):  # 2 jobs at 1.5x the step time each: 1.33x the throughput
        calls.append(specs)
        return [
            {"status": "ok", "step_ms": {"median": 10.0 * (1 + 0.5 * (len(specs) - 1))}, "peak_mem_mb": 5.0}
        ] * len(specs)

    monkeypatch.setattr(speed, "run_together", fake)
    rows = speed.bench_packing(
        [measure.SHAPES["mnist"]],
        speed.QUICK,
        torch.device("cpu"),
        lambda sh: 48,
        lambda m: None,
        jobs=(1, 2),
    )
    assert [r["speedup"] for r in rows] == pytest.approx([1.0, 2 / 1.5])
    assert [s.seed for s in calls[1]] == [0, 1] and calls[1][0].repeats >= 30  # distinct jobs, long enough


def test_jobs_run_together_start_their_timed_steps_at_once():
    spec = speed.make_spec(measure.SHAPES["mnist"], "gru", speed.QUICK, torch.device("cpu"), 16)
    a, b = measure.run_together([spec, dataclasses.replace(spec, seed=1)])
    assert a["status"] == b["status"] == "ok" and a["params"] == b["params"]


def test_aux_target_names_the_device_busy_floor_from_the_profile():
    result = _result("cuda", 2.0, 25.0)
    result["profile"] = [
        {"shape": "mnist", "variant": v, "status": "ok", "per_step": {"device_busy_ms": ms}}
        for v, ms in (("gru", 6.4), ("ps50", 12.2))
    ]
    t = report.targets(result)[0]
    assert t["status"] == "not met"
    assert t["note"] == "device busy time 12.2 / 6.4 ms = 1.91x (profile: the floor)"


def test_bench_refuses_to_rewrite_a_committed_result_before_it_measures(capsys):
    """`bench --only budget` into a name git holds (a committed measurement the docs cite)
    stops before any section runs, in one line naming the files, where else to write and
    --overwrite; measured numbers never replace committed ones unasked."""
    from psrnn.cli import main

    committed = C.ROOT / "results" / "bench" / "cpu-amd-epyc.json"
    assert committed.is_file()
    before = committed.read_bytes()
    assert main(["bench", "--only", "budget", "--name", "cpu-amd-epyc"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "psrnn bench: error: results/bench/cpu-amd-epyc.json, results/bench/cpu-amd-epyc.md: "
        "committed result(s) this command would rewrite; pick --name or --out, "
        "or pass --overwrite to remake them"
    )
    assert committed.read_bytes() == before
