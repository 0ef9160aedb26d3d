"""The cluster path on a real SLURM scheduler: a one-node cluster on this machine
(tests/slurm/cluster.sh: Debian's slurm-wlm and munge, no slurmdbd), and a slice of the
small config (the MNIST GRU rows, both seeds) through `--workflow-profile profiles/slurm`.
The runs must match tests/expected/small.json exactly, also after the two faults a
cluster brings: a job cancelled by `scancel` while it trains, and a job killed at its
walltime. Neither may need a human: the profile's squeue status command sees both, and
the Snakefile's retries re-submit the job, which resumes from its checkpoint.

Needs root and apt (or slurm-wlm and munge installed); skipped with the reason otherwise.

    uv run --frozen pytest tests/test_slurm_real.py     # ~5-8 min on 2 cores
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from psrnn import config as C

ROOT = C.ROOT
CLUSTER = ROOT / "tests" / "slurm" / "cluster.sh"
ROWS = ["mnist_gru"]  # no grid: fixtures -> download -> prepare -> train x 2 seeds -> compile

pytestmark = pytest.mark.slow


def can_run() -> str | None:
    if os.geteuid() != 0:
        return "needs root (it starts munged, slurmctld and slurmd)"
    if shutil.which("slurmctld") and shutil.which("munged"):
        return None
    if not shutil.which("apt-get"):
        return "slurm-wlm is not installed and there is no apt-get to install it"
    res = subprocess.run(["bash", str(CLUSTER), "install"], capture_output=True, text=True, timeout=600)
    return None if res.returncode == 0 else f"apt-get install slurm-wlm munge failed: {res.stderr[-300:]}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = can_run()
    if why:
        pytest.skip(why)
    state = tmp_path_factory.mktemp("slurm")
    res = subprocess.run(
        ["bash", str(CLUSTER), "start", str(state)], capture_output=True, text=True, timeout=120
    )
    if res.returncode != 0:
        subprocess.run(["bash", str(CLUSTER), "stop", str(state)], timeout=60)
        pytest.fail(f"the cluster did not start: {res.stdout}{res.stderr}")
    yield state
    subprocess.run(["bash", str(CLUSTER), "stop", str(state)], timeout=60)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("slurm-run")
    small = yaml.safe_load((ROOT / "config" / "small.yaml").read_text())
    slice_cfg = {
        "extends": str(ROOT / "config" / "small.yaml"),
        "name": "small",  # the run ids of tests/expected/small.json
        "datasets": {ds: {"enabled": False} for ds in small["datasets"] if ds != "mnist"},
        "experiments": {e: None for e in small["experiments"] if e not in ROWS},
    }
    (d / "slice.yaml").write_text(yaml.safe_dump(slice_cfg, sort_keys=False))
    return d


# The slice through the SLURM profile; its jobs' `python` is the one running the tests
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--configfile", "slice.yaml"]
SNAKEMAKE += ["--workflow-profile", str(ROOT / "profiles" / "slurm"), "--latency-wait", "5"]


def env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def snakemake(workdir: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SNAKEMAKE, *args], cwd=workdir, env=env(), capture_output=True, text=True, timeout=timeout
    )


def check(workdir: Path) -> subprocess.CompletedProcess:
    """`psrnn check` against tests/expected/small.json's entries for the slice's runs."""
    expected = json.loads((ROOT / "tests" / "expected" / "small.json").read_text())
    runs = {k: v for k, v in expected["runs"].items() if k.split("/")[1] in ROWS}
    (workdir / "expected.json").write_text(json.dumps({**expected, "runs": runs}, indent=2))
    return subprocess.run(
        [sys.executable, "-m", "psrnn", "check", "--config", "slice.yaml", "--expected", "expected.json"],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=120,
    )


def running_train_job(seed: int) -> str | None:
    """The SLURM id of seed `seed`'s running train job (the plugin's job comment is
    rule_<rule>_wildcards_<the wildcard values joined by _>)."""
    out = subprocess.run(["squeue", "-h", "-o", "%i|%k|%T"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        job, comment, state = line.split("|")
        if state == "RUNNING" and comment == f"rule_train_wildcards_{ROWS[0]}_{seed}":
            return job
    return None


def run_with_fault(workdir: Path, seed: int, fault) -> tuple[subprocess.CompletedProcess, str]:
    """The slice's workflow, and once seed `seed`'s train job has saved a checkpoint,
    `fault(job id)` against it; returns (the workflow's result, the job's id)."""
    proc = subprocess.Popen(
        SNAKEMAKE, cwd=workdir, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    ckpt = workdir / "results" / "small" / "runs" / ROWS[0] / f"seed{seed}" / "ckpt_last.pt"
    hit, deadline = None, time.monotonic() + 900
    while proc.poll() is None and time.monotonic() < deadline:
        job = running_train_job(seed)
        if hit is None and job and ckpt.is_file():
            fault(job)
            hit = job
        time.sleep(0.2)  # the window between the first checkpoint and the run's end is seconds
    if proc.poll() is None:
        proc.kill()
    out = proc.communicate()[0]
    assert hit, "the train job never ran with a checkpoint to fault:\n" + out[-3000:]
    return subprocess.CompletedProcess(SNAKEMAKE, proc.returncode, out, ""), hit


def test_the_slice_runs_through_slurm_and_survives_a_scancel(cluster, workdir):
    """A train job cancelled while it trains: the workflow sees it (squeue), re-submits it,
    the run resumes from its checkpoint, and the numbers are tests/expected/small.json's."""
    res, job = run_with_fault(workdir, 1, lambda job: subprocess.run(["scancel", job], check=True))
    assert res.returncode == 0, res.stdout[-5000:]
    assert f"SLURM-job '{job}' failed, SLURM status is: 'CANCELLED'" in res.stdout
    log = workdir / "results" / "small" / "logs" / "train" / ROWS[0] / "seed1.log"
    assert "resumed after epoch" in log.read_text()  # the re-submitted attempt's log
    res = check(workdir)
    assert res.returncode == 0 and "all 2 runs match" in res.stdout, res.stdout + res.stderr
    assert "Nothing to be done" in snakemake(workdir, "-n").stdout


def test_a_job_killed_at_its_walltime_is_retried_and_resumes(cluster, workdir):
    """The scheduler's walltime kill: the running job's limit lowered to one minute and its
    training paused (SIGSTOP) past it, so SLURM itself ends it with TIMEOUT. The retry
    resumes from the checkpoint, and the numbers are still the expected ones."""
    shutil.rmtree(workdir / "results" / "small" / "runs" / ROWS[0] / "seed0")

    def walltime(job: str) -> None:
        subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=1"], check=True)
        pids = subprocess.run(
            ["pgrep", "-f", f"psrnn train .*--experiment {ROWS[0]} --seed 0 "], capture_output=True, text=True
        ).stdout.split()
        for pid in pids:  # this test's own (a CI beside it trains the same command line)
            with contextlib.suppress(OSError):
                if Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(workdir.resolve()):
                    os.kill(int(pid), signal.SIGSTOP)  # wall time runs on; SLURM's kill continues it

    res, job = run_with_fault(workdir, 0, walltime)
    assert res.returncode == 0, res.stdout[-5000:]
    assert f"SLURM-job '{job}' failed, SLURM status is: 'TIMEOUT'" in res.stdout
    log = workdir / "results" / "small" / "logs" / "train" / ROWS[0] / "seed0.log"
    assert "resumed after epoch" in log.read_text()
    res = check(workdir)
    assert res.returncode == 0 and "all 2 runs match" in res.stdout, res.stdout + res.stderr
