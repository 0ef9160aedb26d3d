"""`python -m psrnn restamp` (psrnn.engine.restamp) on a copy of the committed second-study
runs: runs re-trained by today's code must give their recorded numbers before any stamp is
rewritten, and then every stale run and selection of the suite is re-stamped, with the
proof recorded; a run that does not is named, and nothing is written."""

import shutil
import subprocess
import sys

import pytest
import yaml

from psrnn import config as C
from psrnn import workflow as W
from psrnn.engine import codehash
from psrnn.engine.stale import stale_runs
from psrnn.files import read_json, write_json

OLD = "f" * 64  # the digest of some other training code
EXPERIMENT = "lstm_l2"


@pytest.fixture
def suite(tmp_path, monkeypatch):
    """relreg.yaml with one experiment, over a copy of its committed runs stamped as made by
    other training code (runs and selection), as the working folder."""
    raw = yaml.safe_load((C.ROOT / "config" / "relreg.yaml").read_text())
    raw["experiments"] = {EXPERIMENT: raw["experiments"][EXPERIMENT]}
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(raw))
    results = tmp_path / "results" / "relreg"
    for part in ("runs", "search"):
        shutil.copytree(C.ROOT / "results" / "relreg" / part / EXPERIMENT, results / part / EXPERIMENT)
    monkeypatch.chdir(tmp_path)
    cfg = C.load_suite(path)
    for metrics in results.rglob("metrics.json"):
        write_json(metrics, {**read_json(metrics), "training_code": OLD})
    selected = results / "search" / EXPERIMENT / "selected.json"
    write_json(selected, {**read_json(selected), **W.selection_stamp(cfg, EXPERIMENT, digest=OLD)})
    return path, cfg, results


def restamp(path):
    """`python -m psrnn restamp` as a user runs it: it applies the suite's job_env (the
    kernel variables the runs were trained under) before torch starts."""
    return subprocess.run(
        [sys.executable, "-m", "psrnn", "restamp", "--config", str(path)], capture_output=True, text=True
    )


def snapshot(results):
    return {p: p.read_bytes() for p in sorted(results.rglob("*")) if p.is_file()}


def test_restamp_refuses_a_run_that_today_s_code_trains_otherwise_and_writes_nothing(suite):
    path, cfg, results = suite
    tampered = results / "runs" / EXPERIMENT / "seed3" / "metrics.json"  # a member of the proof's group
    record = read_json(tampered)
    write_json(tampered, {**record, "best_epoch": record["best_epoch"] + 1})
    before = snapshot(results)
    done = restamp(path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    name = tampered.relative_to(results.parents[1])
    assert f"{name}: re-trained by today's code, best_epoch: recorded {record['best_epoch'] + 1}" in line
    assert "the code change moves numbers" in line
    assert snapshot(results) == before  # no stamp rewritten, no proof recorded


def test_restamp_re_stamps_every_stale_run_and_the_selection_once_the_proof_holds(suite):
    path, cfg, results = suite
    now = codehash.training_digest("relreg")
    stale = stale_runs(cfg, code=True)
    assert len(stale) == len(list(results.rglob("metrics.json"))) > 20
    done = restamp(path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"same numbers: results/relreg/runs/{EXPERIMENT}/seed" in out  # a final run and its group
    assert stale_runs(cfg, code=True) == []
    assert all(read_json(p)["training_code"] == now for p in results.rglob("metrics.json"))
    selected = results / "search" / EXPERIMENT / "selected.json"
    assert W.is_current(selected, W.selection_stamp(cfg, EXPERIMENT))
    [proof] = read_json(results / "restamp.json")["restamps"]
    assert proof["from"] == [OLD] and proof["to"] == now and proof["restamped_runs"] == len(stale)
    finals = {
        str(p.relative_to(results.parents[1]))
        for p in (results / "runs").rglob("metrics.json")
        if not read_json(p).get("reused_from")
    }
    assert set(proof["retrained"]) == finals  # the final runs' fused group, trained together again
    assert proof["restamped_selections"] == [str(selected.relative_to(results.parents[1]))]
    again = restamp(path)  # nothing left: it says so and writes nothing
    assert again.returncode == 0 and "every finished run records today's training code" in again.stdout
