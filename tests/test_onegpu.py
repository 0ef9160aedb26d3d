"""psrnn.onegpu (`python -m psrnn gpu-run`): the plan of runs sharing one GPU by their
measured memory, and the runner's one retry after out-of-memory. The end-to-end run of the
ten-minute IMDB script on the CPU is tests/test_imdb_10min.py."""

import json
from pathlib import Path

import pytest

from psrnn import config as C
from psrnn import onegpu as G
from psrnn.errors import UserError

CONFIG = C.ROOT / "config" / "quick-imdb-10min.yaml"
H100_GIB = 79.18  # an 80 GB H100's total_memory / 2**30 (torch's OOM message: 79.18 GiB)


def imdb_jobs(m):
    return G.search_jobs(C.load_suite(CONFIG), m)


def test_eight_runs_of_todays_sizes_are_never_started_at_once_on_an_80_gb_h100():
    """The H100 call of 2026-11-27 started the 8 IMDB search runs at once: they held 72-80.8 GB
    and 2 died of out-of-memory. Fed the numbers measured there (torch peaks 6,457 / 4,036 /
    3,748 / 4,242 MiB, 5.36 GiB per process beyond the peak), the plan starts at most 6 and
    keeps what they reserve under 70 GB; with the stored measurements (8.2 GiB per process,
    the H200's unconstrained reserve) at most 5."""
    measured_then = G.Measured(
        overhead_gb=5.36,
        slowdown=0.11,
        experiments={
            "imdb_gru": {"peak_gb": 6457 / 1024, "epoch_s": 8.5},
            "imdb_full_rec_a1": {"peak_gb": 4036 / 1024, "epoch_s": 3.58},
            "imdb_ps60_predrec_a1": {"peak_gb": 3748 / 1024, "epoch_s": 3.97},
            "imdb_ps60_predrec_a5": {"peak_gb": 4242 / 1024, "epoch_s": 4.06},
        },
        source="test",
    )
    for m, most in ((measured_then, 6), (G.read_measured(), 5)):
        slots = G.plan(imdb_jobs(m), H100_GIB, m, 0.875)
        n, gb = G.peak_sharing(slots, m.overhead_gb)
        assert len(slots) == 8 and n == most and gb < 70
        # the two GRU runs (the slowest) start first, at time 0
        assert {s.job.name for s in slots if s.start_s == 0} >= {
            "search/imdb_gru/lr-0.001",
            "search/imdb_gru/lr-0.003",
        }
    # on an H200 all 8 fit, and the plan's time is the slowest run's
    m = G.read_measured()
    slots = G.plan(imdb_jobs(m), 139.8, m, 0.875)
    assert G.peak_sharing(slots, m.overhead_gb)[0] == 8 and all(s.start_s == 0 for s in slots)
    gru = 30 * 8.5 * (1 + 0.11 * 7)  # the GRU shares with 7 others until the rest end
    assert max(s.end_s for s in slots) > gru * 0.6


def test_the_search_runs_are_planned_slowest_first():
    jobs = imdb_jobs(G.read_measured())
    assert [j.work_s for j in jobs] == sorted((j.work_s for j in jobs), reverse=True)
    assert jobs[0].experiment == "imdb_gru" and jobs[0].epochs == 30 and jobs[-1].epochs == 40


def test_a_run_larger_than_the_cap_and_a_bad_measurements_file_are_one_line_errors(tmp_path):
    m = G.read_measured()
    with pytest.raises(
        UserError, match=r"search/imdb_gru/lr-0.001 needs 14.5 GiB .* more than 88% of 16.0 GiB"
    ):
        G.plan(imdb_jobs(m), 16.0, m, 0.875)
    bad = tmp_path / "m.json"
    bad.write_text(json.dumps({"process_overhead_gb": 1}))
    with pytest.raises(UserError, match="m.json: not a measurements file"):
        G.read_measured(bad)
    with pytest.raises(UserError, match="no such measurements file"):
        G.read_measured(tmp_path / "none.json")


def test_an_unmeasured_experiment_is_planned_as_the_largest_and_says_so():
    m = G.read_measured()
    peak, epoch_s, assumed = G.measure_of(m, "cifar10_gru_small")
    assert assumed and peak == max(e["peak_gb"] for e in m.experiments.values())
    assert epoch_s == max(e["epoch_s"] for e in m.experiments.values())


def fake_job(tmp_path, name, gb):
    return G.Job(name, name, (), tmp_path / name, tmp_path / f"{name}.log", gb, 1.0, 1)


def test_a_run_out_of_memory_starts_again_once_after_another_run_has_ended(tmp_path, monkeypatch):
    """`a` dies of CUDA out-of-memory on its first try and is started again only after `b`
    ended; `c` runs out of memory twice and is reported failed, not retried forever."""
    m = G.Measured(overhead_gb=0.0, slowdown=0.0, experiments={}, source="test")
    events = tmp_path / "events"
    script = {
        "a": "if [ -f {d}/a.tried ]; then echo ok-a; mkdir -p {d}/a && echo {{}} > {d}/a/metrics.json; "
        'else touch {d}/a.tried; echo "psrnn train: error: out of memory: CUDA out of memory."; exit 2; fi',
        "b": "sleep 1; echo ok-b; mkdir -p {d}/b && echo {{}} > {d}/b/metrics.json",
        "c": 'sleep 2; echo "psrnn train: error: out of memory: CUDA out of memory."; exit 2',
    }

    def start(job, config, threads):
        import subprocess

        with events.open("a") as f:
            f.write(f"start {job.name}\n")
        cmd = script[job.name].format(d=tmp_path) + f"; echo end {job.name} >> {events}"
        return subprocess.Popen(["bash", "-c", cmd], stdout=job.log.open("a"), stderr=subprocess.STDOUT)

    monkeypatch.setattr(G, "start", start)
    jobs = [fake_job(tmp_path, n, 1.0) for n in ("a", "b", "c")]
    failed = G.execute(jobs, 10.0, m, 1.0, "unused.yaml", 1)
    assert failed == ["c"]
    lines = events.read_text().splitlines()
    assert lines.count("start a") == 2 and lines.count("start c") == 2
    assert lines.index("end b") < len(lines) - 1 - lines[::-1].index("start a")  # a's retry after b ended
    assert (tmp_path / "a" / "metrics.json").exists() and (tmp_path / "b" / "metrics.json").exists()
    # a finished run is skipped by the same call again
    assert G.execute(jobs[:2], 10.0, m, 1.0, "unused.yaml", 1) == []
    assert events.read_text().splitlines()[len(lines) :] == []


def test_runs_beyond_the_cap_wait_for_memory(tmp_path, monkeypatch):
    """Three runs of 4 GiB under a 10 GiB cap: two at once, the third after one ends."""
    m = G.Measured(overhead_gb=1.0, slowdown=0.0, experiments={}, source="test")
    running, most = set(), []

    class Proc:
        def __init__(self, name):
            self.name, self.polls = name, 0

        def poll(self):
            self.polls += 1
            if self.polls < 3:
                return None
            running.discard(self.name)
            (tmp_path / self.name).mkdir(exist_ok=True)
            return 0

    def start(job, config, threads):
        running.add(job.name)
        most.append(len(running))
        job.log.write_text("done\n")
        return Proc(job.name)

    monkeypatch.setattr(G, "start", start)
    monkeypatch.setattr(G.time, "sleep", lambda s: None)
    jobs = [fake_job(tmp_path, n, 4.0) for n in ("x", "y", "z")]
    assert G.execute(jobs, 10.0, m, 1.0, "unused.yaml", 1) == []
    assert max(most) == 2 and len(most) == 3


def test_plan_only_prints_the_plan_and_runs_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from psrnn.cli import main

    assert main(["gpu-run", "--config", str(CONFIG), "--plan-only", "--gpu-gb", str(H100_GIB)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "search: 8 run(s), at most 5 at once reserving 65.6 GiB of 79.2 GiB (cap 88% = 69.3 GiB"
    )
    assert "expected 7.3 min" in out.splitlines()[0]
    assert not any(Path(tmp_path).iterdir())


def test_at_the_time_limit_the_runs_stop_and_the_same_command_continues(tmp_path, monkeypatch):
    """--minutes: at the deadline every running run gets SIGTERM (the train command keeps its
    last epoch's checkpoint) and OutOfTime names what is left; a second call skips what
    finished and starts the rest."""
    import subprocess
    import time

    m = G.Measured(overhead_gb=0.0, slowdown=0.0, experiments={}, source="test")

    def start(job, config, threads):
        done = f"mkdir -p {job.out} && echo {{}} > {job.out}/metrics.json"
        cmd = done if job.name == "quick" else f"trap 'exit 130' TERM; sleep 30 & wait; {done}"
        return subprocess.Popen(["bash", "-c", cmd], stdout=job.log.open("a"), stderr=subprocess.STDOUT)

    monkeypatch.setattr(G, "start", start)
    jobs = [fake_job(tmp_path, n, 1.0) for n in ("slow", "quick")]
    t0 = time.monotonic()
    with pytest.raises(G.OutOfTime, match=r"out of time: 1 run\(s\) not finished \(slow\); each resumes"):
        G.execute(jobs, 10.0, m, 1.0, "unused.yaml", 1, deadline=time.monotonic() + 1.0)
    assert time.monotonic() - t0 < 20  # stopped, not waited for
    assert (tmp_path / "quick" / "metrics.json").exists() and not (
        tmp_path / "slow" / "metrics.json"
    ).exists()


def test_a_config_that_cannot_fit_one_command_is_planned_as_several(capsys):
    """MNIST's 20 search runs at 70 epochs: about 11 commands of 9 minutes on an 80 GB H100."""
    from psrnn.cli import main

    mnist = str(C.ROOT / "config" / "quick-mnist.yaml")
    assert (
        main(["gpu-run", "--config", mnist, "--plan-only", "--gpu-gb", str(H100_GIB), "--minutes", "9"]) == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("search: 20 run(s), at most 7 at once")
    assert next(x for x in out if x.startswith("whole: ")) == (
        "whole: expected 94.1 min of training: about 11 commands of 9 min "
        "(the same command again continues where the last stopped)"
    )
    ten = str(CONFIG)
    assert main(["gpu-run", "--config", ten, "--plan-only", "--gpu-gb", str(H100_GIB), "--minutes", "9"]) == 0
    assert "whole: expected 7.3 min of training: one command of 9 min" in capsys.readouterr().out


def test_the_fmnist_config_runs_in_two_time_limited_calls_at_toy_scale(tmp_path):
    """config/quick-fmnist.yaml on synthetic images, 1 epoch: a first call cut at its time limit
    exits 3 and names what is left; the same command again finishes the search, selects,
    reuses and compiles (the split a lent GPU's 10-minute commands make)."""
    import os
    import subprocess
    import sys

    import yaml

    from psrnn.studies.private_shared.data.fixtures import write_fixtures

    fixtures = tmp_path / "fixtures"
    write_fixtures(fixtures, ("fmnist",))
    prepare = {"downsample": 10, "valid_size": 40, "train": 80, "valid": 40, "test": 40}
    config = C.ROOT / "config" / "quick-fmnist.yaml"
    source = {
        "mirrors": [str(fixtures / "fmnist")],
        "md5": str(fixtures / "fmnist" / "MD5SUMS"),
        "official": False,
    }
    toy = {
        "extends": str(config),
        "name": "toyfm",
        "fixtures": str(fixtures),
        # 10 x 10 = 100 steps: room for the rows' windows (up to 32 each side) and 20 anchors
        "datasets": {"fmnist": {"source": source, "prepare": prepare}},
        "defaults": {"batch_size": 20, "max_epochs": 1},
    }  # fmt: skip
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(toy, sort_keys=False))
    cmd = [
        sys.executable,
        "-m",
        "psrnn",
        "gpu-run",
        "--config",
        str(path),
        "--gpu-gb",
        str(H100_GIB),
        "--mps",
        "off",
    ]
    env = {**os.environ, "PYTHONPATH": str(C.ROOT / "src")}
    first = subprocess.run([*cmd, "--minutes", "0.15"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert first.returncode == 3, first.stdout[-2000:] + first.stderr[-2000:]
    assert first.stdout.splitlines()[0].startswith("search: 16 run(s), at most ")
    assert "gpu-run: out of time: " in first.stdout and "run the same command again" in first.stdout
    root = tmp_path / "results" / "toyfm"
    done_first = len(list(root.glob("search/*/*/metrics.json")))
    assert done_first < 16
    second = subprocess.run([*cmd, "--minutes", "30"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert second.stdout.count("finished before, skipped") == done_first
    assert len(list(root.glob("search/*/*/metrics.json"))) == 16
    assert len(list(root.glob("runs/*/seed0/metrics.json"))) == 4 and (root / "REPORT.md").exists()


def test_prepare_data_runs_the_studys_own_download_and_prepare_commands(tmp_path, monkeypatch):
    """gpu-run's data step runs the commands the study names for its download and prepare
    jobs (Study.job_commands), and none for a study whose runs make their own data."""
    import dataclasses
    import subprocess

    from psrnn import registry

    ran: list[list[str]] = []
    monkeypatch.setattr(
        subprocess, "run", lambda cmd, **kw: ran.append(cmd[3:]) or subprocess.CompletedProcess(cmd, 0)
    )
    monkeypatch.chdir(tmp_path)  # no prepared data here
    cfg = C.load_suite(C.ROOT / "config" / "small.yaml")
    first = registry.STUDIES["private_shared"]
    jobs = {**first.job_commands, "download": "fetch", "prepare": "cut"}
    monkeypatch.setitem(registry.STUDIES, first.name, dataclasses.replace(first, job_commands=jobs))
    G.prepare_data(cfg, "small.yaml")
    assert ran[:2] == [
        ["fetch", "mnist", "--config", "small.yaml"],
        ["cut", "mnist", "--config", "small.yaml"],
    ]
    assert len(ran) == 2 * len(C.enabled_datasets(cfg))
    ran.clear()
    G.prepare_data(C.load_suite(C.ROOT / "config" / "relreg.yaml"), "relreg.yaml")
    assert ran == []
