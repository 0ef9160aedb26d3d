"""The token budget (max_tokens): batches of long text cut into pieces whose gradients add
up to the batch's, so memory is bounded and the run is the same run; peak memory in
metrics.json; --threads."""

import dataclasses
import json

import pytest
import torch
from test_training import Interrupt, kill_at, quiet, small_cfg, write_text

from psrnn.cli import main
from psrnn.engine.checkpoint import Generators, load_last, read_checkpoint
from psrnn.engine.fit import fit
from psrnn.files import torch_save
from psrnn.studies.private_shared.data import batch_order, load_split, micro_batches
from psrnn.studies.private_shared.epoch import evaluate
from psrnn.studies.private_shared.hooks import data_identity, make_optimizer
from psrnn.studies.private_shared.models import build_model


def test_pieces_stay_within_the_budget_and_cover_the_batch_once():
    g = torch.Generator().manual_seed(0)
    for budget in (1, 50, 300, 1000, 4000):
        for _ in range(20):
            lengths = torch.randint(1, 200, (int(torch.randint(1, 64, (1,), generator=g)),), generator=g)
            pieces = micro_batches(lengths, budget)
            for p in pieces:
                # a piece pads to its longest sequence; only a lone sequence may exceed the budget
                assert len(p) * int(lengths[p].max()) <= budget or len(p) == 1
            assert sorted(torch.cat(pieces).tolist()) == list(range(len(lengths)))
    lengths = torch.tensor([30, 10, 20])
    assert [p.tolist() for p in micro_batches(lengths, 90)] == [[0, 1, 2]]  # fits: as drawn
    assert [p.tolist() for p in micro_batches(lengths, 0)] == [[0, 1, 2]]  # 0: no bound
    # over: sorted by length, cut greedily (2 x 20 = 40 <= 45, then 30 alone)
    assert [p.tolist() for p in micro_batches(lengths, 45)] == [[1, 2], [0]]


def test_an_epoch_under_a_budget_still_visits_every_sequence_once():
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(5, 2000, (997,), generator=g)
    seen = []
    for batch in batch_order(lengths, 32, 4, g):
        pieces = micro_batches(lengths[batch], 8000)
        assert all(len(p) * int(lengths[batch][p].max()) <= 8000 for p in pieces if len(p) > 1)
        seen += [i for p in pieces for i in batch[p].tolist()]
    assert sorted(seen) == list(range(997))
    assert len(seen) > len(batch_order(lengths, 32, 4, torch.Generator().manual_seed(1)))


def test_a_run_in_pieces_is_the_same_run(tmp_path):
    """Same gradients, anchors and losses: the histories agree to float rounding."""
    data = write_text(tmp_path / "data", sizes=(64, 16, 16))  # lengths 5..30, batches of 16
    cfg = small_cfg(data, dataset="imdb", window=4, max_epochs=3)
    split = load_split(data, "train")
    lengths = split.lengths
    cut = sum(len(micro_batches(lengths[b], 100)) > 1 for b in lengths.split(16))
    assert cut >= 3  # the budget of 100 padded steps really cuts batches of 16 x up to 30
    whole = fit(cfg, tmp_path / "whole", log=quiet)
    pieces = fit(dataclasses.replace(cfg, max_tokens=100), tmp_path / "pieces", log=quiet)
    for key in ("test_acc", "best_valid_acc", "best_epoch"):
        assert pieces[key] == whole[key]
    for key in ("test_main_loss", "test_aux_loss", "train_main_loss", "train_aux_loss"):
        assert pieces[key] == pytest.approx(whole[key], rel=1e-5, abs=1e-7)
    assert pieces["config"]["max_tokens"] == 100


def test_evaluation_in_pieces_gives_the_same_metrics(tmp_path):
    data = write_text(tmp_path / "data", sizes=(8, 40, 8))
    cfg = small_cfg(data, dataset="imdb", window=4)
    model = build_model(cfg, "categorical", 6, 2)
    split = load_split(data, "valid")
    a = evaluate(model, split, cfg, torch.device("cpu"))
    b = evaluate(model, split, dataclasses.replace(cfg, max_tokens=40), torch.device("cpu"))
    assert a["acc"] == b["acc"]
    assert b["main_loss"] == pytest.approx(a["main_loss"], rel=1e-6)
    assert b["aux_loss"] == pytest.approx(a["aux_loss"], rel=1e-6)


def test_a_run_resumes_across_a_lower_budget_and_keeps_its_peak_memory(tmp_path):
    """Out of GPU memory: lower max_tokens and resume; the peak of every session counts."""
    data = write_text(tmp_path / "data")
    cfg = small_cfg(data, dataset="imdb", window=4, max_epochs=3)
    run = tmp_path / "run"
    with pytest.raises(Interrupt):
        fit(cfg, run, on_step=kill_at(2, 1), log=quiet)
    ckpt = torch.load(run / "ckpt_last.pt", weights_only=True)
    ckpt["state"]["peak_memory_mb"] = 123456.0  # an earlier session on a bigger batch
    torch.save(ckpt, run / "ckpt_last.pt")
    metrics = fit(dataclasses.replace(cfg, max_tokens=60), run, log=quiet)
    assert metrics["epochs_run"] == 3
    assert metrics["peak_memory_mb"] == 123456.0
    assert metrics["peak_memory_method"].startswith("cpu ")
    model = build_model(cfg, "categorical", 6, 2)
    opt, sched = make_optimizer(cfg, model)
    state = load_last(
        run / "ckpt_last.pt",
        cfg,
        model,
        opt,
        sched,
        Generators.seeded(0),
        data_identity(cfg),
    )
    assert state.peak_memory_mb == 123456.0


def test_peak_memory_counts_what_training_allocates(tmp_path, monkeypatch):
    data = write_text(tmp_path / "data")
    cfg = small_cfg(data, dataset="imdb", window=4, max_epochs=1)
    held = []

    def allocate(epoch, step, model):  # 256 MiB kept alive until the run ends
        if not held:
            held.append(torch.ones(64 * 2**20))

    metrics = fit(cfg, tmp_path / "run", on_step=allocate, log=quiet)
    assert metrics["peak_memory_mb"] >= 250
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["peak_memory_mb"] >= 250


def test_threads_flag_sets_torchs_threads_and_rejects_zero(tmp_path, capsys):
    data = write_text(tmp_path / "data")
    run_yaml = tmp_path / "run.yaml"
    values = {**dataclasses.asdict(small_cfg(data, dataset="imdb", window=4, max_epochs=1))}
    run_yaml.write_text(json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}))
    before = torch.get_num_threads()
    try:
        assert main(["train", "--config", str(run_yaml), "--out", str(tmp_path / "r"), "--threads", "1"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert main(["train", "--config", str(run_yaml), "--out", str(tmp_path / "r0"), "--threads", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["psrnn train: error: --threads 0: must be at least 1"]


def test_a_final_run_that_is_its_search_run_reuses_it_and_another_seed_does_not(tmp_path):
    """--reuse: the first seed's final run at the selected point is the search run itself."""
    data = write_text(tmp_path / "data")
    cfg = small_cfg(data, dataset="imdb", window=4, max_epochs=2)
    search = fit(cfg, tmp_path / "search", meta={"point": "p1"}, log=quiet)
    said, steps = [], []
    final = fit(
        cfg,
        tmp_path / "final",
        on_step=lambda *a: steps.append(a),
        log=said.append,
        reuse=tmp_path / "search",
    )
    assert any(line.startswith(f"reusing {tmp_path / 'search'}: the same run") for line in said)
    assert steps == []  # nothing trained again
    assert final["point"] is None and search["point"] == "p1"
    # finished: its record and files, from the machine that made them; nothing evaluated again
    assert any(line.endswith("nothing trained or evaluated again") for line in said)
    assert {**final, "point": "p1", "reused_from": None} == search
    assert final["reused_from"] == str(tmp_path / "search") and search["reused_from"] is None
    for name in ("history.csv", "ckpt_best.pt"):
        assert (tmp_path / "final" / name).read_bytes() == (tmp_path / "search" / name).read_bytes()
    # ckpt_last.pt: the search run's, naming the final run (its experiment and point)
    ckpt = read_checkpoint(tmp_path / "search" / "ckpt_last.pt")
    assert (ckpt["experiment"], ckpt["point"]) == (None, "p1")
    torch_save(tmp_path / "renamed.pt", {**ckpt, "point": None})
    assert (tmp_path / "final" / "ckpt_last.pt").read_bytes() == (tmp_path / "renamed.pt").read_bytes()
    for key in ("test_acc", "best_valid_acc", "best_epoch", "test_main_loss", "test_aux_loss", "epochs_run"):
        assert final[key] == search[key]
    said.clear()
    other = dataclasses.replace(cfg, seed=1)
    fit(
        other,
        tmp_path / "seed1",
        on_step=lambda *a: steps.append(a),
        log=said.append,
        reuse=tmp_path / "search",
    )
    assert any(
        line.startswith(f"not reusing {tmp_path / 'search'}: seed (checkpoint 0, requested 1)")
        for line in said
    )
    assert steps  # trained from scratch
