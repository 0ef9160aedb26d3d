"""Code digests (psrnn.engine.codehash): blind to comments, docstrings, layout and where the
files lie, moved by any real change of the code a job runs, kept apart per study, and
carried by every training job's settings."""

import json
import shutil

import pytest
import yaml

from psrnn import config as C
from psrnn import registry
from psrnn import workflow as W
from psrnn.engine import codehash
from psrnn.errors import UserError

JOBS = codehash.jobs()
PS = "psrnn/studies/private_shared"
# every study's training digests, and its compile digests: what a shared module moves
TRAIN = {f"{name}-train" for name in registry.STUDIES}
COMPILE = {f"{name}-compile" for name in registry.STUDIES}


def copy_src(tmp_path):
    shutil.copytree(codehash.SRC / "psrnn", tmp_path / "psrnn", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def digests(src):
    """Every job's digest of the package under `src`."""
    return {name: codehash.digest(roots, scope, src)["digest"] for name, (roots, scope) in JOBS.items()}


def edit(path, old, new):
    text = path.read_text()
    assert text.count(old) >= 1, (path, old)
    path.write_text(text.replace(old, new))


def test_a_comment_docstring_or_layout_edit_keeps_the_digest_and_a_real_change_moves_it(tmp_path):
    src = copy_src(tmp_path)
    before = digests(src)
    assert before == digests(codehash.SRC)  # a copy is the same code
    epoch = src / PS / "epoch.py"
    text = epoch.read_text()
    edited = text.replace('"""One training epoch', '"""Reworded: one training epoch', 1)
    epoch.write_text(
        edited.replace("EVAL_ANCHOR_SEED = 1234", "EVAL_ANCHOR_SEED  =  1234  # same, spaced\n# a comment")
    )
    assert digests(src) == before
    epoch.write_text(text.replace("EVAL_ANCHOR_SEED = 1234", "EVAL_ANCHOR_SEED = 1235"))
    assert digests(src)["private_shared-train"] != before["private_shared-train"]
    epoch.write_text(text)
    # a module the training jobs do not import changes none of their digests
    report = src / PS / "results" / "report.py"
    report.write_text(report.read_text() + "\nX = 1\n")
    after = digests(src)
    assert (
        after["private_shared-train"] == before["private_shared-train"]
        and after["private_shared-compile"] != before["private_shared-compile"]
    )
    # nor does the core (the command table, how files are written): what it decides
    # reaches a run as its resolved settings, which the jobs carry beside the digest
    report.write_text(report.read_text().removesuffix("\nX = 1\n"))
    for core in ("cli.py", "files.py", "gpus.py", "config.py", "engine/codehash.py"):
        (src / "psrnn" / core).write_text((src / "psrnn" / core).read_text() + "\nX = 1\n")
    assert digests(src) == before  # codehash: in the engine, but it decides which jobs run
    jobenv = src / "psrnn" / "engine" / "jobenv.py"  # but the environment a job runs in is followed
    jobenv.write_text(jobenv.read_text() + "\nX = 1\n")
    assert (
        digests(src)["private_shared-train"] != before["private_shared-train"] != digests(src)["relreg-train"]
    )


def test_a_byte_order_mark_or_a_coding_cookie_keeps_the_digest(tmp_path):
    """A module saved with a UTF-8 byte order mark, or as latin-1 with its coding cookie,
    imports fine; the digest read it as text and failed (and with it Snakemake's planning
    and `psrnn train`). It now reads bytes as Python does: the same code, the same digest."""
    src = copy_src(tmp_path)
    before = digests(src)
    epoch = src / PS / "epoch.py"
    text = epoch.read_text()
    epoch.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert digests(src) == before
    cookie = "# -*- coding: latin-1 -*-\n" + text.replace(
        "EVAL_ANCHOR_SEED = 1234", "EVAL_ANCHOR_SEED = 1234  # é"
    )
    epoch.write_bytes(cookie.encode("latin-1"))
    assert digests(src) == before
    epoch.write_bytes(cookie.replace("# é", "\nS = 'é'").encode("latin-1"))  # a real change, in latin-1
    assert digests(src)["private_shared-train"] != before["private_shared-train"]


@pytest.mark.parametrize(
    ("appended", "line", "why"),
    [
        ("def broken(:\n", 124, "invalid syntax"),
        ("if True:\npass\n", 125, "expected an indented block after 'if' statement on line 124"),
    ],
)
def test_a_module_that_does_not_parse_is_one_line_naming_its_file_and_line(tmp_path, appended, line, why):
    """A developer's typo in a module a training job imports (battery N8): code-digest gave a
    full stack and Snakemake's planning an 8-frame InputFunctionException. Now the digest
    raises a UserError naming the file and line (the CLI and the Snakefile print it as one
    line); the file is found through the study's imports, as the jobs find it."""
    src = copy_src(tmp_path)
    proto = src / "psrnn/studies/relreg/proto.py"
    assert len(proto.read_text().splitlines()) == 123  # so the appended lines are 124 on
    proto.write_text(proto.read_text() + appended)
    roots, scope = JOBS["relreg-train"]
    with pytest.raises(UserError) as err:
        codehash.digest(roots, scope, src)
    assert str(err.value) == (
        f"{proto}:{line}: {why}: the code does not parse (every module a job imports is read "
        "for its code digest): fix it and run again"
    )
    proto.write_bytes(b"X = 1\0\n")  # a NUL byte: ValueError before Python 3.12, SyntaxError after
    with pytest.raises(UserError, match=f"^{proto}(:1)?: source code (string )?cannot contain null bytes: "):
        codehash.digest(roots, scope, src)


@pytest.mark.parametrize(
    ("edited", "moves", "keeps"),
    [
        (
            f"{PS}/epoch.py",
            {"private_shared-train"},
            {"relreg-train", "relreg-compile", "private_shared-data"},
        ),
        # the runs read what prepare writes, not its code
        (f"{PS}/data/prepare.py", {"private_shared-data"}, {"relreg-train", "relreg-compile"}),
        (
            "psrnn/studies/relreg/proto.py",
            {"relreg-train"},
            {"private_shared-train", "private_shared-compile", "private_shared-data"},
        ),
        # imported by no module, only by string (the registry row's `fused`, importlib.import_module
        # in psrnn.engine.group; issue 51 case 8): a change still moves the training digest
        (
            "psrnn/studies/relreg/fused.py",
            {"relreg-train"},
            {"private_shared-train", "private_shared-compile", "private_shared-data"},
        ),
        (
            "psrnn/studies/relreg/verdicts.py",
            {"relreg-compile"},
            {"relreg-train", "private_shared-train", "private_shared-compile"},
        ),
        ("psrnn/engine/fit.py", TRAIN, COMPILE),
        ("psrnn/report/stats.py", COMPILE, TRAIN),
    ],
)
def test_an_edit_moves_the_digests_of_its_own_study_only(tmp_path, edited, moves, keeps):
    """The measured leak of the flat layout: an edit to one study's module moved the other
    study's training digest (every one of its runs would re-train). Now a study's training
    digest is the engine and its own folder; its compile digest the report toolkit and its
    own folder."""
    src = copy_src(tmp_path)
    before = digests(src)
    path = src / edited
    path.write_text(path.read_text() + "\nCHANGED = 1\n")
    after = digests(src)
    assert {n for n in before if after[n] != before[n]} == moves
    assert not keeps & moves


@pytest.mark.parametrize(
    ("study", "old", "new"),
    [
        # how select ranks its grid (relreg breaks ties on the main loss alone)
        ("relreg", '("valid_main_loss",)),', '("valid_main_loss", "train_loss")),'),
        # which settings a run may change and still resume its checkpoint
        (
            "private_shared",
            'resume_exempt=("progress", "device", "max_tokens", "cuda_graphs"),',
            'resume_exempt=("progress", "max_tokens", "cuda_graphs"),',
        ),
    ],
)
def test_an_edit_to_a_studys_declarations_moves_its_training_digest_only(tmp_path, study, old, new):
    """A study's study.py declares what decides its training (its selection, group key,
    settings a run may resume under): its training jobs start there (codehash.jobs), so a
    real edit re-runs that study's runs and no other study's; a comment moves nothing."""
    src = copy_src(tmp_path)
    before = digests(src)
    module = registry.PLUGINS[study].partition(":")[0]  # psrnn.studies.<folder>.study
    assert module in JOBS[f"{study}-train"][0]
    path = src / (module.replace(".", "/") + ".py")
    edit(path, old, f"{old}  # a comment")
    assert digests(src) == before
    edit(path, f"{old}  # a comment", new)
    after = digests(src)
    assert {n for n in before if after[n] != before[n]} == {f"{study}-train"}


def test_a_pure_move_or_rename_of_modules_changes_no_digest(tmp_path):
    """Digests hash content, not paths: moving relreg's cells into a subpackage and renaming
    the engine's run-log module (every import rewritten, the same local names) re-trains
    nothing; importing a name from another module than before does."""
    src = copy_src(tmp_path)
    before = digests(src)
    relreg = src / "psrnn" / "studies" / "relreg"
    (relreg / "cells").mkdir()
    (relreg / "cells" / "__init__.py").write_text('"""Cells."""\n')
    for cell in ("proto", "lstm"):
        (relreg / f"{cell}.py").rename(relreg / "cells" / f"{cell}.py")
    (src / "psrnn" / "engine" / "runlog.py").rename(src / "psrnn" / "engine" / "records.py")
    for path in (src / "psrnn").rglob("*.py"):
        text = path.read_text()
        new = (
            text.replace("psrnn.studies.relreg.proto", "psrnn.studies.relreg.cells.proto")
            .replace("psrnn.studies.relreg.lstm", "psrnn.studies.relreg.cells.lstm")
            .replace("from psrnn.engine.runlog import", "from psrnn.engine.records import")
        )
        if new != text:
            path.write_text(new)
    assert {m for m in codehash.digest(*JOBS["relreg-train"], src)["modules"] if "cells" in m} == {
        "psrnn.studies.relreg.cells",
        "psrnn.studies.relreg.cells.proto",
        "psrnn.studies.relreg.cells.lstm",
    }
    after = digests(src)
    # the new package's __init__ is new code in relreg's training closure; nothing else moved
    assert {n for n in before if after[n] != before[n]} <= {"relreg-train"}
    (relreg / "cells" / "__init__.py").unlink()  # a namespace package: no new code at all
    assert digests(src) == before
    # the same names imported from elsewhere is other code
    models = relreg / "models.py"
    assert "from psrnn.studies.relreg.cells.lstm import LSTMModel" in models.read_text()
    edit(
        models,
        "from psrnn.studies.relreg.cells.lstm import LSTMModel",
        "from psrnn.studies.relreg.rmc import RMCModel as LSTMModel",
    )
    assert digests(src)["relreg-train"] != before["relreg-train"]


def test_each_digest_is_named_by_its_study_and_job_as_dvc_yaml_reads_it():
    """<study>-<job>.json, the study by its registry name (its folder's: private_shared,
    not the project's name psrnn, since issue 53): the files the `code` stage writes and
    the stages depend on."""
    assert set(JOBS) == {
        "private_shared-data",
        "private_shared-train",
        "private_shared-compile",
        "relreg-train",
        "relreg-compile",
    }
    stages = yaml.safe_load((C.ROOT / "dvc.yaml").read_text())["stages"]
    deps = {d for s in stages.values() for d in s.get("deps", []) if str(d).startswith("results/code/")}
    assert deps == {f"results/code/{name}.json" for name in JOBS}


def test_the_digests_follow_the_imports_of_each_jobs_entry_points():
    train = codehash.digest(*JOBS["private_shared-train"])["modules"]
    assert {
        "psrnn.engine.fit",
        "psrnn.engine.group",
        "psrnn.studies.private_shared.hooks",
        "psrnn.studies.private_shared.epoch",
        "psrnn.studies.private_shared.models",
        "psrnn.engine.checkpoint",
        "psrnn.studies.private_shared.study",  # its declarations decide what trains
    } <= set(train)
    assert all(m.startswith(("psrnn.engine", "psrnn.studies.private_shared")) for m in train)
    assert not set(train) & (codehash.WORKFLOW | {"psrnn.studies.private_shared.results.report"})
    relreg = codehash.digest(*JOBS["relreg-train"])["modules"]
    assert {
        "psrnn.studies.relreg.hooks",
        "psrnn.studies.relreg.training",
        "psrnn.studies.relreg.proto",
        "psrnn.studies.relreg.study",
    } <= set(relreg)
    assert all(m.startswith(("psrnn.engine", "psrnn.studies.relreg")) for m in relreg)
    compile_ = codehash.digest(*JOBS["private_shared-compile"])["modules"]
    assert {"psrnn.studies.private_shared.results.figures", "psrnn.report.figures"} <= set(compile_)
    assert "psrnn.studies.private_shared.epoch" not in compile_


def test_every_training_job_carries_its_studys_training_digest():
    cfg = C.load_suite(C.ROOT / "config" / "small.yaml")
    digest = codehash.training_digest("private_shared")
    for exp in C.enabled_experiments(cfg):
        assert json.loads(W.experiment_spec(cfg, exp))["code"] == digest
    relreg = C.load_suite(C.ROOT / "config" / "relreg-ci.yaml")
    assert (
        json.loads(W.experiment_spec(relreg, "lstm_l2"))["code"]
        == codehash.training_digest("relreg")
        != digest
    )


FIXED = '''"""A fixed module: its digest is stored below and must never move."""
from __future__ import annotations

import math as m


class Step:
    """Docstrings are not hashed."""

    def __init__(self, lr: float = 1e-3, *, name: str = "adam") -> None:
        self.lr, self.name = lr, name  # comments are not in the tree

    async def run(self, xs: list[int]) -> dict[str, float]:
        total = sum(x * x for x in xs if x > 0)
        return {f"{self.name}-{k}": m.sqrt(v) for k, v in [("a", total)]}


def scale(x, /, y=2, *args, **kw):
    with open(x) as f, open(y) as g:
        try:
            return f.read() + g.read()
        except (OSError, ValueError) as e:
            raise RuntimeError(str(e)) from None
        finally:
            lambda: (yield_ := 1)
'''
FIXED_HASH = "43617317"  # sha256 of codehash.canonical(FIXED's tree without docstrings), first 8


def fixed_hash(python="python"):
    import subprocess
    import sys

    code = (
        "import ast, hashlib, sys; from psrnn.engine import codehash as c; "
        "t = c.without_docstrings(ast.parse(sys.stdin.read())); "
        "print(hashlib.sha256(c.canonical(t).encode()).hexdigest()[:8])"
    )
    exe = sys.executable if python == "python" else python
    env = {"PYTHONPATH": str(codehash.SRC), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([exe, "-c", code], input=FIXED, capture_output=True, text=True, env=env, check=True)
    return out.stdout.strip()


def test_a_fixed_modules_digest_is_the_stored_one():
    """The digest hashes codehash.canonical, not ast.dump (whose text moved between Python
    3.11, 3.12 and 3.13 for the same file): a stored value of a fixed module pins it."""
    assert fixed_hash() == FIXED_HASH


def test_the_same_code_gives_the_same_digest_under_every_python_installed_here():
    """Checked 2026-11-27 with pyenv's 3.11.7, 3.12.1 (the GPU hosts' version) and 3.13.0:
    the fixed module and both training digests agree. Interpreters not installed are skipped."""
    import glob

    others = sorted(
        glob.glob(str(__import__("pathlib").Path.home() / ".pyenv/versions/3.1[1-4]*/bin/python3"))
    )
    if not others:
        pytest.skip("no other Python under ~/.pyenv/versions")
    for exe in others:
        assert fixed_hash(exe) == FIXED_HASH, exe
