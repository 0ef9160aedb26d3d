"""Mistakes on Snakemake's command line and an output folder that cannot be written (issue 51,
case 11): one line each. Where Snakemake's own code fails before the Snakefile runs (a word
after `--configfile` that is no file), its traceback is Snakemake's, and docs/workflow.md
says what it means; these tests pin what Snakemake prints, so a change in it is seen."""

import os
import shutil
from pathlib import Path

from test_workflow import SMALL, snakemake

from psrnn import files

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "workflow.md").read_text()


def lines(res) -> list[str]:
    """What Snakemake printed, stdout and stderr (its errors go to either, by version)."""
    return (res.stdout + res.stderr).strip().splitlines()


def test_a_target_after_configfile_is_read_as_a_config_file_by_snakemake_a_documented_limit(tmp_path):
    """issue 38 item 11 (#46): `--configfile FILE all` takes `all` as a second config file;
    Snakemake opens it before the Snakefile runs, so the suite cannot print a line first."""
    res = snakemake("-n", "--configfile", str(SMALL), "all", cwd=tmp_path)
    assert res.returncode != 0
    assert "FileNotFoundError: [Errno 2] No such file or directory: 'all'" in lines(res)
    assert "`--configfile=config/small.yaml all`" in DOC and "No such file or directory: 'all'" in DOC


def test_a_misspelt_configfile_is_snakemake_s_own_error_naming_it_a_documented_limit(tmp_path):
    """issue 38 item 11 (#47): Snakemake reads the config files before the Snakefile."""
    res = snakemake("-n", "--configfile", "config/smal.yaml", cwd=tmp_path)
    assert res.returncode != 0
    assert "FileNotFoundError: [Errno 2] No such file or directory: 'config/smal.yaml'" in lines(res)
    assert "misspelt config file" in DOC


def test_an_unknown_target_is_one_message_without_a_traceback(tmp_path):
    """issue 38 item 11 (#50): Snakemake 9 says it itself, after the Snakefile, without a stack."""
    res = snakemake("-n", "nosuchtarget", "--configfile", str(SMALL), cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "Traceback" not in out
    assert "No rule to produce nosuchtarget" in out
    assert "MissingRuleException" in DOC


def test_a_results_folder_that_cannot_be_written_stops_snakemake_in_one_line(tmp_path):
    """issue 51 case 11d: a file where results/small should be was Snakemake's own
    NotADirectoryError stack; a read-only results folder failed its first job ("Failed to
    create output directory"). The Snakefile checks the folder before planning."""
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "small").write_text("not a folder")
    res = snakemake("--cores", "1", "--configfile", str(SMALL), cwd=tmp_path)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert lines(res)[-1] == (
        f"psrnn: {tmp_path}/results/small: a file where a folder of results/small should be: move it away"
    )
    assert not (tmp_path / "data").exists()  # nothing ran


def test_a_read_only_folder_is_named_in_one_line(tmp_path, monkeypatch):
    """A read-only folder as unwritable() sees it. Tests run as root here (uid 0 writes
    through any mode bits, so chmod cannot make one), hence os.access answers for the file
    system: a read-only mount answers so (seen with a read-only tmpfs: snakemake printed
    this line where before its first job failed with 'Failed to create output directory')."""
    (tmp_path / "results").mkdir()
    assert files.unwritable(tmp_path / "results" / "small") is None
    if os.geteuid() != 0:
        (tmp_path / "results").chmod(0o555)
    else:
        monkeypatch.setattr(os, "access", lambda *_: False)
    assert files.unwritable(tmp_path / "results" / "small") == (
        f"{tmp_path}/results: not writable (a read-only file system, or its permissions): "
        f"{tmp_path}/results/small cannot be made"
    )
    (tmp_path / "results").chmod(0o755)


def test_a_module_that_does_not_parse_stops_snakemake_in_one_line(tmp_path):
    """battery N8: a typo in a module the training jobs import was an 8-frame
    InputFunctionException per planned job (the digest is read in the input functions). The
    Snakefile now takes the study's training digest before planning: one line naming it."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "psrnn", src / "psrnn", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "config").symlink_to(ROOT / "config")  # the schema, found beside src/
    proto = src / "psrnn" / "studies" / "relreg" / "proto.py"
    proto.write_text(proto.read_text() + "def broken(:\n")
    work = tmp_path / "work"
    work.mkdir()
    res = snakemake(
        "-n", "--configfile", str(ROOT / "config" / "relreg-ci.yaml"), cwd=work, env={"PYTHONPATH": str(src)}
    )
    assert res.returncode != 0 and "Traceback" not in res.stdout + res.stderr
    assert lines(res)[-1] == (
        f"psrnn: {proto}:124: invalid syntax: the code does not parse (every module a job imports "
        "is read for its code digest): fix it and run again"
    )


def test_a_deeply_nested_configfile_or_a_one_letter_config_key_is_snakemake_s_own_stack(tmp_path):
    """battery 51.11c and N12: both fail in Snakemake's own code before the Snakefile runs,
    so docs/workflow.md names them and `psrnn config <file>` as the check to run first."""
    nest = tmp_path / "nest.yaml"
    nest.write_text(
        f"extends: {ROOT / 'config' / 'relreg-ci.yaml'}\nname: nest\nnote: {'[' * 20000}{']' * 20000}\n"
    )
    res = snakemake("-n", "--configfile", str(nest), cwd=tmp_path)
    assert res.returncode != 0  # "... exceeded while calling a Python object" here, worded by Python
    assert any(line.startswith("RecursionError: maximum recursion depth exceeded") for line in lines(res))
    res = snakemake("-n", "--configfile", str(SMALL), "--config", "k=v", cwd=tmp_path)
    assert res.returncode != 0
    assert "ValueError: Invalid config definition: Config entry must start with a valid identifier." in lines(
        res
    )
    assert "RecursionError" in DOC and "Config entry must start with a valid identifier" in DOC
    assert "python -m psrnn config <file>" in DOC
