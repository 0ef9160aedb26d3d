"""Fused runs (psrnn.engine.group, psrnn.studies.relreg.fused): a group of runs trained as one batched
model gives each run the numbers it gets alone, keeps each run's folder, and resumes per
member.

Same numbers: every test accuracy per bit count, the best epoch and the best validation
accuracy identical to the lone run's; losses (train, validation, every history row)
within LOSS_RTOL (batched kernels add in another order: float32 rounding, ~1e-7 here).
"""

import csv
import dataclasses
from pathlib import Path

import pytest
import torch

from psrnn import config as C
from psrnn.engine import groups
from psrnn.engine.checkpoint import read_checkpoint
from psrnn.engine.fit import fit
from psrnn.engine.group import Job, fit_group
from psrnn.studies.relreg.settings import RelRegConfig

LOSS_RTOL = 1e-4
TINY = dict(epochs=3, train_size=64, batch_size=16, valid_bits=(4, 5), test_bits=(6, 8), test_count=32)


def quiet(msg: str) -> None:
    pass


def rows(path: Path) -> list[dict[str, float]]:
    with open(path) as fh:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(fh)]


def grid(kind: str) -> list[RelRegConfig]:
    """Grid points of one shape with every per-run setting varied (two seeds, both rates,
    the lambdas, the noise regularizer with its own random stream, clip on and off)."""
    if kind in ("lstm", "rmc", "transformer"):
        if kind == "lstm":
            base = RelRegConfig(model="lstm", hidden=6, **TINY)
        elif kind == "rmc":  # 2 memory slots, 2 heads of 3
            base = RelRegConfig(model="rmc", hidden=6, key_size=3, heads=2, slots=2, **TINY)
        else:  # two layers, the causal mask, 2 heads of 4: every part of the encoder
            base = RelRegConfig(
                model="transformer", hidden=16, key_size=4, heads=2, layers=2, causal=True, **TINY
            )
        cases = [dict(seed=0), dict(seed=1, lr=0.05), dict(seed=0, l2=0.01), dict(seed=2, clip=0.0)]
    else:
        base = RelRegConfig(model="proto", hidden=6, cells=3, **TINY)
        cases = [
            dict(seed=0, noise=0.1),
            dict(seed=1, lr=0.05, l2_cell=0.01),
            dict(seed=0, l2_noncell=0.01, noise=1.0),
            dict(seed=2, l2=0.001),
            dict(seed=3, optimizer="sgd", lr=0.5, noise=0.01),
        ]
    return [dataclasses.replace(base, **c) for c in cases]


def assert_same_numbers(alone: dict, fused: dict, alone_dir: Path, fused_dir: Path) -> None:
    assert fused["test"] == alone["test"]  # every accuracy per bit count, exactly
    for key in (
        "test_acc",
        "test_bit_acc",
        "best_epoch",
        "best_valid_acc",
        "valid_bit_acc",
        "epochs_run",
        "stopped",
    ):
        assert fused[key] == alone[key], key
    for key in ("train_loss", "valid_main_loss"):
        assert fused[key] == pytest.approx(alone[key], rel=LOSS_RTOL), key
    a, f = rows(alone_dir / "history.csv"), rows(fused_dir / "history.csv")
    assert len(a) == len(f) == alone["epochs_run"]
    for ra, rf in zip(a, f, strict=True):
        assert rf == pytest.approx(ra, rel=LOSS_RTOL, abs=1e-9)


@pytest.mark.parametrize("kind", ["lstm", "proto", "rmc", "transformer"])
def test_a_fused_run_gives_the_numbers_of_the_same_run_alone(tmp_path, kind):
    runs = grid(kind)
    alone = [fit(r, tmp_path / f"alone{i}", log=quiet) for i, r in enumerate(runs)]
    fused = fit_group(
        [Job(r, tmp_path / f"fused{i}", {}) for i, r in enumerate(runs)], log=quiet, save_every_s=0
    )
    for i, (a, f) in enumerate(zip(alone, fused, strict=True)):
        assert_same_numbers(a, f, tmp_path / f"alone{i}", tmp_path / f"fused{i}")
        names = {p.name for p in (tmp_path / f"fused{i}").iterdir()}
        assert names == {p.name for p in (tmp_path / f"alone{i}").iterdir()}  # the same files
        best = read_checkpoint(tmp_path / f"fused{i}" / "ckpt_best.pt")
        assert best["epoch"] == a["best_epoch"] and best["config"] == runs[i].to_dict()


def test_a_killed_group_resumes_each_member_and_finished_members_are_not_retrained(tmp_path):
    runs = grid("proto")[:3]
    jobs = [Job(r, tmp_path / f"m{i}", {}) for i, r in enumerate(runs)]
    done = fit(runs[0], jobs[0].out_dir, log=quiet)  # one member finished before the group starts
    stamp = (jobs[0].out_dir / "metrics.json").stat().st_mtime_ns

    class Killed(Exception):
        pass

    def kill(epoch: int) -> None:
        if epoch == 2:
            raise Killed

    with pytest.raises(Killed):
        fit_group(jobs, log=quiet, save_every_s=0, on_epoch=kill)
    for job in jobs[1:]:  # killed after epoch 2: a checkpoint, no metrics
        assert not (job.out_dir / "metrics.json").exists()
        assert read_checkpoint(job.out_dir / "ckpt_last.pt")["state"]["epoch"] == 2
    log: list[str] = []
    resumed = fit_group(jobs, log=log.append, save_every_s=0)
    assert resumed[0] == done and (jobs[0].out_dir / "metrics.json").stat().st_mtime_ns == stamp
    assert sum("resumed after epoch 2" in line for line in log) == 2
    whole = fit_group(
        [Job(r, tmp_path / f"whole{i}", {}) for i, r in enumerate(runs)], log=quiet, save_every_s=0
    )
    for i in (1, 2):  # resumed = uninterrupted, bit for bit
        assert resumed[i]["test"] == whole[i]["test"] and resumed[i]["train_loss"] == whole[i]["train_loss"]
        assert rows(jobs[i].out_dir / "history.csv") == rows(tmp_path / f"whole{i}" / "history.csv")


def test_a_members_checkpoint_resumes_alone(tmp_path):
    runs = grid("lstm")[:2]
    jobs = [Job(r, tmp_path / f"m{i}", {}) for i, r in enumerate(runs)]

    def kill(epoch: int) -> None:
        if epoch == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit_group(jobs, log=quiet, save_every_s=0, on_epoch=kill)
    log: list[str] = []
    alone = fit(runs[0], jobs[0].out_dir, log=log.append)  # engine.fit takes the member's checkpoint
    assert any("resumed after epoch 2" in line for line in log)
    whole = fit(runs[0], tmp_path / "whole", log=quiet)
    assert_same_numbers(whole, alone, tmp_path / "whole", jobs[0].out_dir)


def test_groups_are_shapes_cut_to_size():
    cfg = C.load_suite(C.ROOT / "config" / "relreg.yaml")
    assert groups.search_groups(cfg, "lstm_l2") == {
        f"hidden-{h}": [pid for pid, v in C.grid_points(cfg["experiments"]["lstm_l2"]) if v["hidden"] == h]
        for h in (6, 8, 10)
    }
    assert list(groups.search_groups(cfg, "proto_both")) == ["all"]  # one shape: hidden 8, 4 cells
    rmc = groups.search_groups(cfg, "rmc_l2")  # a shape: hidden = key size x heads (tied)
    assert {k: len(v) for k, v in rmc.items()} == {
        "heads-1_hidden-8_key_size-8": 10,
        "heads-2_hidden-8_key_size-4": 10,
        "heads-2_hidden-10_key_size-5": 10,
    }
    transformer = groups.search_groups(cfg, "transformer_l2")  # a shape: size, heads, layers
    assert {k: len(v) for k, v in transformer.items()} == {
        f"heads-{h}_hidden-{f}_key_size-8_layers-{n}": 6 for h, f in ((2, 64), (3, 96)) for n in (1, 2)
    }


def test_the_batched_model_is_the_models_equations():
    """One forward of two stacked proto models = each model's own forward."""
    from psrnn.studies.relreg.fused import Batched
    from psrnn.studies.relreg.models import build_model

    torch.manual_seed(0)
    runs = grid("proto")[:2]
    models = [build_model("proto", hidden=6, cells=3, key_size=4, heads=2, layers=1, noise=0.0) for _ in runs]
    opts = [torch.optim.Adam(m.parameters()) for m in models]
    x = torch.randint(0, 3, (2, 5, 7))
    logits, loading = Batched(runs, models, opts).forward(x)
    for r, m in enumerate(models):
        out = m.eval()(x[r])
        torch.testing.assert_close(logits[r], out.logits, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(loading[r], out.loading, rtol=1e-5, atol=1e-6)


RMC = dict(hidden=6, cells=1, key_size=3, heads=2, layers=1, noise=0.0)
TRANSFORMER = dict(hidden=16, cells=1, key_size=4, heads=2, layers=2, noise=0.0)


@pytest.mark.parametrize(
    "kind, setting, value, shape",
    [
        ("rmc", "slots", 1, RMC),
        ("rmc", "slots", 2, RMC),
        ("transformer", "causal", True, TRANSFORMER),
        ("transformer", "causal", False, TRANSFORMER),
    ],
    ids=["rmc-1-slot", "rmc-2-slots", "transformer-causal", "transformer-unmasked"],
)
def test_the_batched_rmc_and_transformer_are_their_models_equations(kind, setting, value, shape):
    """One forward of two stacked models = each one's own: the relational memory's attention,
    MLP and gates per step; torch's Transformer encoder layers, with or without the mask."""
    from psrnn.studies.relreg.fused import Batched
    from psrnn.studies.relreg.models import build_model

    torch.manual_seed(0)
    runs = [dataclasses.replace(r, **{setting: value}) for r in grid(kind)[:2]]
    models = [build_model(kind, **shape, **{setting: value}) for _ in runs]
    opts = [torch.optim.Adam(m.parameters()) for m in models]
    x = torch.randint(0, 3, (2, 5, 7))
    logits, loading = Batched(runs, models, opts).forward(x)
    assert loading is None
    for r, m in enumerate(models):
        torch.testing.assert_close(logits[r], m.train()(x[r]).logits, rtol=1e-5, atol=1e-6)


def test_a_member_whose_loss_goes_non_finite_ends_at_its_best_epoch(tmp_path, monkeypatch):
    """As engine.fit ends a lone run (tests/test_study_contract.py): the member's result is
    its best epoch so far, the other members train on with their own numbers."""
    from psrnn.studies.relreg import fused as relreg_fused

    real, calls = relreg_fused.Batched.train_epoch, []

    def poisoned(self, *args, **kwargs):
        columns = real(self, *args, **kwargs)
        calls.append(len(columns["train_loss"]))
        if len(calls) == 2:  # the second fused epoch: member 1's loss is NaN
            columns["train_loss"] = columns["train_loss"].clone()
            columns["train_loss"][1] = float("nan")
        return columns

    monkeypatch.setattr(relreg_fused.Batched, "train_epoch", poisoned)
    runs = grid("lstm")[:3]
    fused = fit_group(
        [Job(r, tmp_path / f"fused{i}", {}) for i, r in enumerate(runs)], log=quiet, save_every_s=0
    )
    assert calls == [3, 3, 2]  # member 1 left the batch after epoch 2
    assert fused[1]["stopped"] == "non_finite" and fused[1]["best_epoch"] == 1
    assert fused[1]["epochs_run"] == 1 and fused[1]["diverged"]["epoch"] == 2
    assert len(rows(tmp_path / "fused1" / "history.csv")) == 1
    monkeypatch.undo()
    alone = fit(dataclasses.replace(runs[1], epochs=1), tmp_path / "alone1", log=quiet)
    assert fused[1]["test"] == alone["test"] and fused[1]["best_valid_acc"] == alone["best_valid_acc"]
    for i in (0, 2):  # the others are untouched
        a = fit(runs[i], tmp_path / f"alone{i}", log=quiet)
        assert_same_numbers(a, fused[i], tmp_path / f"alone{i}", tmp_path / f"fused{i}")


@pytest.mark.parametrize("optimizer, lr", [("adam", 0.01), ("sgd", 0.5)])
def test_a_members_optimizer_state_is_torch_optims(optimizer, lr):
    """psrnn.studies.relreg.fused.OptimizerState holds what torch.optim's optimizer at the run's rate
    holds after as many steps: the same state_dict (groups and per-parameter state), and
    each takes the other's (the member's checkpoint resumes alone, an alone one in a group)."""
    from psrnn.studies.relreg.fused import Batched, OptimizerState
    from psrnn.studies.relreg.models import build_model

    run = dataclasses.replace(grid("lstm")[0], optimizer=optimizer, lr=lr)
    torch.manual_seed(0)
    model = build_model("lstm", hidden=6, cells=1, key_size=4, heads=2, layers=1, noise=0.0)
    real = (
        torch.optim.Adam(model.parameters(), lr=lr)
        if optimizer == "adam"
        else torch.optim.SGD(model.parameters(), lr=lr)
    )
    mine = OptimizerState(run, model)
    assert mine.state_dict() == real.state_dict()  # no step yet
    x = torch.randint(0, 3, (5, 7))
    for _ in range(2):
        real.zero_grad()
        model(x).logits.sum().backward()
        real.step()
    batch = Batched([run], [model], [mine])
    for p in batch.params.values():
        p.grad = torch.zeros_like(p)
    mine.load_state_dict(real.state_dict())
    want = real.state_dict()
    assert mine.state_dict().keys() == want.keys()
    assert mine.state_dict()["param_groups"] == want["param_groups"]
    for i, s in want["state"].items():
        assert mine.state_dict()["state"][i].keys() == s.keys()
        for k, v in s.items():
            assert torch.equal(mine.state_dict()["state"][i][k], v), k
    real.load_state_dict(mine.state_dict())  # and back: torch.optim takes it
    assert real.state_dict()["param_groups"] == want["param_groups"]


def test_a_fused_group_does_not_import_torch_dynamo(tmp_path):
    """torch.optim's optimizers import torch._dynamo on first use (seconds per process); a
    fused group's members never build one (their OptimizerState), so a group job does not."""
    import subprocess
    import sys

    code = (
        "import sys, dataclasses\n"
        "from pathlib import Path\n"
        "from psrnn.engine.group import Job, fit_group\n"
        "from psrnn.studies.relreg.settings import RelRegConfig\n"
        f"base = RelRegConfig(model='lstm', hidden=6, **{TINY!r})\n"
        "runs = [dataclasses.replace(base, seed=s) for s in (0, 1)]\n"
        f"fit_group([Job(r, Path({str(tmp_path)!r}) / f'm{{i}}', {{}}) for i, r in enumerate(runs)],"
        " log=lambda m: None, save_every_s=0)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert (tmp_path / "m1" / "metrics.json").is_file()
