"""Code digests (psrnn.codehash): blind to comments, docstrings and layout, moved by any
real change of the code a job runs, and carried by every training job's settings."""

import json
import shutil

from psrnn import codehash
from psrnn import config as C
from psrnn import workflow as W

ROOTS = codehash.entry_points()["psrnn-train"]


def copy_src(tmp_path):
    shutil.copytree(codehash.SRC / "psrnn", tmp_path / "psrnn", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_a_comment_docstring_or_layout_edit_keeps_the_digest_and_a_real_change_moves_it(tmp_path):
    src = copy_src(tmp_path)
    before = codehash.digest(ROOTS, src)
    epoch = src / "psrnn" / "epoch.py"
    text = epoch.read_text()
    assert before == codehash.digest(ROOTS, codehash.SRC)  # a copy is the same code
    edited = text.replace('"""One training epoch', '"""Reworded: one training epoch', 1)
    edited = edited.replace(
        "EVAL_ANCHOR_SEED = 1234", "EVAL_ANCHOR_SEED  =  1234  # same, spaced\n# a comment"
    )
    epoch.write_text(edited)
    assert codehash.digest(ROOTS, src) == before
    epoch.write_text(text.replace("EVAL_ANCHOR_SEED = 1234", "EVAL_ANCHOR_SEED = 1235"))
    assert codehash.digest(ROOTS, src)["digest"] != before["digest"]
    # a module the training jobs do not import changes none of their digest
    report = src / "psrnn" / "results" / "report.py"
    report.write_text(report.read_text() + "\nX = 1\n")
    epoch.write_text(text)
    assert codehash.digest(ROOTS, src) == before
    # nor does a new command in the CLI's table (the command that trains is its own module)
    cli = src / "psrnn" / "cli.py"
    table = "COMMANDS: dict[str, tuple[str, str]] = {"
    assert cli.read_text().count(table) == 1
    cli.write_text(cli.read_text().replace(table, table + '\n    "mine": ("mine", "my command"),'))
    assert codehash.digest(ROOTS, src) == before
    jobenv = src / "psrnn" / "jobenv.py"  # but the environment a job runs in is followed
    jobenv.write_text(jobenv.read_text() + "\nX = 1\n")
    assert codehash.digest(ROOTS, src)["digest"] != before["digest"]


def test_the_digests_follow_the_imports_of_each_jobs_entry_points():
    train = codehash.digest(ROOTS)["modules"]
    assert {"psrnn.engine", "psrnn.study", "psrnn.epoch", "psrnn.models", "psrnn.checkpoint"} <= set(train)
    assert not set(train) & (codehash.WORKFLOW | {"psrnn.results.report", "psrnn.relreg.training"})
    relreg = codehash.digest(codehash.entry_points()["relreg-train"])["modules"]
    assert {"psrnn.relreg.study", "psrnn.relreg.training", "psrnn.relreg.proto"} <= set(relreg)
    compile_ = codehash.digest(codehash.entry_points()["psrnn-compile"])["modules"]
    assert "psrnn.results.figures" in compile_ and "psrnn.epoch" not in compile_


def test_every_training_job_carries_its_studys_training_digest():
    cfg = C.load_suite(C.ROOT / "config" / "small.yaml")
    digest = codehash.training_digest("psrnn")
    for exp in C.enabled_experiments(cfg):
        assert json.loads(W.experiment_spec(cfg, exp))["code"] == digest
    relreg = C.load_suite(C.ROOT / "config" / "relreg-ci.yaml")
    assert (
        json.loads(W.experiment_spec(relreg, "lstm_l2"))["code"]
        == codehash.training_digest("relreg")
        != digest
    )
