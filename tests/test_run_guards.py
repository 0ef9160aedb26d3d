"""What a user's mistakes and accidents meet: the same numbers however a run was started, a
second writer refused, one-line errors for broken files and closed pipes, labels checked."""

import importlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from test_training import Interrupt, kill_at, quiet, small_cfg, write_images

from psrnn import compile as compile_cmd
from psrnn import config as C
from psrnn.cli import main
from psrnn.engine.checkpoint import KERNEL_ENV, ConfigChanged
from psrnn.engine.fit import fit
from psrnn.errors import UserError
from psrnn.studies.private_shared.data.fixtures import gzip_bytes, idx_bytes

RELREG_CI = str(C.ROOT / "config" / "relreg-ci.yaml")
POINT = "hidden-8_l2-0.0_lr-0.05"


def clean_env() -> dict[str, str]:
    """This process' environment without the kernel variables a suite's job_env sets."""
    return {k: v for k, v in os.environ.items() if k not in KERNEL_ENV}


PYTHON_M = (sys.executable, "-m", "psrnn")


def train_cmd(
    out: Path, env: dict[str, str], before: tuple[str, ...] = (), program: tuple[str, ...] = PYTHON_M
) -> dict:
    args = ["--config", RELREG_CI, "--experiment", "lstm_l2", "--point", POINT, "--threads", "1"]
    subprocess.run(
        [*program, *before, "train", *args, "--out", str(out)],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return json.loads((out / "metrics.json").read_text())


def test_a_run_by_hand_gives_the_numbers_of_a_run_under_the_suites_job_env(tmp_path):
    suite = C.load_suite(RELREG_CI)
    assert suite["job_env"]  # the case at hand: the suite picks CPU kernels
    by_hand = train_cmd(tmp_path / "hand", clean_env())  # as the README's "train one model"
    as_snakemake = train_cmd(tmp_path / "snake", {**clean_env(), **suite["job_env"]})  # its jobs export it
    assert by_hand["kernel_env"] == as_snakemake["kernel_env"] == suite["job_env"]
    for key in ("test", "best_valid_acc", "best_epoch", "valid_main_loss", "train_loss"):
        assert by_hand[key] == as_snakemake[key], key
    assert (tmp_path / "hand" / "history.csv").read_bytes() == (
        tmp_path / "snake" / "history.csv"
    ).read_bytes()
    # battery 27.1: `-q` (or -v) before the command had trained outside the job_env, and an
    # abbreviated `--conf` too (test_acc 0.635 against Snakemake's 0.655 on small.yaml)
    quiet_first = train_cmd(tmp_path / "quiet", clean_env(), before=("-q",))
    assert quiet_first["kernel_env"] == suite["job_env"] and quiet_first["test"] == by_hand["test"]
    # the confirming pass (stop 60): `-vv` first (N-AB2), and the installed `psrnn` script,
    # which had called cli.main without the job_env (N-AB3: 0.635 again)
    twice = train_cmd(tmp_path / "vv", clean_env(), before=("-qq",))
    script = train_cmd(
        tmp_path / "script", clean_env(), program=(str(Path(sys.executable).parent / "psrnn"),)
    )
    # the confirming pass of stop 62: psrnn.cli.main called from Python (J-5) had trained
    # outside the job_env too; it sets it while torch is not yet loaded
    from_python = train_cmd(
        tmp_path / "main",
        clean_env(),
        program=(sys.executable, "-c", "import sys, psrnn.cli as c; raise SystemExit(c.main(sys.argv[1:]))"),
    )
    for run in (twice, script, from_python):
        assert run["kernel_env"] == suite["job_env"] and run["test"] == by_hand["test"]
    abbreviated = subprocess.run(
        [sys.executable, "-m", "psrnn", "train", "--conf", RELREG_CI, "--experiment", "lstm_l2"],
        env=clean_env(),
        capture_output=True,
        text=True,
    )
    assert abbreviated.returncode == 2
    assert abbreviated.stderr.splitlines()[-1].endswith(
        "error: the following arguments are required: --config"
    )


def test_a_run_in_a_process_that_loaded_torch_without_the_job_env_is_refused(tmp_path, capsys, monkeypatch):
    """Battery J-6 (stop 62): torch imported first (a notebook), then the CLI's entry or main:
    the job_env can no longer take effect, and the run had trained on other CPU kernels than
    the suite's, rc 0. One line names the variables; nothing is written."""
    assert "torch" in sys.modules
    monkeypatch.delenv("MKL_CBWR")
    out = tmp_path / "run"
    assert (
        main(["train", "--config", RELREG_CI, "--experiment", "lstm_l2", "--point", POINT, "--out", str(out)])
        == 2
    )
    assert capsys.readouterr().err == (
        "psrnn train: error: the suite's job_env (MKL_CBWR=COMPATIBLE) is not in effect and torch is "
        "already loaded in this process, so this run would train on other CPU kernels than the suite's: "
        "start it as `python -m psrnn ...` (it sets them), or set them before torch is imported\n"
    )
    assert not out.exists()
    monkeypatch.setenv("MKL_CBWR", "AUTO")  # set, but to another value
    assert (
        main(["train", "--config", RELREG_CI, "--experiment", "lstm_l2", "--point", POINT, "--out", str(out)])
        == 2
    )
    assert "(MKL_CBWR=COMPATIBLE) is not in effect" in capsys.readouterr().err
    assert not out.exists()


def test_a_job_env_set_after_torch_ran_an_operation_is_refused(tmp_path):
    """The pass of stop 62, N-R16: the variables set in os.environ after torch had run its first
    operation looked in effect, and the record said so, while torch ran other kernels (0.665
    where the suite's run gives 0.67). torch's own answer decides; nothing is written."""
    out = tmp_path / "run"
    late = (
        "import os, sys, torch\n"
        "torch.randn(8, 8).sum()\n"
        "os.environ.update(ATEN_CPU_CAPABILITY='default', MKL_CBWR='COMPATIBLE')\n"
        "import psrnn.cli as c\n"
        "raise SystemExit(c.main(sys.argv[1:]))\n"
    )
    args = ["train", "--config", RELREG_CI, "--experiment", "lstm_l2", "--point", POINT, "--out", str(out)]
    res = subprocess.run([sys.executable, "-c", late, *args], env=clean_env(), capture_output=True, text=True)
    natural = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
        env=clean_env(),
        capture_output=True,
        text=True,
    ).stdout.strip()
    if natural == "DEFAULT":
        pytest.skip("this CPU runs torch's default kernels anyway")
    assert res.returncode == 2, res.stderr
    [line] = res.stderr.strip().splitlines()
    assert line.startswith("psrnn train: error: torch in this process runs the CPU kernels ")
    assert "not the suite's job_env ATEN_CPU_CAPABILITY=default (set after torch had started them)" in line
    assert not out.exists()


def test_a_second_config_is_refused(tmp_path, capsys):
    """`train --config A --config B` had trained B (argparse keeps the last) under A's
    job_env (psrnn.engine.jobenv reads the first): battery N-AB4."""
    out = tmp_path / "run"
    for twice in (
        ["--config", RELREG_CI, "--config", RELREG_CI],
        ["--config", RELREG_CI, f"--config={RELREG_CI}"],
    ):
        assert main(["train", *twice, "--experiment", "lstm_l2", "--point", POINT, "--out", str(out)]) == 2
        assert capsys.readouterr().err == "psrnn train: error: --config given 2 times: name one config\n"
    assert not out.exists()


def test_verbosity_before_the_command_moves_behind_its_name():
    from psrnn.cli import command_first

    assert command_first(["-q", "train", "--config", "x"]) == ["train", "-q", "--config", "x"]
    assert command_first(["-vv", "-qv", "train"]) == ["train", "-vv", "-qv"]
    assert command_first(["-v", "--quiet", "restamp", "--jobs", "2"]) == [
        "restamp",
        "-v",
        "--quiet",
        "--jobs",
        "2",
    ]
    for unchanged in (["train", "-q"], ["--version"], ["-q"], ["-q", "--version"], []):
        assert command_first(unchanged) == unchanged


def test_a_checkpoint_resumes_only_under_the_kernels_it_was_written_with(tmp_path, monkeypatch):
    cfg = small_cfg(write_images(tmp_path / "data", T=16), max_epochs=3)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    with pytest.raises(Interrupt):
        fit(cfg, tmp_path / "run", on_step=kill_at(2, 1), log=quiet)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    with pytest.raises(ConfigChanged, match=r"ATEN_CPU_CAPABILITY \(checkpoint 'default', now None"):
        fit(cfg, tmp_path / "run", log=quiet)


def test_a_second_process_training_the_same_folder_is_refused(tmp_path):
    cfg = small_cfg(write_images(tmp_path / "data", T=16), max_epochs=2)
    inside, release = threading.Event(), threading.Event()

    def hold(epoch, step, _model):
        inside.set()
        release.wait(60)

    first = threading.Thread(target=fit, args=(cfg, tmp_path / "run"), kwargs={"on_step": hold, "log": quiet})
    first.start()
    try:
        assert inside.wait(60)
        run = tmp_path / "run"
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import pathlib, psrnn.files as e\nwith e.sole_writer(pathlib.Path({str(run)!r})): pass",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode != 0 and "another process is training this run now" in out.stderr
    finally:
        release.set()
        first.join(120)
    assert (tmp_path / "run" / "metrics.json").is_file()  # the first writer finished its run


def test_a_truncated_checkpoint_is_one_line_naming_it(tmp_path, capsys):
    data = write_images(tmp_path / "data", T=16)
    run_yaml = tmp_path / "run.yaml"
    cfg = small_cfg(data, max_epochs=2)
    run_yaml.write_text(json.dumps(cfg.to_dict()))  # JSON is YAML
    with pytest.raises(Interrupt):
        fit(cfg, tmp_path / "run", on_step=kill_at(2, 1), log=quiet)
    last = tmp_path / "run" / "ckpt_last.pt"
    last.write_bytes(last.read_bytes()[:1000])
    for extra in ([], ["--reuse", str(tmp_path / "run")]):
        out = tmp_path / ("run" if not extra else "other")
        assert main(["train", "--config", str(run_yaml), "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{last}: not a readable checkpoint" in err[0], err
    last.write_bytes(b"")  # an empty file: EOFError without a message
    assert main(["train", "--config", str(run_yaml), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"psrnn train: error: {last}: not a readable checkpoint (EOFError: empty file); "
        "delete it to start the run over"
    ]


def test_a_bad_output_path_or_an_interrupt_is_one_line(tmp_path, capsys, monkeypatch):
    """--out naming a file, a path under a file, a folder where a file goes: the path and
    what is wrong with it; Ctrl-C: that the same command resumes (exit 130)."""
    (tmp_path / "afile").write_text("x")
    cfg = str(C.ROOT / "config" / "small.yaml")
    cases = [
        (
            ["train", "--config", cfg, "--experiment", "mnist_gru", "--out", str(tmp_path / "afile")],
            "exists and is not a folder",
        ),
        (
            ["train", "--config", cfg, "--experiment", "mnist_gru", "--out", str(tmp_path / "afile" / "x")],
            "a part of the path is a file, not a folder",
        ),
        (["config", cfg, "--dvc-params", str(tmp_path)], "is a folder, not a file"),
    ]
    for argv, why in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].endswith(why), err
    assert (tmp_path / "afile").read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module("psrnn.engine.train"), "run", interrupted)
    assert main(["train", "--config", cfg, "--experiment", "mnist_gru"]) == 130
    assert capsys.readouterr().err.strip() == "psrnn train: interrupted; the same command resumes"


@pytest.mark.parametrize(
    "extra, why",
    [
        (["--set", "lr=.nan"], "lr: nan is not a finite number"),
        (["--set", "clip=.inf"], "clip: inf is not a finite number"),
        (["--set", "seed=3"], "--set seed=3: use --seed 3"),
        (
            ["--set", "hidden=1"],
            "shared=0.3: x hidden 1 rounds to 0 shared units: tasks ['pred', 'rec'] need at least 1",
        ),
        (  # battery B N34: trained (test_acc 0.295) where the same value in a config is refused
            ["--point", "lr-0.01", "--set", "anchors=1000"],
            "--set: experiments.mnist_ps30_predrec_a4.anchors/window: 1000 anchor(s) need n - 2 x window "
            ">= anchors, but window 10 leaves 29 of n = 49 steps",
        ),
        (
            ["--selected", "{bad}"],
            "{bad}: not a selected.json (no 'overrides'; `python -m psrnn select` writes it)",
        ),
        (
            ["--out", "{foreign}"],
            "{foreign}: a folder of other files, not a run folder; give a new or empty one",
        ),
        (
            ["--out", "{done}"],
            "{done}/metrics.json: not a run's metrics.json (no 'config'); delete it to train the run",
        ),
        (
            ["--selected", "{missing}"],
            "--selected {missing}: no such file (`python -m psrnn select` writes it)",
        ),
    ],
)
def test_values_no_run_can_use_are_refused_before_training(extra, why, tmp_path, capsys):
    """Each was silent or a traceback: a NaN setting trained and then could not write
    metrics.json, `--set seed` was ignored, 0 shared units trained a plain GRU, training
    wrote its files among a folder of the user's own."""
    bad, foreign = tmp_path / "sel.json", tmp_path / "mine"
    bad.write_text('{"point": "lr-0.1"}')
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    done = tmp_path / "done"
    done.mkdir()
    (done / "metrics.json").write_text("{}")
    names = {"bad": bad, "foreign": foreign, "done": done, "missing": tmp_path / "nosuch.json"}
    argv = [
        "train",
        "--config",
        str(C.ROOT / "config" / "small.yaml"),
        "--experiment",
        "mnist_ps30_predrec_a4",
    ]
    out = [] if "--out" in extra else ["--out", str(tmp_path / "run")]
    assert main([*argv, *out, *(x.format(**names) for x in extra)]) == 2
    assert capsys.readouterr().err.strip() == f"psrnn train: error: {why.format(**names)}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done", "mine", "sel.json"]
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize(
    "config, argv, folder",
    [  # battery B N17: a non-grid experiment's final run; N18: a search point's run
        (
            "small.yaml",
            ["--experiment", "mnist_gru", "--seed", "1", "--set", "hidden=13"],
            "results/small/runs/mnist_gru/seed1",
        ),
        (
            "relreg-ci.yaml",
            ["--experiment", "lstm_l2", "--point", POINT, "--set", "lr=0.5"],
            f"results/relreg-ci/search/lstm_l2/{POINT}",
        ),
    ],
)
def test_a_run_with_set_needs_out(config, argv, folder, tmp_path, monkeypatch, capsys):
    """Trained rc 0 into the suite's own folder, a run at other settings passing for the
    suite's until stale, select or compile caught it; docs/training.md says it needs --out."""
    monkeypatch.chdir(tmp_path)
    cfg = str(C.ROOT / "config" / config)
    assert main(["train", "--config", cfg, *argv]) == 2
    key = argv[-1].split("=")[0]
    assert capsys.readouterr().err.strip() == (
        f"psrnn train: error: --set {key}: {folder} holds the suite's run at {cfg}'s settings, "
        "not one with --set; give --out DIR for this run"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_repeated_grid_value_and_digits_over_their_source_are_refused(tmp_path, capsys):
    (tmp_path / "twice.yaml").write_text(
        "extends: "
        + str(C.ROOT / "config" / "small.yaml")
        + "\nexperiments: {mnist_gru: {grid: {lr: [0.1, 0.1]}}}\n"
    )
    assert main(["config", str(tmp_path / "twice.yaml")]) == 2
    assert "experiments.mnist_gru.grid.lr: [0.1, 0.1] has non-unique elements" in capsys.readouterr().err
    src = tmp_path / "digits"
    src.mkdir()
    assert main(["digits", str(src), str(src)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"psrnn digits: error: {src}: the output folder is the source folder; "
        + "its digits would be overwritten"
    )


def test_a_wrong_expected_file_or_retry_count_is_one_line(tmp_path, capsys):
    (tmp_path / "e.json").write_text("[1, 2]")
    cfg = str(C.ROOT / "config" / "small.yaml")
    assert main(["check", "--config", cfg, "--expected", str(tmp_path / "e.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        f"{tmp_path / 'e.json'}: not an expected-values file (no 'runs'; `check --update` writes one)"
    )
    assert (
        main(["download", "mnist", "--config", cfg, "--raw", str(tmp_path / "raw"), "--retries", "-1"]) == 2
    )
    assert capsys.readouterr().err.strip().endswith("retries=-1: must be at least 1 (attempts per URL)")
    assert main(["bench", "--quick", "--only", "train", "--batch", "-4", "--out", str(tmp_path / "b")]) == 2
    assert capsys.readouterr().err.strip() == "psrnn bench: error: --batch -4: must be >= 1"
    assert not (tmp_path / "b").exists()  # refused before measuring, nothing written
    relreg = str(C.ROOT / "config" / "relreg-ci.yaml")
    for command, section in (("prepare", "prepare"), ("download", "source")):
        assert main([command, "bincounter", "--config", relreg]) == 2
        err = capsys.readouterr().err.strip()
        assert err.endswith(f"relreg-ci.yaml: study relreg's runs make their own data: nothing to {section}")


def test_train_group_reads_selected_json_as_train_does(tmp_path, capsys):
    """One reader (psrnn.engine.selection.read_selected) for both commands: was a KeyError here."""
    bad = tmp_path / "sel.json"
    bad.write_text('{"point": "l2-0.0"}')
    cfg = str(C.ROOT / "config" / "relreg.yaml")
    assert (
        main(
            [
                "train-group",
                "--config",
                cfg,
                "--experiment",
                "lstm_l2",
                "--seeds",
                "1",
                "--selected",
                str(bad),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    why = "not a selected.json (no 'overrides'; `python -m psrnn select` writes it)"
    assert err == f"psrnn train-group: error: {bad}: {why}"


def test_an_experiment_of_a_switched_off_dataset_says_so(tmp_path, capsys):
    """quick-imdb.yaml switches MNIST off: not 'prepared dataset not found, run prepare'."""
    cfg = C.ROOT / "config" / "quick-imdb.yaml"
    assert (
        main(["train", "--config", str(cfg), "--experiment", "mnist_gru", "--out", str(tmp_path / "r")]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert err == f"psrnn train: error: mnist_gru: its dataset mnist is switched off in {cfg} " + (
        "(datasets.mnist.enabled)"
    )
    assert not (tmp_path / "r").exists()
    assert main(["train-group", "--config", str(cfg), "--experiment", "mnist_gru"]) == 2  # the same check
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("mnist_gru: its dataset mnist is switched off in " + (f"{cfg} (datasets.mnist.enabled)"))
    )


def test_truncated_json_files_are_one_line_naming_them(tmp_path, capsys):
    sel = tmp_path / "selected.json"
    sel.write_text('{"experiment": "lstm_l2", "point"')
    args = ["train", "--config", RELREG_CI, "--experiment", "lstm_l2", "--selected", str(sel)]
    assert main([*args, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{sel}: not a JSON file" in err[0]


def test_a_closed_pipe_ends_the_listing_quietly():
    proc = subprocess.run(
        f"{sys.executable} -m psrnn config {C.ROOT / 'config' / 'paper.yaml'} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_digits_refuses_a_label_that_is_not_a_digit(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    x = torch.zeros(3, 28, 28, dtype=torch.uint8)
    y = torch.tensor([1, 42, 3], dtype=torch.uint8)
    (src / "t10k-images-idx3-ubyte.gz").write_bytes(gzip_bytes(idx_bytes(x.numpy())))
    (src / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip_bytes(idx_bytes(y.numpy())))
    from psrnn.studies.private_shared.data.digits import read_pair

    with pytest.raises(UserError, match=r"label 42 at position 1 is not a digit"):
        read_pair(src)


@pytest.fixture
def relreg_results(tmp_path, monkeypatch):
    """A copy of the committed second-study results to edit, as the working folder."""
    shutil.copytree(C.ROOT / "results" / "relreg", tmp_path / "results" / "relreg")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "results" / "relreg"


@pytest.mark.parametrize(
    "edit, says",
    [
        (
            lambda m: m["config"].update(noise=0.3),
            "not a run of this suite's settings (noise (checkpoint 0.3",
        ),
        (lambda m: m["config"].update(epochs=7), "not a run of this suite's settings (epochs (checkpoint 7"),
        (lambda m: m.update(test_acc=7.5), "test_acc = 7.5 is not an accuracy in [0, 1]"),
        (lambda m: m.update(test_acc=True), "test_acc = True is not an accuracy in [0, 1]"),
        (lambda m: m["test"]["10"].update(seq_acc=7.5), "test.10.seq_acc = 7.5 is not an accuracy in [0, 1]"),
        (lambda m: m["test"]["16"].update(bit_acc=-3), "test.16.bit_acc = -3 is not an accuracy in [0, 1]"),
        (
            lambda m: m["test"]["6"].update(seq_acc="1.0"),
            "test.6.seq_acc = '1.0' is not an accuracy in [0, 1]",
        ),
        # another grid point than the one its seed was drawn: a run of the grid, not of the selection
        (
            lambda m: m["config"].update(noise=0.1 if m["config"]["noise"] != 0.1 else 1.0),
            "not a run of this suite's settings (noise (checkpoint",
        ),
        (lambda m: m.clear(), "not a finished run's record (no experiment, seed,"),
    ],
)
def test_compile_refuses_a_run_that_is_not_the_suites_and_names_it(relreg_results, edit, says, capsys):
    path = relreg_results / "runs" / "proto_noise" / "seed1" / "metrics.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))
    before = {p: p.read_bytes() for p in (relreg_results / "tables").iterdir()}
    assert main(["compile", "--config", str(C.ROOT / "config" / "relreg.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and f"{Path('results/relreg/runs/proto_noise/seed1/metrics.json')}: {says}" in err[0]
    ), err
    assert {p: p.read_bytes() for p in (relreg_results / "tables").iterdir()} == before  # nothing rewritten


@pytest.mark.parametrize(
    "name, damage, says",
    [
        ("history.csv", lambda b: b[:100], "holds 1 epoch row(s), but its metrics.json ran 30 epochs"),
        ("history.csv", lambda b: b"\x00garbled\x00\n" + b[40:], "not a readable history"),
        # 38.6b: a non-UTF-8 byte gave a 49-line UnicodeDecodeError (the unfit check read it first)
        (
            "history.csv",
            lambda b: b'epoch,foo\n1,"\x00\xff,,,\n"garbage',
            "not a readable history ('utf-8' codec can't decode byte 0xff in position 14: invalid start "
            "byte); delete its folder",
        ),
        (
            "history.csv",
            lambda b: b.replace(b"\n1,0.7002708874642849,", b"\n1,abc,", 1),
            "train_loss = 'abc' at epoch 1 is not a number; delete its folder",
        ),
        ("loading.npz", lambda b: b[:500], "damaged (BadZipFile"),
    ],
)
def test_compile_refuses_a_damaged_history_or_loading_file(relreg_results, name, damage, says, capsys):
    """A history.csv cut short once shrank the DVC curve to one row, a garbled one gave a
    pandas traceback, a cut loading.npz a zipfile one: each is one line naming the file, and
    no output is rewritten."""
    path = relreg_results / "runs" / "proto_both" / "seed1" / name
    path.write_bytes(damage(path.read_bytes()))
    before = {p: p.read_bytes() for p in (relreg_results / "tables").iterdir()}
    assert main(["compile", "--config", str(C.ROOT / "config" / "relreg.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{Path('results/relreg/runs/proto_both/seed1') / name}: {says}" in err[0], err
    assert {p: p.read_bytes() for p in (relreg_results / "tables").iterdir()} == before


def test_compile_refuses_an_empty_search_record(relreg_results, capsys):
    path = next((relreg_results / "search").glob("proto_noise/*/metrics.json"))
    path.write_text("{}")
    assert main(["compile", "--config", str(C.ROOT / "config" / "relreg.yaml")]) == 2
    assert "not a finished run's record" in capsys.readouterr().err


@pytest.mark.parametrize(
    "folder, base, was, study",
    [
        ("small", "relreg-ci.yaml", "private_shared", "relreg"),
        ("relreg", "small.yaml", "relreg", "private_shared"),
    ],
)
def test_compile_refuses_a_folder_another_studys_compile_wrote(
    tmp_path, monkeypatch, capsys, folder, base, was, study
):
    """battery N28: a relreg config named `small` compiled "26 files in results/small (study
    relreg)", replacing the committed REPORT.md, metrics.json and scores.json. Its
    metrics.json names the study that wrote it (the first study's, compiled before the
    field, none: read as a config without `study:` is); another study's compile stops in
    one line and writes nothing. Here the config lies outside config/, where no file bears
    its name (psrnn.config.check_name_owner), as a user's scratch config would."""
    committed = C.ROOT / "results" / folder
    kept = ["metrics.json", "REPORT.md"]
    (tmp_path / "results" / folder).mkdir(parents=True)
    for name in kept:
        shutil.copy2(committed / name, tmp_path / "results" / folder / name)
    assert ("study" in json.loads((committed / "metrics.json").read_text())) == (folder == "relreg")
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"extends: {C.ROOT / 'config' / base}\nname: {folder}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["compile", "--config", str(mine)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"psrnn compile: error: {mine}: results/{folder} holds study {was}'s compiled results (its "
        f"metrics.json), not study {study}'s: give this config a name of its own; nothing was written"
    ]
    assert sorted(p.name for p in (tmp_path / "results" / folder).iterdir()) == sorted(kept)
    assert all((tmp_path / "results" / folder / n).read_bytes() == (committed / n).read_bytes() for n in kept)
    # its own study's config passes; so does a folder without a (readable) metrics.json
    own = C.load_suite(C.ROOT / "config" / f"{folder}.yaml")
    assert compile_cmd.check_folder_study(own, "x") is None
    (tmp_path / "results" / folder / "metrics.json").write_text("{cut")
    assert compile_cmd.check_folder_study(C.load_suite(mine), "x") is None


def test_a_full_disk_is_one_line(tmp_path, monkeypatch, capsys):
    import errno

    from psrnn import files

    def full(target, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    monkeypatch.setattr(files, "write_bytes", full)
    assert main(["fixtures", str(tmp_path / "fx")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no space left on the device writing" in err[0], err


def test_a_full_disk_names_the_file_being_written(tmp_path, monkeypatch, capsys):
    """An ENOSPC from a write names no file (the kernel's error has none): psrnn.files names
    the file it was writing, and nothing half-written stays."""
    import errno

    from psrnn import files

    real, calls = files.write_bytes, []

    def full_after_three(target, data):
        calls.append(target)
        if len(calls) <= 3:
            return real(target, data)
        with files.atomic_path(target) as tmp:
            tmp.write_bytes(data[:10])
            raise OSError(errno.ENOSPC, "No space left on device")  # as a write(2) raises it

    monkeypatch.setattr(files, "write_bytes", full_after_three)
    assert main(["fixtures", str(tmp_path / "fx")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"no space left on the device writing {calls[-1]}" in line, line
    assert not calls[-1].exists() and not [p for p in (tmp_path / "fx").rglob("*.tmp")]


def test_what_a_writer_killed_mid_write_leaves_stops_nothing_and_goes(tmp_path):
    """SIGKILL while a checkpoint is written leaves `.ckpt_best.pt.<random>.tmp`: the next run
    in that folder starts (it had been refused as 'a folder of other files') and removes it;
    a killed prepare's temporary folder goes when that dataset is prepared again."""
    from psrnn.files import remove_stale_temps
    from psrnn.studies.private_shared.data.prepare import SPLITS, write_prepared

    data = write_images(tmp_path / "data", T=16)
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text(json.dumps(small_cfg(data, max_epochs=1).to_dict()))
    run = tmp_path / "run"
    run.mkdir()
    (run / ".ckpt_best.pt.jx9z2yq5.tmp").write_bytes(b"half")
    assert main(["train", "--config", str(run_yaml), "--out", str(run)]) == 0
    assert (run / "metrics.json").is_file() and not [p.name for p in run.iterdir() if p.name.startswith(".")]

    prepared = tmp_path / "prepared"
    (prepared / ".mnist.9o848qvv.tmp").mkdir(parents=True)
    (prepared / ".mnist.9o848qvv.tmp" / ".train.pt.bf4q7ffz.tmp").write_bytes(b"half")
    for keep in (".fmnist.9o848qvv.tmp", ".mnist.keep", "notes.tmp"):  # another dataset's; not a temp
        (prepared / keep).write_text("x")
    remove_stale_temps(prepared, "fmnist")
    assert sorted(p.name for p in prepared.iterdir()) == [".mnist.9o848qvv.tmp", ".mnist.keep", "notes.tmp"]
    splits = {s: {"x": torch.zeros(2, 3)} for s in SPLITS}
    write_prepared(prepared / "mnist", splits, {"dataset": "mnist"})
    assert sorted(p.name for p in prepared.iterdir()) == [".mnist.keep", "mnist", "notes.tmp"]


def test_a_run_trains_with_the_suites_threads_and_resumes_only_with_its_own(tmp_path, capsys):
    """A CPU run's numbers depend on torch's thread count: `train` without --threads takes
    the suite's (1 unless resources.train.threads says, as Snakemake's jobs pass it; it had
    been torch's default, all cores), metrics.json records it, and a checkpoint resumes only
    with the count it was written with."""
    before = torch.get_num_threads()
    data = write_images(tmp_path / "data", T=16)
    run_yaml = tmp_path / "run.yaml"
    cfg = small_cfg(data, max_epochs=2)
    run_yaml.write_text(json.dumps(cfg.to_dict()))
    run = tmp_path / "run"
    try:
        torch.set_num_threads(2)
        with pytest.raises(Interrupt):
            fit(cfg, run, on_step=kill_at(2, 1), log=quiet)
        assert main(["train", "--config", str(run_yaml), "--out", str(run)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        why = (
            "torch threads (checkpoint 2, now 1: a CPU run's numbers depend on them; --threads 2 resumes it)"
        )
        assert len(err) == 1 and why in err[0]
        assert torch.get_num_threads() == 1
        assert main(["train", "--config", str(run_yaml), "--out", str(run), "--threads", "2"]) == 0
        assert json.loads((run / "metrics.json").read_text())["torch_threads"] == 2
    finally:
        torch.set_num_threads(before)


def test_train_group_by_hand_takes_the_suites_threads_too(monkeypatch):
    """As `train`: without --threads, the suite's resources.train.threads (it had been 1
    whatever the suite said), so a group started by hand runs as Snakemake's job."""
    import argparse

    from psrnn.engine import group as fused

    def stop(args):
        raise InterruptedError("stopped before training")

    monkeypatch.setattr(fused, "group_jobs", stop)
    before = torch.get_num_threads()
    suite = C.load_yaml(RELREG_CI)
    suite["resources"]["train"]["threads"] = 2
    try:
        for threads, wanted in ((None, 1), (3, 3)):
            with pytest.raises(InterruptedError):
                fused.run(argparse.Namespace(config=RELREG_CI, threads=threads))
            assert torch.get_num_threads() == wanted
        monkeypatch.setattr(C, "load_yaml", lambda path: suite)
        with pytest.raises(InterruptedError):
            fused.run(argparse.Namespace(config=RELREG_CI, threads=None))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_checkpoint_of_other_training_code_starts_over_instead_of_finishing_the_old_run(
    tmp_path, monkeypatch
):
    """Snakemake re-runs a training job when its code digest changes (and on --forcerun),
    deleting metrics.json first; the job must not then finish the old code's run from its
    ckpt_last.pt (it had: "resumed after epoch 2" and the old numbers). A checkpoint records
    the training code's digest and resumes only under the same one."""
    from psrnn.engine import checkpoint, codehash

    data = write_images(tmp_path / "data", T=16)
    cfg = small_cfg(data, max_epochs=2)
    run = tmp_path / "run"
    old = fit(cfg, run, log=quiet)
    assert torch.load(run / "ckpt_last.pt", weights_only=True)["code"] == checkpoint.training_code(cfg)
    (run / "metrics.json").unlink()  # what Snakemake does before it runs the job again
    monkeypatch.setattr(codehash, "training_digest", lambda study: "f" * 64)
    with pytest.raises(
        ConfigChanged, match=r"training code \(checkpoint's digest [0-9a-f]{12}, now ffffffffffff"
    ):
        fit(cfg, run, log=quiet)
    lines: list[str] = []
    new = fit(cfg, run, log=lines.append, restart_on_change=True)
    assert any(line.startswith("starting over:") and "training code" in line for line in lines)
    assert not any("resumed after" in line for line in lines)
    assert new["epochs_run"] == 2 and new["best_valid_acc"] == old["best_valid_acc"]  # trained again
    assert torch.load(run / "ckpt_last.pt", weights_only=True)["code"] == "f" * 64


def test_another_runs_folder_is_never_replaced_even_with_restart_on_change(tmp_path, capsys):
    """Battery B N30: the refusal of a folder written with other settings advised
    --restart-on-change, which then replaced another experiment's finished run (rc 0). A
    folder whose metrics.json or ckpt_last.pt names another experiment (or, for a final run,
    another seed) is refused with or without the flag, and nothing in it changes."""
    data = write_images(tmp_path / "data", T=16)
    for name, lr in (("lstm_l2", 0.1), ("proto_both", 0.2)):  # two flat configs: two experiments
        (tmp_path / f"{name}.yaml").write_text(
            json.dumps({**small_cfg(data, max_epochs=1).to_dict(), "lr": lr})
        )
    out = tmp_path / "run"
    argv = ["train", "-q", "--config", str(tmp_path / "lstm_l2.yaml"), "--out", str(out)]
    assert main(argv) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    other = ["train", "-q", "--config", str(tmp_path / "proto_both.yaml"), "--out", str(out)]
    for record, extra in [
        ("metrics.json", ["--restart-on-change"]),
        ("metrics.json", []),
        ("metrics.json", ["--set", "lr=0.1"]),  # the same settings: still another experiment's run
        ("ckpt_last.pt", ["--restart-on-change"]),  # an unfinished run: its checkpoint names it
    ]:
        if record == "ckpt_last.pt":
            (out / "metrics.json").unlink()
            del before["metrics.json"]
        assert main([*other, *extra]) == 2, (record, extra)
        assert capsys.readouterr().err.strip() == (
            f"psrnn train: error: {out / record}: records experiment 'lstm_l2' seed 0, not experiment "
            "'proto_both' seed 0: another run's folder, never replaced (--restart-on-change or not); "
            "give --out a new folder"
        )
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # a final run of another seed (its folder is its seed's); the same run still resumes
    assert main([*argv, "--seed", "1", "--restart-on-change"]) == 2
    assert "records experiment 'lstm_l2' seed 0, not experiment 'lstm_l2' seed 1" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert main(argv) == 0 and (out / "metrics.json").is_file()


def test_train_group_refuses_what_would_write_runs_no_search_has(tmp_path, capsys, monkeypatch):
    """An experiment without a grid has no search runs (it wrote search/<exp>/default, which
    REPORT then counted among the grid's runs); --selected without --seeds, --group with
    --seeds and a negative or NaN --save-every are refused in one line, and nothing is written."""
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "rr.yaml"
    cfg.write_text(
        f"extends: {C.ROOT / 'config' / 'relreg-ci.yaml'}\nname: rr-guards\n"
        "experiments:\n  lstm_plain:\n    dataset: bincounter\n    model: lstm\n"
    )
    base = ["train-group", "--config", str(cfg)]
    cases = [
        (["--experiment", "lstm_plain"], "experiment lstm_plain has no grid to search"),
        (["--experiment", "lstm_l2", "--selected", "x.json"], "--selected needs --seeds"),
        (["--experiment", "lstm_l2", "--seeds", "1", "--group", "g"], "--group names search runs"),
        (["--experiment", "lstm_l2", "--save-every", "-1"], "--save-every -1: seconds must be a number"),
        (["--experiment", "lstm_l2", "--save-every", "nan"], "--save-every nan: seconds must be a number"),
    ]
    for extra, why in cases:
        assert main(base + extra) == 2, extra
        err = capsys.readouterr().err.strip()
        assert err.startswith("psrnn train-group: error: ") and why in err and "\n" not in err, err
    assert not (C.ROOT / "results" / "rr-guards").exists()


def test_an_impossible_model_and_a_label_out_of_range_are_one_line(tmp_path, capsys):
    """--set hidden=100000000 (the allocator's RuntimeError) and a prepared split with a
    label its manifest does not count: one line each, rc 2,
    not a traceback."""
    data = write_images(tmp_path / "data", T=16)
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text(json.dumps(small_cfg(data, max_epochs=1).to_dict()))
    huge = ["train", "--config", str(run_yaml), "--out", str(tmp_path / "huge"), "--set", "hidden=100000000"]
    assert main(huge) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("psrnn train: error: out of memory: "), err
    split = torch.load(data / "train.pt")
    split["y"][0] = 99
    torch.save(split, data / "train.pt")
    assert main(["train", "--config", str(run_yaml), "--out", str(tmp_path / "label")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # refused as the split loads (psrnn.studies.private_shared.data.checks), before training
    # reaches cross_entropy (whose IndexError is one line too)
    assert len(err) == 1 and "train.pt is damaged (labels 0..99 outside 0..2" in err[0], err
    assert err[0].endswith("re-run `python -m psrnn prepare data --config <suite.yaml>`"), err
