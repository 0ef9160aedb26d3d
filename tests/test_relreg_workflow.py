"""The second study's CI slice (config/relreg-ci.yaml) through the same Snakefile as the
first: grid search, select, final runs, compile; the runs match
tests/expected/relreg-ci.json (`python -m psrnn check`), a recompile is byte-identical,
and a second Snakemake call has nothing to do.

    uv run --frozen pytest tests/test_relreg_workflow.py      # about a minute on 2 CPU cores
"""

import hashlib
import subprocess
import sys

import pytest

from psrnn import config as C
from psrnn import workflow as W

pytestmark = pytest.mark.slow

CI = C.ROOT / "config" / "relreg-ci.yaml"
CFG = C.load_suite(CI)


def run(workdir, *args, timeout=600):
    return subprocess.run(args, cwd=workdir, capture_output=True, text=True, timeout=timeout)


def snakemake(workdir, *args):
    return run(
        workdir,
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(C.ROOT / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(CI),
        "--cores",
        "2",
        *args,
    )


def digests(workdir):
    return {p: hashlib.md5((workdir / p).read_bytes()).hexdigest() for p in W.compile_outputs(CFG)}


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("relreg")
    proc = snakemake(workdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return workdir


def test_every_target_is_made(done):
    missing = [f for f in W.targets(CFG) if not (done / f).is_file()]
    assert missing == []
    assert not (done / "data").exists()  # generated data: no download or prepare jobs


def test_runs_match_the_expected_values(done):
    proc = run(done, sys.executable, "-m", "psrnn", "check", "--config", str(CI))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all 6 runs match" in proc.stdout


def test_recompile_is_byte_identical_and_nothing_reruns(done):
    before = digests(done)
    proc = run(done, sys.executable, "-m", "psrnn", "compile", "--config", str(CI))
    assert proc.returncode == 0, proc.stderr
    assert digests(done) == before
    dry = snakemake(done, "-n")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr


def test_table_shows_the_thesis_beside_ours(done):
    table = (done / "results" / "relreg-ci" / "tables" / "table45.md").read_text()
    assert "| LSTM (with L2) | thesis | 100.00 | 99.72 | 99.57 | 99.51 | 99.49 |" in table
    assert "not a reproduction" in table
