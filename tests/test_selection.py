"""Grid-point selection (psrnn.engine.selection, `python -m psrnn select`): the best validation
accuracy, ties broken by validation loss then grid order, never the test set."""

import json
from pathlib import Path

import pytest
from suites import write_search, write_tiny

from psrnn import config as C
from psrnn import workflow as W
from psrnn.cli import UserError, main
from psrnn.engine import selection

# --- select ----------------------------------------------------------------------------------


POINTS = [("lr-0.1", {"lr": 0.1}), ("lr-0.01", {"lr": 0.01}), ("lr-0.03", {"lr": 0.03})]


def metrics(acc, loss=1.0, aux=0.0):
    return {"best_valid_acc": acc, "valid_main_loss": loss, "valid_aux_loss": aux, "test_acc": 0.0}


def test_select_picks_the_best_validation_accuracy():
    rec = selection.select(
        "e", POINTS, {"lr-0.1": metrics(0.5), "lr-0.01": metrics(0.75), "lr-0.03": metrics(0.7)}
    )
    assert rec == {
        "experiment": "e",
        "point": "lr-0.01",
        "overrides": {"lr": 0.01},
        "best_valid_acc": 0.75,
        "candidates": [
            {"point": "lr-0.1", "valid_acc": 0.5},
            {"point": "lr-0.01", "valid_acc": 0.75},
            {"point": "lr-0.03", "valid_acc": 0.7},
        ],
    }


def test_select_breaks_ties_by_validation_loss_then_grid_order():
    tie = {
        "lr-0.1": metrics(0.8, 0.9, 0.2),
        "lr-0.01": metrics(0.8, 0.9, 0.1),
        "lr-0.03": metrics(0.8, 0.9, 0.1),
    }
    assert selection.select("e", POINTS, tie)["point"] == "lr-0.01"
    same = {p: metrics(0.8) for p, _ in POINTS}
    assert selection.select("e", POINTS, same)["point"] == "lr-0.1"


def test_select_never_looks_at_the_test_set():
    ms = {"lr-0.1": {**metrics(0.6), "test_acc": 0.99}, "lr-0.01": metrics(0.61), "lr-0.03": metrics(0.1)}
    assert selection.select("e", POINTS, ms)["point"] == "lr-0.01"


def test_select_names_missing_points():
    with pytest.raises(UserError, match="lr-0.03"):
        selection.select("e", POINTS, {"lr-0.1": metrics(0.5), "lr-0.01": metrics(0.5)})


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("best_valid_acc", float("nan"), "best_valid_acc = nan is not an accuracy in [0, 1]"),
        ("best_valid_acc", float("inf"), "best_valid_acc = inf is not an accuracy in [0, 1]"),
        ("best_valid_acc", 7.5, "best_valid_acc = 7.5 is not an accuracy in [0, 1]"),
        ("best_valid_acc", "0.99", "best_valid_acc = '0.99' is not an accuracy in [0, 1]"),
        ("best_valid_acc", True, "best_valid_acc = True is not an accuracy in [0, 1]"),
        ("valid_main_loss", float("nan"), "valid_main_loss = nan is not a finite number"),
        ("valid_aux_loss", None, "valid_aux_loss = None is not a finite number"),
    ],
)
@pytest.mark.parametrize("ties", ["loss", "draw"])
def test_select_refuses_a_record_it_cannot_rank(tmp_path, monkeypatch, capsys, field, value, said, ties):
    """A NaN in the first grid point under `ties: draw` divided by an empty tie set; NaN or
    Infinity elsewhere failed in the JSON writer; 7.5 and "0.99" were ranked and drawn from,
    and Snakemake trained final runs on that point. Each is one line naming the run, and no
    selected.json is written."""
    monkeypatch.chdir(tmp_path)
    cfg = write_tiny(tmp_path)
    cfg.write_text(cfg.read_text() + f"ties: {ties}\n")
    suite = C.load_suite(cfg)
    exp = next(e for e in suite["experiments"] if C.has_grid(suite, e))
    points = C.grid_points(suite["experiments"][exp])
    for i, (pid, _) in enumerate(points):
        d = C.search_dir(suite, exp, pid)
        d.mkdir(parents=True)
        record = metrics(0.5 + 0.1 * i) | ({field: value} if i == 0 else {})
        (d / "metrics.json").write_text(json.dumps(record))  # NaN and Infinity as Python writes them
    assert main(["select", "--config", str(cfg), "--experiment", exp]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and f"experiment {exp}, grid point {points[0][0]} (its search run's metrics.json): " in err[0]
    )
    assert said in err[0]
    assert not C.selection_path(suite, exp).exists()


def test_select_command_writes_selected_json(tmp_path, monkeypatch, capsys):
    suite = write_tiny(tmp_path)
    monkeypatch.chdir(tmp_path)
    write_search(C.load_suite(suite), {"lr-0.1": 0.4, "lr-0.01": 0.6})  # the records training writes
    assert main(["select", "--config", str(suite), "--experiment", "ps"]) == 0
    rec = json.loads((tmp_path / "results/tiny/search/ps/selected.json").read_text())
    assert rec["point"] == "lr-0.01" and rec["overrides"] == {"lr": 0.01}
    selected = tmp_path / "results/tiny/search/ps/selected.json"
    assert W.is_current(selected, W.train_input_stamps(C.load_suite(suite), "ps")["selected"])
    # the final run's settings are the selected point's
    run = C.resolve_run(C.load_suite(suite), "ps", 1, selected=rec["overrides"])
    assert run.lr == 0.01 and run.seed == 1
    assert main(["select", "--config", str(suite), "--experiment", "base"]) == 2
    assert "no `grid:`" in capsys.readouterr().err


def test_select_refuses_an_out_that_is_a_folder(tmp_path, monkeypatch, capsys):
    """N33: `--out /` failed in os.replace with a 22-line EBUSY traceback; a folder given as
    --out is one line before any record is read, and nothing is written."""
    suite = write_tiny(tmp_path)
    monkeypatch.chdir(tmp_path)
    write_search(C.load_suite(suite), {"lr-0.1": 0.4, "lr-0.01": 0.6})
    for out in ("/", str(tmp_path)):
        assert main(["select", "--config", str(suite), "--experiment", "ps", "--out", out]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"psrnn select: error: --out {out}: is a folder; name the file to write "
            f"(e.g. {Path(out) / 'selected.json'})"
        ], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "tiny.yaml"]
    assert not C.selection_path(C.load_suite(suite), "ps").exists()


def test_a_busy_target_is_one_line(tmp_path, monkeypatch, capsys):
    """EBUSY from os.replace (a mount point, a folder in use) names the target, not the
    temporary file."""
    import errno

    from psrnn import files

    suite = write_tiny(tmp_path)
    monkeypatch.chdir(tmp_path)
    write_search(C.load_suite(suite), {"lr-0.1": 0.4, "lr-0.01": 0.6})
    target = C.selection_path(C.load_suite(suite), "ps")

    def busy(src, dst):
        raise OSError(errno.EBUSY, "Device or resource busy", str(src), None, str(dst))  # as os.replace does

    monkeypatch.setattr(files.os, "replace", busy)
    assert main(["select", "--config", str(suite), "--experiment", "ps"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"psrnn select: error: {target}: busy (a mount point or a folder in use), not a file"], err
    assert not target.exists() and list(target.parent.glob(".*.tmp")) == []


def test_select_ranks_by_the_studys_declared_metric():
    """Study.selection decides (psrnn.engine.choose): the lowest valid_loss wins where the
    best accuracy is another point's; a record lacking the metric or a tie key is refused."""
    from psrnn.engine import choose

    sel = ("valid_loss", "min", ())
    records = {
        "lr-0.1": {"best_valid_acc": 0.9, "valid_loss": 0.5},
        "lr-0.01": {"best_valid_acc": 0.6, "valid_loss": 0.4},
        "lr-0.03": {"best_valid_acc": 0.7, "valid_loss": 0.45},
    }
    ranked = {p: choose.adapted(m, sel) for p, m in records.items()}
    rec = choose.named(selection.select("e", POINTS, ranked), records, sel)
    assert rec["point"] == "lr-0.01" and rec["metric"] == "valid_loss" and rec["valid_loss"] == 0.4
    assert "best_valid_acc" not in rec and [c["valid_loss"] for c in rec["candidates"]] == [0.5, 0.4, 0.45]
    with pytest.raises(UserError, match="grid point p .*: no valid_aux_loss"):
        choose.check_record("e", "p", {"best_valid_acc": 0.5, "valid_main_loss": 1.0})
    with pytest.raises(UserError, match="valid_loss = inf is not a finite number"):
        choose.check_record("e", "p", {"valid_loss": float("inf")}, sel)
