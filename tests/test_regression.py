"""The regression check (psrnn.engine.regression, `python -m psrnn check`): run ids, exact and
tolerant comparison, missing/new/unfinished runs, --update then pass then fail."""

import json

import yaml
from suites import TINY, write_tiny

from psrnn import config as C
from psrnn.cli import main
from psrnn.engine import regression
from psrnn.registry import STUDIES

# --- check -------------------------------------------------------------------------------------

KEYS = STUDIES["private_shared"].regression_keys


def fake_metrics(i: int) -> dict:
    return {
        "test_acc": 0.5 + i / 100,
        "best_valid_acc": 0.6,
        "best_epoch": 1,
        "epochs_run": 1,
        "test_main_loss": 1.25,
        "test_aux_loss": 0.0,
        "valid_main_loss": 1.5,
        "valid_aux_loss": 0.0,
        "train_main_loss": 2.0,
        "train_aux_loss": 0.0,
        "params": 100,
        "params_main": 80,
        "params_head": 20,
        "params_aux": 0,
        "device": "cpu",
    }


def test_run_ids_cover_search_and_final_runs():
    cfg = C.validate_suite(yaml.safe_load(yaml.safe_dump(TINY)))
    assert regression.run_ids(cfg) == [
        "search/ps/lr-0.1",
        "search/ps/lr-0.01",
        "runs/base/seed0",
        "runs/base/seed1",
        "runs/ps/seed0",
        "runs/ps/seed1",
    ]


def test_compare_exact_and_with_tolerance():
    exp = {"runs/a/seed0": fake_metrics(0)}
    off = {**fake_metrics(0), "test_acc": 0.52, "test_main_loss": 1.25 * 1.01}
    assert regression.compare(exp, {"runs/a/seed0": off}, exact=True, keys=KEYS) == [
        "runs/a/seed0 test_acc: expected 0.5, got 0.52",
        f"runs/a/seed0 test_main_loss: expected 1.25, got {1.25 * 1.01!r}",
    ]
    assert regression.compare(exp, {"runs/a/seed0": off}, exact=False, keys=KEYS) == []
    far = {**off, "test_acc": 0.56, "test_main_loss": 1.4, "params_aux": 1}
    assert regression.compare(exp, {"runs/a/seed0": far}, exact=False, keys=KEYS) == [
        "runs/a/seed0 test_acc: expected 0.5, got 0.56",
        "runs/a/seed0 test_main_loss: expected 1.25, got 1.4",
        "runs/a/seed0 params_aux: expected 0, got 1",
    ]  # counts: exact everywhere


def test_compare_names_missing_new_and_unfinished_runs():
    exp = {"runs/a/seed0": fake_metrics(0), "runs/gone/seed0": fake_metrics(1)}
    got = {"runs/a/seed0": None, "runs/new/seed0": fake_metrics(2)}
    assert regression.compare(exp, got, exact=True, keys=KEYS) == [
        "runs/a/seed0: missing (no metrics.json: the run has not finished)",
        "runs/gone/seed0: in the expected file but not in the config",
        "runs/new/seed0: not in the expected file (new run? rerun with --update)",
    ]


def test_check_command_update_then_pass_then_fail(tmp_path, monkeypatch, capsys):
    suite = write_tiny(tmp_path)
    monkeypatch.chdir(tmp_path)
    cfg = C.load_suite(suite)
    for i, rid in enumerate(regression.run_ids(cfg)):
        path = tmp_path / "results" / "tiny" / rid / "metrics.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(fake_metrics(i)))
    expected = tmp_path / "expected.json"
    args = ["check", "--config", str(suite), "--expected", str(expected)]
    assert main(args) == 2  # no expected file yet
    assert "--update" in capsys.readouterr().err
    assert main([*args, "--update"]) == 0
    rec = json.loads(expected.read_text())
    assert rec["platform"]["device"] == "cpu" and len(rec["runs"]) == 6
    capsys.readouterr()
    assert main(args) == 0
    assert "exact (same platform)" in capsys.readouterr().out
    # one changed number -> exit 1, one line naming run, key, expected and got
    path = tmp_path / "results/tiny/runs/ps/seed1/metrics.json"
    path.write_text(json.dumps({**fake_metrics(5), "best_epoch": 2}))
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "runs/ps/seed1 best_epoch: expected 1, got 2" in out
    assert len([ln for ln in out.splitlines() if ln.startswith("runs/")]) == 1
    # another platform: the tolerance applies (2 epochs is within it)
    rec["platform"]["cpu_capability"] = "OTHER"
    expected.write_text(json.dumps(rec))
    assert main(args) == 0
    assert "tolerance" in capsys.readouterr().out
