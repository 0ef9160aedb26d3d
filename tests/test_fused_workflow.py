"""The grid search as group jobs (`fused_search: true`, config/relreg-ci-fused.yaml): one
Snakemake job per shape group writes every grid point's run folder and then its marker;
selection, final runs and compile follow as without it; a group whose job is run again
retrains only its unfinished members; a final group whose job fails after one member
finished loses that member's metrics.json to Snakemake, and the retry gives it back from
the member's finished checkpoint without training it again.

    uv run --frozen pytest tests/test_fused_workflow.py      # about a minute on 2 CPU cores
"""

import json
import os
import subprocess
import sys

import pytest

from psrnn import config as C
from psrnn import workflow as W
from psrnn.engine import groups
from psrnn.files import read_json

pytestmark = pytest.mark.slow

FUSED = C.ROOT / "config" / "relreg-ci-fused.yaml"
CFG = C.load_suite(FUSED)


def snakemake(workdir, *args, env=None):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(C.ROOT / "Snakefile"), "--directory", str(workdir)]
    return subprocess.run(
        [*cmd, "--configfile", str(FUSED), "--cores", "2", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def test_group_jobs_make_every_run_and_rerun_only_unfinished_members(tmp_path):
    proc = snakemake(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    made = [
        f for f in groups.targets(CFG, W.targets(CFG)) + W.run_targets(CFG) if not (tmp_path / f).is_file()
    ]
    assert made == []
    assert sorted(groups.search_groups(CFG, "lstm_l2")) == ["hidden-8_lr-0.05"]  # one shape, one job
    assert "rule search_group" in proc.stderr and "rule search:" not in proc.stderr
    # a member lost (as if the job was killed before it finished): the group's job again
    exp = "proto_both"
    ((gid, points),) = groups.search_groups(CFG, exp).items()
    lost = tmp_path / C.search_dir(CFG, exp, points[0]) / "metrics.json"
    kept = tmp_path / C.search_dir(CFG, exp, points[1]) / "metrics.json"
    stamp = kept.stat().st_mtime_ns
    lost.unlink()
    (tmp_path / groups.group_marker(CFG, exp, gid)).unlink()
    again = snakemake(tmp_path, str(groups.group_marker(CFG, exp, gid)))
    assert again.returncode == 0, again.stderr[-3000:]
    assert lost.is_file() and kept.stat().st_mtime_ns == stamp  # the finished member is not retrained


# A fault for the jobs: on $PYTHONPATH (the Snakefile's prefix keeps it after src/), it makes
# psrnn.engine.group's finish_member raise for the member whose folder ends with $FAIL_MEMBER, once
# (while $FAIL_ONCE names a file, which it removes): the job fails after the members before it
# wrote their metrics.json
FAULT = """
import importlib.abc, importlib.util, os, sys


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "psrnn.engine.group":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            real = module.finish_member

            def finish_member(m, *args, **kwargs):
                flag = os.environ["FAIL_ONCE"]
                if str(m.job.out_dir).endswith(os.environ["FAIL_MEMBER"]) and os.path.exists(flag):
                    os.unlink(flag)
                    raise RuntimeError(f"injected failure finishing {m.job.out_dir}")
                return real(m, *args, **kwargs)

            module.finish_member = finish_member

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("FAIL_ONCE"):
    sys.meta_path.insert(0, Finder())
"""


def test_a_failed_final_group_loses_no_training(tmp_path):
    """Seen with Snakemake 9.27 (issue 51, case 12): a final group's outputs are all its
    members' metrics.json, so (a) starting the job removes the finished members' files
    (Snakemake removes a job's existing outputs first) and (b) a job that fails after a member
    finished removes that member's new file ("Removing output files of failed job"). Neither
    loses training: the rule's retry (or the next run) resumes each finished member from its
    ckpt_last.pt, which Snakemake leaves alone, trains no epoch, evaluates the best epoch again
    and writes the same record, all but the time and memory it measures again."""
    exp = "lstm_l2"
    members = [tmp_path / C.run_dir(CFG, exp, seed) for seed in CFG["seeds"]]
    targets = [str(C.run_dir(CFG, exp, seed) / "metrics.json") for seed in CFG["seeds"]]
    first = snakemake(tmp_path, *targets)
    assert first.returncode == 0, first.stderr[-3000:]
    kept, lost = members
    before = (kept / "metrics.json").read_bytes()
    checkpoint = (kept / "ckpt_last.pt").read_bytes()
    (lost / "metrics.json").unlink()
    (tmp_path / "fault").mkdir()
    (tmp_path / "fault" / "sitecustomize.py").write_text(FAULT)
    flag = tmp_path / "fail-once"
    flag.touch()
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path / "fault"),
        "FAIL_ONCE": str(flag),
        "FAIL_MEMBER": lost.name,
    }
    again = snakemake(tmp_path, targets[1], env=env)
    assert again.returncode == 0, again.stderr[-3000:]  # the rule's retry finished the job
    assert not flag.exists() and "injected failure finishing" in again.stderr  # it did fail once
    removed = again.stderr.split("Removing output files of failed job final_group")[1].split(
        "Trying to restart"
    )[0]
    assert removed.split() == ["since", "they", "might", "be", "corrupted:", targets[0]]  # the finished one
    log = (tmp_path / "results" / CFG["name"] / "logs" / "train" / exp / "group.log").read_text()
    old, new = json.loads(before), read_json(kept / "metrics.json")
    first_seed = C.run_dir(CFG, exp, CFG["seeds"][0])
    [header] = [line for line in log.splitlines() if line.startswith(f"run {first_seed}:")]
    assert header.endswith(f"| resumed after epoch {old['epochs_run']}")  # the retry's (its log is the last)
    assert "epoch 1/" not in log  # no member trained again
    assert (kept / "ckpt_last.pt").read_bytes() == checkpoint
    measured = {"wall_time_s", "peak_memory_mb"}  # the evaluation's time and the process' memory
    assert {k: v for k, v in new.items() if k not in measured} == {
        k: v for k, v in old.items() if k not in measured
    }
    assert (lost / "metrics.json").is_file()
