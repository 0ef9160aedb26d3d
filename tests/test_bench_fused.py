"""The bench's fused section: it measures the thesis' shapes, extrapolates a run's time to
the config's epochs, judges the 8x target on every kind, and `bench --only fused --quick`
writes its table. Speeds are not asserted (psrnn.bench.fused)."""

import json

import pytest

from psrnn import config as C
from psrnn.bench import fused, goals, report
from psrnn.cli import main

FULL = C.load_yaml(C.ROOT / "config" / "relreg-full.yaml")


@pytest.mark.parametrize(
    "kind,runs", [("lstm", 10), ("proto", 250), ("rmc", 10), ("transformer", 10)], ids=lambda v: str(v)
)
def test_each_kind_measures_one_thesis_shape_of_the_full_grid(kind, runs):
    experiment, shape = fused.KINDS[kind]
    points = fused.shape_points(FULL, experiment, shape)
    assert len(points) == runs  # lr x lambdas (x noise) at that shape: the group of a grid-search job
    suite = C.validate_suite(fused.bench_suite(FULL, kind, points[:3], 2, {"train_size": 64}))
    [(name, exp)] = suite["experiments"].items()
    assert name == f"bench_{kind}" and len(C.grid_points(exp)) == 3
    run = C.resolve_run(suite, name, 0, point=C.grid_points(exp)[0][0])
    assert (run.model, run.epochs, run.train_size) == (kind, 2, 64)
    assert all(getattr(run, k) == v for k, v in shape.items())


def test_a_runs_time_is_extrapolated_to_the_configs_epochs_from_two_epoch_counts():
    measured = [
        {"epochs": 1, "alone": {"wall_s": 12.0}},
        {"epochs": 3, "alone": {"wall_s": 16.0}},
    ]
    assert fused.at_epochs(measured, "alone", "wall_s", 30) == pytest.approx(16.0 + 2.0 * 27)
    assert fused.at_epochs(measured[:1], "alone", "wall_s", 30) == 12.0  # one count: as measured
    noisy = [{"epochs": 1, "alone": {"wall_s": 12.0}}, {"epochs": 3, "alone": {"wall_s": 11.0}}]
    assert fused.at_epochs(noisy, "alone", "wall_s", 30) == 11.0  # no negative time per epoch


def _kind(kind, cpu, wall):
    return {"kind": kind, "status": "ok", "ratio": {"cpu_s": cpu, "wall_s": wall}}


def test_the_target_is_the_worst_kind_and_needs_all_four():
    result = {"quick": False, "fused": {"kinds": [_kind(k, 20.0, 18.0) for k in fused.KINDS]}}
    t = goals.fused_target(result)
    assert (t["status"], t["measured"]) == ("met", 20.0)
    result["fused"]["kinds"][2] = _kind("rmc", 1.4, 1.3)
    t = goals.fused_target(result)
    assert (t["status"], t["measured"]) == ("not met", 1.4) and "rmc 1.4x (wall 1.3x)" in t["note"]
    result["fused"]["kinds"][3] = {"kind": "transformer", "status": "error: exit 1"}
    assert goals.fused_target(result)["status"] == "not measured"
    assert goals.fused_target({"quick": False})["note"] == "fused section not run"


def test_quick_fused_section_writes_its_table(tmp_path):
    out = tmp_path / "bench"
    assert main(["bench", "--quick", "--only", "fused", "--out", str(out)]) == 0
    [json_path] = out.glob("*.json")
    r = json.loads(json_path.read_text())
    assert r["sections"] == ["fused"] and r["fused"]["config"] == fused.FUSED_CONFIG
    [row] = r["fused"]["kinds"]
    assert row["status"] == "ok" and (row["kind"], row["fused_runs"], row["shape_runs"]) == ("lstm", 2, 10)
    assert [m["epochs"] for m in row["measured"]] == [1] and row["at_epochs"] == 1
    m = row["measured"][0]
    assert 0 < m["fused_group_s"]["cpu_s"] and m["fused"]["wall_s"] == m["fused_group_s"]["wall_s"] / 2
    hour = row["runs_per_hour"]
    assert hour["alone"]["cpu_s"] == pytest.approx(3600 / m["alone"]["cpu_s"])
    assert row["ratio"]["wall_s"] == pytest.approx(hour["fused"]["wall_s"] / hour["alone"]["wall_s"])
    assert report.targets(r)[-2]["note"] == "--quick settings"
    # the run trained both ways, compared: one epoch of the LSTM, the same numbers
    assert m["same_numbers"] == {
        "compared": 1,
        "test_identical": 1,
        "best_epoch_identical": 1,
        "max_test_acc_change": 0.0,
    }
    md = json_path.with_suffix(".md").read_text()
    assert "## Fused runs" in md and "| lstm | hidden 8 | 2 of 10 |" in md
    assert "| 1 of 1 (best epoch 1); up to 0.00 pp |" in md
