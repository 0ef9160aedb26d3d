"""The records compile and select read are the suite's, or one line naming the file (battery
A 16, 25-27, 29, 36): per-length results of exactly the suite's test lengths with their
true counts, every file of a finished run, a selected.json that is its search records'
selection, and search records of their own grid point's settings before select ranks them.
Each refusal writes nothing."""

import json
import shutil
from pathlib import Path

import pytest
from suites import write_search, write_tiny

from psrnn import config as C
from psrnn.cli import main

RELREG = C.ROOT / "config" / "relreg.yaml"
RUN = Path("results/relreg/runs/proto_both/seed1")


@pytest.fixture
def relreg_results(tmp_path, monkeypatch):
    """A copy of the committed second-study results to edit, as the working folder."""
    shutil.copytree(C.ROOT / "results" / "relreg", tmp_path / "results" / "relreg")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "results" / "relreg"


def outputs(results: Path) -> dict[Path, bytes]:
    """Every file compile writes (all but the runs' and searches' folders, its inputs)."""
    return {
        p: p.read_bytes()
        for p in sorted(results.rglob("*"))
        if p.is_file() and p.relative_to(results).parts[0] not in ("runs", "search")
    }


def refused(config: Path, results: Path, capsys) -> str:
    """compile's one line, having checked that it refused and wrote nothing."""
    before = outputs(results)
    assert main(["compile", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert outputs(results) == before
    assert err[0].startswith("psrnn compile: error: "), err
    return err[0].removeprefix("psrnn compile: error: ")


def edit_record(path: Path, change) -> None:
    m = json.loads(path.read_text())
    change(m)
    path.write_text(json.dumps(m))


LENGTHS = "the suite's test_bits 6, 8, 10, 12, 14, 16"


@pytest.mark.parametrize(
    "change, says",
    [
        # 25: a count of -1 became a row of table45.csv
        (lambda t: t["6"].update(count=-1), "test.6.count = -1, not 64 (test_count 1024)"),
        (lambda t: t["10"].update(count=1000), "test.10.count = 1000, not 1024 (test_count 1024)"),
        (lambda t: t["8"].update(count=256.0), "test.8.count = 256.0, not 256 (test_count 1024)"),
        # 26: a length the suite never tests became a column of Table 4.5
        (lambda t: t.update({"7": t["6"]}), f"test holds length(s) 7, not of {LENGTHS}"),
        # 27: a missing length made a cell from one seed fewer
        (lambda t: t.pop("8"), f"test has no length(s) 8 of {LENGTHS}"),
        (lambda t: t["12"].pop("count"), "test.12 has no count"),
        (
            lambda t: t["14"].update(seq_acc=float("nan")),
            "test.14.seq_acc = nan is not an accuracy in [0, 1]",
        ),
        (
            lambda t: t["16"].update(bit_acc=float("inf")),
            "test.16.bit_acc = inf is not an accuracy in [0, 1]",
        ),
    ],
)
def test_compile_refuses_per_length_results_that_are_not_the_suites(relreg_results, change, says, capsys):
    edit_record(
        relreg_results / "runs" / "proto_both" / "seed1" / "metrics.json", lambda m: change(m["test"])
    )
    line = refused(RELREG, relreg_results, capsys)
    assert line == f"{RUN / 'metrics.json'}: {says}; delete its folder", line


@pytest.mark.parametrize(
    "key, value, says",
    [
        # N03: 0.45 beside lengths averaging 0.8444 changed Table 4.5's summary and scores.json
        (
            "test_acc",
            0.45,
            "test_acc = 0.45, but the mean of its test.<length>.seq_acc is 0.8444010416666666",
        ),
        (
            "test_bit_acc",
            0.97,
            "test_bit_acc = 0.97, but the mean of its test.<length>.bit_acc is 0.9704416426401291",
        ),
    ],
)
def test_compile_refuses_a_summary_that_is_not_the_mean_of_its_lengths(
    relreg_results, key, value, says, capsys
):
    edit_record(
        relreg_results / "runs" / "proto_both" / "seed1" / "metrics.json", lambda m: m.update({key: value})
    )
    line = refused(RELREG, relreg_results, capsys)
    assert line == f"{RUN / 'metrics.json'}: {says} (edited); delete its folder", line


def test_compile_refuses_a_record_with_a_key_twice(relreg_results, capsys):
    """N09: json keeps the last of two equal keys, a reader of the file sees the first."""
    path = relreg_results / "runs" / "proto_both" / "seed1" / "metrics.json"
    path.write_text('{"test_acc": 0.45, ' + path.read_text().lstrip()[1:])
    line = refused(RELREG, relreg_results, capsys)
    assert line == (
        f"{RUN / 'metrics.json'}: key 'test_acc' appears twice in one object (edited); "
        "delete it to make it again"
    ), line


@pytest.mark.parametrize("name", ["history.csv", "loading.npz"])
def test_compile_refuses_a_finished_run_missing_a_file(relreg_results, name, capsys):
    """29: a deleted history.csv or loading.npz was passed over without a word, the curves
    averaged over one run fewer than the tables count and the figures drawn without it."""
    (relreg_results / "runs" / "proto_both" / "seed1" / name).unlink()
    line = refused(RELREG, relreg_results, capsys)
    assert line == (
        f"{RUN / name}: missing from a finished run (its metrics.json is there; training writes that "
        "last); delete its folder"
    ), line


def test_compile_with_a_final_run_missing_says_so_on_stderr(relreg_results, capsys):
    """N06: compile with one final run's metrics.json gone said only "compile: 44 files",
    though verdict cells had changed; one warning line now names how many and the first."""
    (relreg_results / "runs" / "proto_both" / "seed1" / "metrics.json").unlink()
    assert main(["compile", "--config", str(RELREG)]) == 0
    out, err = capsys.readouterr()
    assert out.strip().splitlines()[-1] == "compile: 44 files in results/relreg (study relreg)"
    assert err.strip().splitlines() == [
        "compile: warning: 1 of 340 final runs not finished (no metrics.json; "
        f"first: {RUN / 'metrics.json'}): the tables and verdicts count the 339 that are"
    ], err
    assert "Final runs: 339 of 340 finished" in (relreg_results / "REPORT.md").read_text()


def test_compile_with_a_search_run_missing_says_so_on_stderr(relreg_results, capsys):
    """N-AB21: one search record gone (not the selected point's) changed REPORT.md's search
    count, a grid table and a figure, and compile said nothing on the console."""
    gone = Path("results/relreg/search/lstm_l2/hidden-6_l2-0.1_lr-0.05/metrics.json")
    (relreg_results / "search" / "lstm_l2" / "hidden-6_l2-0.1_lr-0.05" / "metrics.json").unlink()
    assert main(["compile", "--config", str(RELREG)]) == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        f"compile: warning: 1 of 330 search runs not finished (no metrics.json; first: {gone}): the "
        "search's tables and figures count the 329 that are"
    ]


def test_a_run_trained_outside_the_suites_job_env_is_no_run_of_it(relreg_results, capsys):
    """The backstop behind battery N-AB2/N-AB3 (a by-hand train that skipped the job_env gave
    0.635 where Snakemake's run gives 0.655): compile refuses such a record, and `stale`
    lists it for --forget."""
    from psrnn.engine.stale import stale_runs

    path = relreg_results / "runs" / "proto_both" / "seed1" / "metrics.json"
    edit_record(path, lambda m: m["kernel_env"].update(ATEN_CPU_CAPABILITY=None))
    assert refused(RELREG, relreg_results, capsys) == (
        f"{RUN / 'metrics.json'}: trained under other CPU kernel variables than the suite's job_env "
        "(ATEN_CPU_CAPABILITY None, job_env 'default'); `python -m psrnn stale --config <config> --forget` "
        "has Snakemake train it again"
    )
    why = "trained under other CPU kernel variables than the suite's job_env (ATEN_CPU_CAPABILITY None"
    assert [(str(p), w[: len(why)]) for p, _, w in stale_runs(C.load_suite(RELREG))] == [
        (str(RUN / "metrics.json"), why)
    ]
    for edit in (lambda m: m.pop("kernel_env"), lambda m: m.update(kernel_env=None)):  # battery J-8
        edit_record(path, edit)
        assert refused(RELREG, relreg_results, capsys) == (
            f"{RUN / 'metrics.json'}: kernel_env = None, not the CPU kernel variables its run trained "
            "under (edited); delete its folder"
        )


def point_overrides(point: str) -> dict[str, float]:
    """A grid point of relreg.yaml's proto_both: its overrides."""
    return dict(C.grid_points(C.load_suite(RELREG)["experiments"]["proto_both"]))[point]


def test_compile_refuses_params_that_differ_between_seeds_of_one_setting(relreg_results, capsys):
    """A record's params edited (params and a part together pass the sum check; here the
    second study's, which has no parts) had moved '#params ours' without a word (confirming
    pass of stop 60, N-AB15): runs at the same settings have the same parameter count."""
    fixed = Path("results/relreg/runs/proto_both_thesis")  # no grid: every seed at one setting
    edit_record(
        relreg_results.parent.parent / fixed / "seed3" / "metrics.json", lambda m: m.update(params=2206)
    )
    assert refused(RELREG, relreg_results, capsys) == (
        f"{fixed / 'seed3' / 'metrics.json'}: params = 2206, but {fixed / 'seed1' / 'metrics.json'} "
        "(the same settings) has 1206: one was edited; delete its folder"
    )


def test_compile_refuses_a_hand_edited_draw(relreg_results, capsys):
    """36: a selected.json edited to a worse grid point, its stamp kept, was trusted: the
    final runs trained there and compiled as the suite's. Re-drawing from the search records
    gives the true point; the line names the file and both."""
    path = relreg_results / "search" / "proto_both" / "selected.json"
    sel = json.loads(path.read_text())
    good = sel["draws"][0]["point"]
    bad = "l2_cell-0.0_l2_noncell-0.0_noise-0.001"  # 0.875 on validation, below the tie set's 1.0
    assert bad not in sel["tied"] and point_overrides(good) == sel["draws"][0]["overrides"]
    sel["draws"][0].update(point=bad, overrides=point_overrides(bad))
    sel.update(point=bad, overrides=point_overrides(bad))
    path.write_text(json.dumps(sel))

    def shown(p: str) -> str:
        return f"{p} (overrides {json.dumps(point_overrides(p), sort_keys=True)})"

    line = refused(RELREG, relreg_results, capsys)
    assert line == (
        f"{Path('results/relreg/search/proto_both/selected.json')}: selects {shown(bad)} for seed 1, "
        f"but its search runs' records select {shown(good)} (by best_valid_acc, ties: draw); "
        "run `python -m psrnn select` again"
    ), line


def test_compile_refuses_draws_swapped_between_seeds(relreg_results, capsys):
    """Two tied points swapped between seeds: each is a point of the tie set, but not the
    draw its seed gets (the draw is a fixed hash order)."""
    path = relreg_results / "search" / "proto_both" / "selected.json"
    sel = json.loads(path.read_text())
    first, second = sel["draws"][0], sel["draws"][1]
    first["point"], second["point"] = second["point"], first["point"]
    first["overrides"], second["overrides"] = second["overrides"], first["overrides"]
    sel.update(point=first["point"], overrides=first["overrides"])
    path.write_text(json.dumps(sel))
    line = refused(RELREG, relreg_results, capsys)
    assert line.startswith(
        f"{Path('results/relreg/search/proto_both/selected.json')}: selects {first['point']} "
    )
    assert f"for seed 1, but its search runs' records select {second['point']} " in line


# --- the first study's tiny suite, `ties: loss` (the default) ----------------------------------


def test_select_refuses_a_search_record_of_another_points_settings(tmp_path, monkeypatch, capsys):
    """16: a record whose settings are another grid point's was ranked and drawn from; compile
    refused it only after Snakemake had trained the final runs on that choice."""
    monkeypatch.chdir(tmp_path)
    cfg = write_tiny(tmp_path)
    suite = C.load_suite(cfg)
    records = write_search(suite, {"lr-0.1": 0.4, "lr-0.01": 0.6})
    edit_record(records["lr-0.01"], lambda m: m["config"].update(lr=0.1))
    assert main(["select", "--config", str(cfg), "--experiment", "ps"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{Path('results/tiny/search/ps/lr-0.01/metrics.json')}: " in err[0], err
    assert "not a run of this suite's settings (lr (checkpoint 0.1" in err[0], err
    assert not C.selection_path(suite, "ps").exists()


def test_compile_refuses_a_hand_edited_selection_under_ties_loss(tmp_path, monkeypatch, capsys):
    """36 under `ties: loss`: the selection select wrote compiles; the same file pointed at the
    worse point, its stamp kept, is one line naming it and both points, and nothing is written."""
    monkeypatch.chdir(tmp_path)
    cfg = write_tiny(tmp_path)
    suite = C.load_suite(cfg)
    write_search(suite, {"lr-0.1": 0.4, "lr-0.01": 0.6})
    assert main(["select", "--config", str(cfg), "--experiment", "ps"]) == 0
    assert main(["compile", "--config", str(cfg)]) == 0
    capsys.readouterr()
    path = C.selection_path(suite, "ps")
    sel = json.loads(path.read_text())
    assert sel["point"] == "lr-0.01"
    path.write_text(json.dumps({**sel, "point": "lr-0.1", "overrides": {"lr": 0.1}}))
    line = refused(cfg, tmp_path / "results" / "tiny", capsys)
    assert line == (
        f'{path}: selects lr-0.1 (overrides {{"lr": 0.1}}), but its search runs\' records select '
        'lr-0.01 (overrides {"lr": 0.01}) (by best_valid_acc, ties: loss); run `python -m psrnn select` again'
    ), line


def test_select_refuses_a_first_study_record_whose_params_are_not_its_parts(tmp_path, monkeypatch, capsys):
    """The first study's one key derived from others of its record: params, the sum of
    params_main, params_head and params_aux (its test_acc comes from no other key)."""
    monkeypatch.chdir(tmp_path)
    cfg = write_tiny(tmp_path)
    suite = C.load_suite(cfg)
    records = write_search(suite, {"lr-0.1": 0.4, "lr-0.01": 0.6})
    edit_record(
        records["lr-0.01"], lambda m: m.update(params=1000, params_main=900, params_head=50, params_aux=40)
    )
    assert main(["select", "--config", str(cfg), "--experiment", "ps"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"psrnn select: error: {records['lr-0.01']}: params = 1000, but params_main + params_head + "
        "params_aux = 990 (edited); delete its folder"
    ], err
    assert not C.selection_path(suite, "ps").exists()


def test_a_first_study_record_with_a_part_of_its_params_deleted_is_refused(tmp_path, monkeypatch, capsys):
    """The confirming pass of stop 62, P-3: params edited and params_main deleted had switched
    the sum check off, and every seed so edited moved Table 2's '#params ours'."""
    monkeypatch.chdir(tmp_path)
    cfg = write_tiny(tmp_path)
    suite = C.load_suite(cfg)
    records = write_search(suite, {"lr-0.1": 0.4, "lr-0.01": 0.6})
    edit_record(records["lr-0.01"], lambda m: m.update(params=2000, params_head=50, params_aux=40))
    assert main(["select", "--config", str(cfg), "--experiment", "ps"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"psrnn select: error: {records['lr-0.01']}: holds params_head, params_aux but no params_main "
        "(edited); delete its folder"
    ]
    assert not C.selection_path(suite, "ps").exists()


def test_a_final_record_edited_apart_from_the_search_record_it_took_is_refused(tmp_path, monkeypatch, capsys):
    """The confirming pass of stop 62, 1i': a final run that took its search run's record
    (`reused_from`) and was then edited coherently compiled; restamp alone compared the two."""
    shutil.copytree(C.ROOT / "results" / "mnist-real", tmp_path / "results" / "mnist-real")
    monkeypatch.chdir(tmp_path)
    path = Path("results/mnist-real/runs/mnist_gru/seed0/metrics.json")
    source = json.loads(path.read_text())["reused_from"]
    edit_record(path, lambda m: m.update(test_acc=m["test_acc"] + 0.01))
    assert refused(C.ROOT / "config" / "mnist-real.yaml", tmp_path / "results" / "mnist-real", capsys) == (
        f"{path}: took the record of {source} but differs from it in test_acc (edited); delete its folder"
    )


def test_a_suite_without_a_job_env_leaves_the_kernel_variables_to_the_machine(tmp_path, monkeypatch):
    """A run of a suite that sets no job_env trains under its shell's variables (MKL_CBWR
    exported there): its record is the suite's run, not one trained outside the suite's
    job_env (which had refused the third study's every run once the tests' process set them)."""
    monkeypatch.chdir(tmp_path)
    cfg = write_tiny(tmp_path)
    suite = C.load_suite(cfg)
    assert not suite.get("job_env")
    records = write_search(suite, {"lr-0.1": 0.4, "lr-0.01": 0.6})
    for path in records.values():
        edit_record(path, lambda m: m.update(kernel_env={"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AUTO"}))
    assert main(["select", "--config", str(cfg), "--experiment", "ps"]) == 0
    assert json.loads(C.selection_path(suite, "ps").read_text())["point"] == "lr-0.01"
