"""The grid search as group jobs (`fused_search: true`, config/relreg-ci-fused.yaml): one
Snakemake job per shape group writes every grid point's run folder and then its marker;
selection, final runs and compile follow as without it; a group whose job is run again
retrains only its unfinished members.

    uv run --frozen pytest tests/test_fused_workflow.py      # about a minute on 2 CPU cores
"""

import subprocess
import sys

import pytest

from psrnn import config as C
from psrnn import workflow as W
from psrnn.engine import groups

pytestmark = pytest.mark.slow

FUSED = C.ROOT / "config" / "relreg-ci-fused.yaml"
CFG = C.load_suite(FUSED)


def snakemake(workdir, *args):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(C.ROOT / "Snakefile"), "--directory", str(workdir)]
    return subprocess.run(
        [*cmd, "--configfile", str(FUSED), "--cores", "2", *args], capture_output=True, text=True, timeout=600
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
