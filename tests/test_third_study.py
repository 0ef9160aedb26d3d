"""Issue 53's promise, kept: a third study is its folder, one line in PLUGINS and its suite
config. A copy of the project gets tests/fixtures/studies/parity/ (a GRU on bit-string parity)
as src/psrnn/studies/parity/, one registry line and config/parity.yaml, nothing else, and the
shared Snakefile runs it through search, select, train and compile: select ranks by the
study's own metric (the lowest valid_loss), the table sets its reference row beside our
numbers, the other studies' training digests are those of this tree, and the contract
tests (tests/test_study_contract.py, unedited) run the study's own case from its folder.

    uv run --frozen pytest tests/test_third_study.py      # about 90 s on 2 loaded cores
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from psrnn import config as C
from psrnn.engine import codehash

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).parent / "fixtures" / "studies" / "parity"
LINE = '    "parity": "psrnn.studies.parity.study:STUDY",\n'


def sh(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def copy_project(dest: Path) -> None:
    """The tracked files but results/ and tests/, as a git repository of their own."""
    files = sh(C.ROOT, "git", "ls-files").stdout.split("\n")
    for f in files:
        if f and f.split("/")[0] not in ("results", "tests") and (C.ROOT / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(C.ROOT / f, dest / f)
    for cmd in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
    ):
        assert sh(dest, "git", *cmd).returncode == 0


def add_study(root: Path) -> None:
    """What docs/extending.md asks of a study: its folder, one PLUGINS line, its config."""
    shutil.copytree(
        FIXTURE,
        root / "src/psrnn/studies/parity",
        ignore=shutil.ignore_patterns("parity.yaml", "__pycache__"),
    )
    registry = root / "src/psrnn/registry.py"
    text = registry.read_text()
    anchor = '    "relreg": "psrnn.studies.relreg.study:STUDY",\n'
    registry.write_text(text.replace(anchor, anchor + LINE))
    shutil.copy2(FIXTURE / "parity.yaml", root / "config/parity.yaml")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("third")
    copy_project(root)
    add_study(root)
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    proc = sh(root, sys.executable, "-m", "psrnn", "config", "config/parity.yaml", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = sh(
        root, sys.executable, "-m", "snakemake", "--configfile", "config/parity.yaml", "--cores", "2", env=env
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root, env


def test_only_the_study_folder_its_line_and_config_are_new(project):
    root, _ = project
    status = sh(root, "git", "status", "--porcelain", "--untracked-files=all", "--", "src", "config").stdout
    changed = sorted(line[3:] for line in status.splitlines() if "__pycache__" not in line)
    assert changed == sorted(
        ["config/parity.yaml", "src/psrnn/registry.py"]
        + [
            f"src/psrnn/studies/parity/{p.name}"
            for p in FIXTURE.iterdir()
            if p.is_file() and p.name != "parity.yaml"
        ]
    )
    diff = sh(root, "git", "diff", "-U0", "src/psrnn/registry.py").stdout
    assert [ln for ln in diff.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")] == [
        "+" + LINE.rstrip("\n")
    ]


def test_the_other_studies_digests_do_not_move(project):
    root, env = project
    names = ("private_shared", "relreg")
    code = f"from psrnn.engine import codehash as h; print(*map(h.training_digest, {names!r}))"
    out = sh(root, sys.executable, "-c", code, env=env).stdout.split()
    assert out == [codehash.training_digest(name) for name in names]


def test_the_contract_tests_run_the_new_studys_own_case(project):
    """tests/test_study_contract.py, unedited in the copy, finds the parity study's case in
    its folder (Study.contract) and its config (Study.ci_config): every one of its tests
    parametrized by study runs on parity and passes (about 15 s)."""
    import inspect

    import test_study_contract as contract

    root, env = project
    (root / "tests").mkdir(exist_ok=True)
    for name in ("conftest.py", "test_study_contract.py", "test_training.py"):
        shutil.copy2(Path(__file__).parent / name, root / "tests" / name)
    proc = sh(
        root,
        *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA"),
        *("tests/test_study_contract.py", "-k", "parity or brings_a_case"),
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    passed = {ln.split("::")[1] for ln in proc.stdout.splitlines() if ln.startswith("PASSED ")}
    per_study = {
        name
        for name, f in vars(contract).items()
        if name.startswith("test_") and {"case", "name"} & set(inspect.signature(f).parameters)
    }
    assert len(per_study) >= 7 and {f"{name}[parity]" for name in per_study} <= passed
    assert "test_every_study_brings_a_case_and_hooks_the_engine_can_call" in passed


def test_select_ranks_by_the_study_metric(project):
    root, _ = project
    search = root / "results/parity/search/gru"
    records = {p.name: json.loads((p / "metrics.json").read_text()) for p in search.iterdir() if p.is_dir()}
    assert len(records) == 2
    sel = json.loads((search / "selected.json").read_text())
    assert sel["metric"] == "valid_loss" and sel["mode"] == "min" and "best_valid_acc" not in sel
    assert sel["point"] == min(records, key=lambda p: records[p]["valid_loss"])
    assert sel["valid_loss"] == records[sel["point"]]["valid_loss"]
    assert {c["point"]: c["valid_loss"] for c in sel["candidates"]} == {
        p: m["valid_loss"] for p, m in records.items()
    }


def test_the_table_sets_its_reference_beside_ours(project):
    root, _ = project
    runs = [json.loads(p.read_text()) for p in (root / "results/parity/runs/gru").glob("seed*/metrics.json")]
    assert sorted(r["seed"] for r in runs) == [0, 1]
    table = (root / "results/parity/tables/table1.md").read_text()
    assert table.startswith("**Table 1.** Test accuracy (%) on bit-string parity.")
    row = next(line for line in table.splitlines() if line.startswith("| GRU |"))
    assert "| 50.0 |" in row
    mean = sum(100 * r["test_acc"] for r in runs) / 2
    assert f"{mean:.2f} ±" in row
