"""One Binary Counter run through `python -m psrnn train`: what it writes, that every
model setting reaches the model, and that a final run reuses its search run. Resume,
refusal of changed settings, the NaN stop and the divergence flag are the engine's, checked
for every study in test_study_contract.py."""

import json

import numpy as np
import pytest

from psrnn import config as C
from psrnn.cli import main
from psrnn.engine.fit import fit
from psrnn.files import read_json
from psrnn.studies.relreg import hooks as S
from psrnn.studies.relreg import training as T

CI = str(C.ROOT / "config" / "relreg-ci.yaml")
POINT = "l2_cell-0.001_l2_noncell-0.001_noise-0.1"


def train(out, *extra):
    args = ["train", "--config", CI, "--experiment", "proto_both", "--seed", "0", "--out", str(out)]
    return main([*args, "--point", POINT, "--threads", "1", *extra])


def test_run_writes_the_contract(tmp_path):
    assert train(tmp_path / "a") == 0
    m = read_json(tmp_path / "a" / "metrics.json")
    assert (m["study"], m["model"], m["point"], m["epochs_run"]) == ("relreg", "proto", POINT, 5)
    assert set(m["test"]) == {"6", "8"} and m["test"]["6"]["count"] == 64  # all 6-bit numbers
    assert 0 <= m["test"]["8"]["seq_acc"] <= m["test"]["8"]["bit_acc"] <= 1
    assert m["test_acc"] == pytest.approx((m["test"]["6"]["seq_acc"] + m["test"]["8"]["seq_acc"]) / 2)
    assert m["config"]["noise"] == 0.1 and m["cell_params"] > 0 and m["params"] > m["cell_params"]
    history = (tmp_path / "a" / "history.csv").read_text().splitlines()
    assert history[0] == ",".join(T.HISTORY_COLUMNS) and len(history) == 1 + 5
    z = np.load(tmp_path / "a" / "loading.npz")
    assert z["steps"].shape == (4, 10, 4) and np.allclose(z["steps"].sum(-1), 1, atol=1e-5)
    assert z["hist"].shape == (1 + 5, T.HIST_BINS) and np.allclose(z["hist"].sum(1), 1)
    assert z["inputs"][0].tolist() == [2, 0, 0, 1, 1, 1, 1, 1, 1, 1]  # the thesis' Figure 4.3 example


def test_final_run_reuses_its_search_run(tmp_path, capsys):
    train(tmp_path / "search")
    search = read_json(tmp_path / "search" / "metrics.json")
    args = ["train", "--config", CI, "--experiment", "proto_both", "--seed", "0", "--threads", "1"]
    # a final run with the selected point's settings (no --point) is the same run
    sel = tmp_path / "selected.json"
    overrides = {"l2_cell": 0.001, "l2_noncell": 0.001, "noise": 0.1}
    sel.write_text(json.dumps({"experiment": "proto_both", "point": POINT, "overrides": overrides}))
    out = tmp_path / "final"
    main([*args, "--selected", str(sel), "--out", str(out), "--reuse", str(tmp_path / "search")])
    assert "reusing" in capsys.readouterr().out
    final = read_json(out / "metrics.json")
    assert final["test"] == search["test"] and final["best_epoch"] == search["best_epoch"]


def _final(tmp_path, *extra):
    sel = tmp_path / "selected.json"
    overrides = {"l2_cell": 0.001, "l2_noncell": 0.001, "noise": 0.1}
    sel.write_text(json.dumps({"experiment": "proto_both", "point": POINT, "overrides": overrides}))
    args = ["train", "--config", CI, "--experiment", "proto_both", "--seed", "0", "--threads", "1"]
    return main([*args, "--selected", str(sel), "--out", str(tmp_path / "final"), *extra])


def test_a_final_run_that_took_its_finished_search_run_resumes_after_its_metrics_are_lost(tmp_path, capsys):
    """The copied ckpt_last.pt names the final run, not the search point: the final run's
    own folder is never refused as another run's (refuse_other_run)."""
    train(tmp_path / "search")
    search = read_json(tmp_path / "search" / "metrics.json")
    assert _final(tmp_path, "--reuse", str(tmp_path / "search")) == 0
    (tmp_path / "final" / "metrics.json").unlink()
    capsys.readouterr()
    assert _final(tmp_path, "--reuse", str(tmp_path / "search")) == 0
    assert "resumed after epoch 5" in capsys.readouterr().out
    final = read_json(tmp_path / "final" / "metrics.json")
    assert (final["test"], final["point"], final["experiment"]) == (search["test"], None, "proto_both")


def test_a_final_run_resumes_from_its_unfinished_search_runs_checkpoint(tmp_path, capsys):
    train(tmp_path / "search")
    search = read_json(tmp_path / "search" / "metrics.json")
    (tmp_path / "search" / "metrics.json").unlink()  # as if cut after its last checkpoint
    capsys.readouterr()
    assert _final(tmp_path, "--reuse", str(tmp_path / "search")) == 0
    out = capsys.readouterr().out
    assert "resumed from its checkpoint" in out and "resumed after epoch 5" in out
    assert read_json(tmp_path / "final" / "metrics.json")["test"] == search["test"]


def test_every_model_setting_reaches_the_model(tmp_path):
    """slots (RMC memory rows) is built as configured: the head reads slots x width units."""
    from psrnn.studies.relreg.models import build_model
    from psrnn.studies.relreg.settings import RelRegConfig

    cfg = RelRegConfig(
        model="rmc",
        hidden=8,
        key_size=4,
        heads=2,
        slots=2,
        epochs=1,
        train_size=32,
        valid_bits=(4,),
        test_bits=(6,),
        test_count=16,
    )
    m = fit(cfg, tmp_path, {"experiment": "t"})
    two = build_model("rmc", hidden=8, cells=1, key_size=4, heads=2, layers=1, noise=0.0, slots=2)
    one = build_model("rmc", hidden=8, cells=1, key_size=4, heads=2, layers=1, noise=0.0, slots=1)
    assert m["params"] == sum(p.numel() for p in two.parameters()) != sum(p.numel() for p in one.parameters())


def test_causal_reaches_the_transformer(tmp_path, monkeypatch):
    from psrnn.studies.relreg.settings import RelRegConfig

    built = {}
    real = S.build_model

    def spy(kind, **kwargs):
        built.update(kwargs)
        return real(kind, **kwargs)

    monkeypatch.setattr(S, "build_model", spy)
    small = dict(hidden=16, key_size=4, heads=2, epochs=1, train_size=32, valid_bits=(4,), test_bits=(6,))
    m = fit(RelRegConfig(model="transformer", causal=True, test_count=16, **small), tmp_path, {})
    assert built["causal"] is True and m["config"]["causal"] is True


def test_a_checkpoint_from_before_a_field_existed_resumes(tmp_path, capsys):
    """A run whose ckpt_last.pt predates `causal` ran with its default: it resumes, not restarts."""
    import torch

    train(tmp_path / "a", "--set", "epochs=2")
    ckpt = torch.load(tmp_path / "a" / "ckpt_last.pt", weights_only=True)
    del ckpt["config"]["causal"]
    torch.save(ckpt, tmp_path / "a" / "ckpt_last.pt")
    (tmp_path / "a" / "metrics.json").unlink()
    capsys.readouterr()
    assert train(tmp_path / "a", "--set", "epochs=2") == 0
    out = capsys.readouterr().out
    assert "resumed after epoch 2" in out and "starting over" not in out
