"""The command line and atomic writes: the plumbing every command relies on."""

import dataclasses
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from psrnn import cli, files, registry
from psrnn.cli import COMMANDS, main


def test_every_command_has_help_and_names_only_commands_and_options_that_exist(capsys):
    """A help text that points to another command (`python -m psrnn config --groups`) names
    one that exists, with an option it has (train-group's once named a `config --groups`)."""
    import re

    helps = {}
    for name in COMMANDS:
        with pytest.raises(SystemExit) as exc:
            main([name, "--help"])
        assert exc.value.code == 0, name
        helps[name] = " ".join(capsys.readouterr().out.split())
    for name, text in helps.items():
        for command, option in re.findall(r"python -m psrnn ([a-z-]+)((?: --[a-z-]+)?)", text):
            assert command in COMMANDS, (name, command)
            assert not option or option.strip() in helps[command], (name, command, option)


def test_each_study_brings_its_own_commands_and_a_name_given_twice_is_refused(monkeypatch):
    """The commands are psrnn.cli.CORE, then each study's own (Study.commands) in the
    registry's order: a third study adds its commands in its study.py, editing no shared
    file. Two studies giving one name, a study giving a shared command's, a job naming none
    of its study's commands or job_commands that are not its data_jobs and paper, are
    errors naming them."""
    first = registry.STUDIES["private_shared"]
    assert list(COMMANDS) == [*cli.CORE, *(c for s in registry.STUDIES.values() for c in s.commands)]
    assert COMMANDS["prepare"] == first.commands["prepare"]
    assert first.job_commands == {
        "fixtures": "fixtures",
        "download": "download",
        "prepare": "prepare",
        "paper": "paper",
    }
    assert not registry.STUDIES["relreg"].commands and not registry.STUDIES["relreg"].job_commands
    third = dataclasses.replace(
        first,
        name="third",
        package="psrnn.studies.third",  # a study is its folder (registry.load_studies)
        data_jobs=("third.data",),
        paper=None,
        commands={"third-data": ("third.data", "make the third study's data")},
        job_commands={"prepare": "third-data"},
    )
    fake = types.ModuleType("fake_studies")
    fake.THIRD = third
    fake.CLASH = dataclasses.replace(third, name="clash", package="psrnn.studies.clash")
    fake.NOJOB = dataclasses.replace(
        third, name="nojob", package="psrnn.studies.nojob", job_commands={"prepare": "nope"}
    )
    fake.OTHER = dataclasses.replace(
        third, name="other", package="psrnn.studies.other", data_jobs=("third.other",)
    )
    monkeypatch.setitem(sys.modules, "fake_studies", fake)
    studies = registry.load_studies({**registry.PLUGINS, "third": "fake_studies:THIRD"})
    assert list(cli.all_commands(studies.values()))[-1] == "third-data"
    with pytest.raises(
        ValueError, match=r"studies 'third' and 'clash' both have the command\(s\) \['third-data'\]"
    ):
        registry.load_studies({"third": "fake_studies:THIRD", "clash": "fake_studies:CLASH"})
    with pytest.raises(ValueError, match="its 'prepare' job runs 'nope', which is none of its commands"):
        registry.load_studies({"nojob": "fake_studies:NOJOB"})
    with pytest.raises(ValueError, match="not the modules of its data_jobs and paper"):
        registry.load_studies({"other": "fake_studies:OTHER"})
    with pytest.raises(ValueError, match=r"study 'third' has the command\(s\) \['train'\], shared"):
        cli.all_commands(
            [dataclasses.replace(third, commands={"train": ("third.train", "its own training")})]
        )


def test_user_errors_are_one_line_and_exit_2(tmp_path, capsys):
    missing = tmp_path / "nope.yaml"
    assert main(["config", str(missing)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert str(missing) in err[0] and err[0].startswith("psrnn config: error:")


def psrnn(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "psrnn", *args], capture_output=True, text=True)


def test_quiet_and_verbose_before_or_after_the_command(tmp_path):
    """-q drops progress and info lines, keeps what was asked for (config's listing, its
    --json) and errors; -v adds debug lines and the traceback behind a one-line error;
    either goes before or after the command's name."""
    small = str(Path(__file__).resolve().parents[1] / "config" / "small.yaml")
    plain = psrnn("config", small)
    assert plain.returncode == 0 and "small: 5 datasets" in plain.stdout and plain.stderr == ""
    for args in (["-q", "config", small], ["config", small, "--quiet"]):
        res = psrnn(*args)
        assert (res.returncode, res.stdout, res.stderr) == (0, plain.stdout, ""), args
    res = psrnn("-q", "config", small, "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["name"] == "small" and res.stderr == ""
    # an info line: on stderr through the `psrnn` logger, silenced by -q
    out = tmp_path / "params.yaml"
    res = psrnn("config", small, "--dvc-params", str(out))
    assert (res.returncode, res.stdout) == (0, "") and res.stderr.startswith(f"INFO psrnn: wrote {out}: ")
    res = psrnn("-q", "config", small, "--dvc-params", str(out))
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "") and out.is_file()
    # progress on stdout (a command that writes files): dropped by -q
    res = psrnn("code-digest", "--out", str(tmp_path / "d"))
    assert res.returncode == 0 and res.stdout.startswith("code-digest: ")
    res = psrnn("-q", "code-digest", "--out", str(tmp_path / "d"))
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    res = psrnn("-q", "config", "/nonexistent.yaml")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == "psrnn config: error: config file not found: /nonexistent.yaml\n"
    res = psrnn("config", small, "-v")
    assert res.returncode == 0 and res.stdout == plain.stdout
    assert (
        "DEBUG psrnn: config: psrnn.config_cli" in res.stderr and "DEBUG psrnn: config: exit 0" in res.stderr
    )
    res = psrnn("-v", "config", "/nonexistent.yaml")
    assert res.returncode == 2 and "Traceback (most recent call last)" in res.stderr
    assert res.stderr.endswith("psrnn config: error: config file not found: /nonexistent.yaml\n")
    assert psrnn("-q", "-v", "config", small).returncode == 2  # one or the other


def test_python_dash_m_entry_point():
    out = subprocess.run(
        [sys.executable, "-m", "psrnn", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("psrnn ")


def test_write_json_is_stable_and_atomic(tmp_path):
    target = tmp_path / "sub" / "m.json"
    files.write_json(target, {"b": 1, "a": [1.5, None]})
    assert target.read_text() == '{\n  "a": [\n    1.5,\n    null\n  ],\n  "b": 1\n}\n'
    assert files.read_json(target) == {"a": [1.5, None], "b": 1}
    assert sorted(os.listdir(target.parent)) == ["m.json"]  # no temporary left behind


def test_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "m.json"
    files.write_json(target, {"v": 1})
    with pytest.raises(ValueError):
        files.write_json(target, {"v": float("nan")})  # NaN is not valid JSON
    assert json.loads(target.read_text()) == {"v": 1}
    assert os.listdir(tmp_path) == ["m.json"]


def test_md5sum(tmp_path):
    p = tmp_path / "x"
    p.write_bytes(b"abc")
    assert files.md5sum(p) == "900150983cd24fb0d6963f7d28e17f72"


def test_interrupted_atomic_path_leaves_target_untouched(tmp_path):
    target = tmp_path / "ckpt.pt"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt):
        with files.atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["ckpt.pt"]


def test_atomic_files_get_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        files.write_text(tmp_path / "t.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "t.txt").stat().st_mode & 0o777 == 0o644


def test_torch_save_is_byte_stable(tmp_path):
    import torch

    obj = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "step": 3}
    files.torch_save(tmp_path / "a.pt", obj)
    files.torch_save(tmp_path / "b.pt", obj)
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()
    back = torch.load(tmp_path / "a.pt", weights_only=True)
    assert torch.equal(back["w"], obj["w"]) and back["step"] == 3


SMALL = Path(__file__).resolve().parents[1] / "config" / "small.yaml"
TRAIN = ["train", "--config", str(SMALL), "--experiment", "mnist_gru", "--out", "run"]
# a billion laughs: each level a list of nine aliases of the one below
LAUGHS = (
    "[&a0 [0, 0, 0, 0, 0, 0, 0, 0, 0], "
    + ", ".join(f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10))
    + "]"
)


@pytest.mark.parametrize(
    "argv,message",
    [
        (TRAIN + ["--set", "lr=fast"], "lr: 'fast' is not of type 'number'"),
        (TRAIN + ["--set", "hidden=abc"], "hidden: 'abc' is not of type 'integer'"),
        (
            TRAIN + ["--set", "device=gpu"],
            "device: 'gpu' is not a device: expected auto, cpu, cuda, cuda:N or mps",
        ),
        (  # a run at the defaults in a final run's folder passed for the suite's (battery B62)
            ["train", "--config", str(SMALL), "--experiment", "mnist_ps30_predrec_a4", "--seed", "1"],
            "mnist_ps30_predrec_a4 has a grid: its runs in results/small/runs/mnist_ps30_predrec_a4 train at "
            "the point select chose (--selected results/small/search/mnist_ps30_predrec_a4/selected.json); "
            "give that, --point ID for a search run, or --out DIR for a run at the defaults",
        ),
        (TRAIN + ["--seed", "-1"], "seed: -1 is not a seed: expected an integer from 0 to 4294967295"),
        (TRAIN + ["--seed", str(2**64)], f"seed: {2**64} is not a seed"),
        (TRAIN + ["--set", "tasks=[rec"], "--set 'tasks=[rec': expected ',' or ']'"),
        (["config", "syntax.yaml"], "syntax.yaml:2:6: mapping values are not allowed here"),
        (["config", "duplicate.yaml"], "duplicate.yaml:3:1: duplicate key 'name' (first on line 2)"),
        (["config", "extends.yaml"], "extends.yaml: extends: nope.yaml: file not found ("),
        (
            ["config", "grid.yaml"],
            "grid.yaml: experiments.mnist_gru.grid.lr[1]: 'fast' is not of type 'number'",
        ),
        (["config", "seeds.yaml"], "seeds.yaml: seeds[1]: 4294967296 is not a seed"),
        # PyYAML's recursion: a RecursionError traceback before
        (["config", "deep.yaml"], "deep.yaml: nested too deeply (brackets or indentation hundreds"),
        (TRAIN + ["--set", "x=" + "[" * 20_000], "--set x=...: nested too deeply"),
        # aliases nine levels deep, 9^9 values from 600 bytes: the schema check ran for hours
        (["config", "laughs.yaml"], "laughs.yaml:1:1: more than 100,000 values once its aliases (*name)"),
        (TRAIN + ["--set", "seeds=" + LAUGHS], "--set 'seeds=[&a0 [0, 0, 0, 0, 0, 0, 0, 0, 0], &a1 [*a0"),
        # refused before parsing (its first line is a syntax error): a 50 MB one took minutes
        (["config", "huge.yaml"], "huge.yaml: 1.1 MB is too large for a config file (at most 1 MB)"),
        (["config", "fixtures.yaml"], "fixtures.yaml: fixtures: '../../x' is not inside the working folder"),
        (
            ["config", str(SMALL), "--dvc-params", "params.yaml", "--dvc-name", "small"],
            "--dvc-name small: DVC's name ends in -dvc (small-dvc, say), so that its stages never rewrite",
        ),
        (  # two members of one process on one folder: "another process is training this run" before
            ["train-group", "--config", str(SMALL), "--experiment", "mnist_gru", "--seeds", "3", "0", "3"],
            "--seeds: 3 given twice (each names one run: give it once)",
        ),
    ],
)
def test_bad_input_is_one_line_naming_it_and_writes_nothing(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    inputs = {
        "syntax.yaml": "name: x\n  bad: [\n",
        "duplicate.yaml": f"extends: {SMALL}\nname: a\nname: b\n",
        "extends.yaml": "extends: nope.yaml\n",
        "grid.yaml": f"extends: {SMALL}\nexperiments: {{mnist_gru: {{grid: {{lr: [0.01, fast]}}}}}}\n",
        "seeds.yaml": f"extends: {SMALL}\nseeds: [0, 4294967296]\n",
        "deep.yaml": "x: " + "[" * 20_000 + "]" * 20_000 + "\n",
        "huge.yaml": "x: [\n" + "a" * 1_100_000 + "\n",
        "fixtures.yaml": f"extends: {SMALL}\nfixtures: ../../x\n",
        "laughs.yaml": f"extends: {SMALL}\nseeds: {LAUGHS}\n",
    }
    for name, text in inputs.items():
        (tmp_path / name).write_text(text)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"psrnn {argv[0]}: error: ")
    assert message in err[0]
    assert sorted(os.listdir(tmp_path)) == sorted(inputs)  # no run folder, results/ or data/


def test_a_file_over_the_size_limit_is_one_line_naming_it_and_leaves_nothing(tmp_path):
    """`ulimit -f` (EFBIG, "File too large": Python ignores SIGXFSZ, so the write fails) is
    one line naming the file, as a full disk is, and the temporary file is gone."""
    import resource
    import signal

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))  # params.yaml of small is ~4 kB

    out = tmp_path / "params.yaml"
    res = subprocess.run(
        [sys.executable, "-m", "psrnn", "config", str(SMALL), "--dvc-params", str(out)],
        capture_output=True,
        text=True,
        preexec_fn=limited,
    )
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == (
        f"psrnn config: error: {out}: file too large for this shell's file size limit (ulimit -f): raise it\n"
    )
    assert os.listdir(tmp_path) == []


def test_a_library_that_cannot_be_mapped_is_one_line(tmp_path):
    """`ulimit -v` below what torch maps: its ImportError was a 29-line stack (battery B60)."""
    import resource

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1_000_000_000, 1_000_000_000))

    res = subprocess.run(
        [sys.executable, "-m", "psrnn", "train", "--config", str(SMALL), "--experiment", "mnist_gru"],
        capture_output=True,
        text=True,
        preexec_fn=limited,
        cwd=tmp_path,
    )
    assert res.returncode == 2, res.stderr
    [line] = res.stderr.strip().splitlines()
    assert line.startswith("psrnn train: error: could not load a library (libtorch")
    assert line.endswith("shared object): check `ulimit -v` and the install")
    assert os.listdir(tmp_path) == []


def test_train_group_interrupted_says_what_its_checkpoints_keep(monkeypatch, capsys):
    """train-group checkpoints every --save-every seconds, not every epoch: stopped (Ctrl-C,
    a scheduler's SIGTERM) before its first checkpoint, a run starts again."""
    from psrnn.engine import group

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(group, "run", interrupted)
    assert main(["train-group", "--config", str(SMALL), "--experiment", "mnist_gru", "--seeds", "0"]) == 130
    assert capsys.readouterr().err == (
        "psrnn train-group: interrupted; the same command resumes each run from its last checkpoint "
        f"(written every --save-every seconds, {group.SAVE_EVERY_S:.0f} by default, so up to that much "
        "training is lost; a run stopped before its first one starts again)\n"
    )
    assert group.SAVE_EVERY_S == 60  # the message's number


def test_restamp_interrupted_does_not_say_it_resumes(monkeypatch, capsys):
    """restamp keeps nothing of a re-training: "the same command resumes" promised too much."""
    from psrnn.engine import restamp

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(restamp, "run", interrupted)
    assert main(["restamp", "--config", str(SMALL)]) == 130
    assert capsys.readouterr().err == (
        "psrnn restamp: interrupted; the same command re-trains and compares again, and finishes any "
        "stamps it had begun (with --verify, from the first experiment it had not proven)\n"
    )


@pytest.mark.parametrize("kind", ["folder", "fifo", "device", "dangling link"])
def test_a_config_path_that_is_no_file_says_what_it_is(kind, tmp_path, capsys):
    """A config path that exists but is a folder, a FIFO (never opened: no hang) or a
    device had been "not found" (fault battery B, N26); `extends:` says the same."""
    path = tmp_path / "c.yaml"
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path = Path("/dev/null")
    else:
        path.symlink_to(tmp_path / "gone.yaml")
    says = {
        "folder": "is a folder, not a file",
        "fifo": "is not a regular file (a device, FIFO or socket)",
        "device": "is not a regular file (a device, FIFO or socket)",
        "dangling link": "not found (a link to nothing)",
    }[kind]
    assert main(["config", str(path)]) == 2
    assert capsys.readouterr().err == f"psrnn config: error: config file {says}: {path}\n"
    child = tmp_path / "child.yaml"
    child.write_text(f"extends: {path}\n")
    assert main(["config", str(child)]) == 2
    if kind == "dangling link":  # extends: names the resolved file, which is not there
        says = "not found"
    err = capsys.readouterr().err
    assert err == f"psrnn config: error: {child}: extends: {path}: file {says} ({path.resolve()})\n"


def test_python_m_psrnn_cli_runs_the_cli():
    """`python -m psrnn.cli ...` had exited 0 doing nothing (battery J-10 of stop 62)."""
    res = subprocess.run(
        [sys.executable, "-m", "psrnn.cli", "train", "--config", "nowhere.yaml", "--experiment", "x"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2
    assert res.stderr.startswith("psrnn train: error: ") and "nowhere.yaml" in res.stderr, res.stderr
