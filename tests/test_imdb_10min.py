"""The ten-minute GPU script for Table 2's IMDB rows (results/quick-imdb/gpu-10min.sh,
config/quick-imdb-10min.yaml, psrnn.onegpu), run end to end on the CPU at toy scale:
synthetic reviews, one epoch of tiny runs, the same plan, search, selection, reuse and
compile a GPU host runs."""

import json
import os
import subprocess
import sys

import yaml

from psrnn import config as C
from psrnn import workflow as W
from psrnn.engine.stale import stale_runs
from psrnn.files import read_json, write_json
from psrnn.studies.private_shared.data.fixtures import write_fixtures

SCRIPT = C.ROOT / "results" / "quick-imdb" / "gpu-10min.sh"
RESTAMP = C.ROOT / "results" / "quick-imdb" / "gpu-restamp.sh"
CONFIG = C.ROOT / "config" / "quick-imdb-10min.yaml"


def test_the_ten_minute_config_is_quick_imdb_with_torch_init_adam_two_rates_and_sized_epochs():
    cfg = C.load_suite(CONFIG)
    assert C.enabled_experiments(cfg) == C.enabled_experiments(
        C.load_suite(C.ROOT / "config" / "quick-imdb.yaml")
    )
    for exp in C.enabled_experiments(cfg):
        assert [p for p, _ in C.grid_points(cfg["experiments"][exp])] == ["lr-0.001", "lr-0.003"]
        run = C.resolve_run(cfg, exp, 0, point="lr-0.001")
        assert (run.optimizer, run.init, run.patience) == ("adam", "torch", 10)
        assert run.max_epochs == (30 if exp == "imdb_gru" else 40)
        assert run.decoder_input == "teacher" or run.shared == 0.0  # text: teacher-forced decoders


def test_the_script_runs_search_select_reuse_and_compile_at_toy_scale(tmp_path, monkeypatch):
    fixtures = tmp_path / "fixtures"
    write_fixtures(fixtures, ("imdb",))
    toy = tmp_path / "toy.yaml"
    source = {
        "mirrors": [str(fixtures / "imdb")],
        "md5": str(fixtures / "imdb" / "MD5SUMS"),
        "official": False,
    }
    # reviews cut at 200 characters: long enough for the rows' windows (up to 64 each side)
    prepare = {"min_chars": 300, "max_length": 200, "alphabet_size": 20, "train": 48, "valid": 16, "test": 16}
    toy_cfg = {
        "extends": str(CONFIG),
        "name": "toy10",
        "fixtures": str(fixtures),
        "datasets": {"imdb": {"source": source, "prepare": {**prepare, "valid_size": 16}}},
        "defaults": {"batch_size": 16},
        "experiments": {e: {"max_epochs": 1} for e in C.enabled_experiments(C.load_suite(CONFIG))},
    }
    toy.write_text(yaml.safe_dump(toy_cfg, sort_keys=False))
    env = {
        **os.environ,
        "CONFIG": str(toy),
        "PYTHON": sys.executable,
        "PYTHONPATH": str(C.ROOT / "src"),
        "MPS": "off",
        "GPU_GB": "79.2",  # an 80 GB H100's, planned for; the runs train on the CPU
    }
    res = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = res.stdout
    # the plan comes first: 5 of the 8 search runs at once on 80 GB, under 70 GB reserved
    assert out.splitlines()[0].startswith(
        "search: 8 run(s), at most 5 at once reserving 65.6 GiB of 79.2 GiB"
    )
    assert out.index("search: 8 run(s)") < out.index("search/imdb_gru/lr-0.001: started")
    # slowest first: both GRU runs start before any other
    started = [
        ln.split(":")[0] for ln in out.splitlines() if ln.startswith("search/") and ln.endswith("reserved)")
    ]
    assert started[:2] == ["search/imdb_gru/lr-0.001", "search/imdb_gru/lr-0.003"] and len(started) == 8
    assert "gpu-run: compiled results/toy10/REPORT.md" in out
    root = tmp_path / "results" / "toy10"
    assert len(list(root.glob("search/*/lr-*/metrics.json"))) == 8  # 4 rows x 2 rates
    monkeypatch.chdir(tmp_path)  # where the script ran: the toy's fixtures lie inside it
    for exp in C.enabled_experiments(C.load_suite(toy)):
        sel = json.loads((root / "search" / exp / "selected.json").read_text())
        final = json.loads((root / "runs" / exp / "seed0" / "metrics.json").read_text())
        assert final["config"]["lr"] == sel["overrides"]["lr"] and final["config"]["optimizer"] == "adam"
        assert final["reused_from"]  # the selected search run is the final run, not trained twice
    report = (root / "REPORT.md").read_text()
    assert "| optimizer | SGDR | adam |" in report  # the recipe of ours, listed as a deviation

    # the proof script (gpu-restamp.sh), on the same toy: its runs stamped as made by other
    # training code are trained again (the 8 search runs; the 4 final runs reused theirs),
    # give their numbers and are re-stamped; nothing is left stale
    toy_suite = C.load_suite(toy)
    for metrics in root.rglob("metrics.json"):
        write_json(metrics, {**read_json(metrics), "training_code": "f" * 64})
    for exp in C.enabled_experiments(toy_suite):
        selected = C.selection_path(toy_suite, exp)
        write_json(selected, {**read_json(selected), **W.selection_stamp(toy_suite, exp, digest="f" * 64)})
    assert len(stale_runs(toy_suite, code=True)) == 12
    env["JOBS"] = "2"
    res = subprocess.run(["bash", str(RESTAMP)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert sum(ln.startswith("same numbers: ") for ln in res.stdout.splitlines()) == 8
    assert "gpu-restamp: rc 0 after" in res.stdout and "(CUDA MPS: 0)" in res.stdout
    assert stale_runs(toy_suite, code=True) == []
