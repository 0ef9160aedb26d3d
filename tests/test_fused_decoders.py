"""The fused auxiliary decoders (decoders.fused_decode): all tasks' GRU decoders run as one
block-diagonal GRU compute the per-task loop's loss and gradients, are used only where
that is exact, and leave the parameters as they were.

    uv run pytest tests/test_fused_decoders.py -q
"""

from __future__ import annotations

import warnings

import pytest
import torch

from psrnn.studies.private_shared import models
from psrnn.studies.private_shared.decoders import GRUDecoder, block_diagonal, fused_gru_weights
from psrnn.studies.private_shared.models import build_model, sample_anchors
from psrnn.studies.private_shared.settings import RunConfig


def cfg_(**kw) -> RunConfig:
    base = dict(hidden=12, shared=0.5, tasks=("rec", "pred"), anchors=3, window=5)
    return RunConfig(**{**base, **kw})


def batch(kind: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, lengths): images (B, T, 2) of one length, or ragged text (B, T) of 7 symbols
    with sequences shorter than 2 * window + 1 (windows run off their ends)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "continuous":
        return torch.rand(3, 30, 2, generator=g), torch.full((3,), 30)
    lengths = torch.tensor([30, 17, 9, 4])
    x = torch.randint(1, 7, (4, 30), generator=g)
    x[torch.arange(30)[None, :] >= lengths[:, None]] = 0  # padding
    return x, lengths


def model_and_batch(kind: str, **kw):
    torch.manual_seed(0)
    model = build_model(cfg_(**kw), kind, 2 if kind == "continuous" else 7, 3)
    x, lengths = batch(kind)
    anchors = sample_anchors(lengths, 3, 5, "uniform", torch.Generator().manual_seed(1))
    return model, x, lengths, anchors


def loss_and_grads(model, x, lengths, anchors, fuse: bool):
    """aux_loss (B,) and d(sum)/d(every parameter), main GRU and embedding included."""
    inp = model.inputs(x)
    loss = model.aux_loss(inp, model.encode(inp), lengths, anchors, fuse=fuse)  # (B,)
    params = list(model.parameters())
    grads = torch.autograd.grad(loss.sum(), params, allow_unused=True, materialize_grads=True)
    return loss.detach(), grads


class Spy:
    """Counts fused_decode calls and per-task nn.GRU calls of a model's decoders."""

    def __init__(self, model, monkeypatch):
        self.fused, self.gru = 0, 0
        real = models.fused_decode

        def fused(*args):
            self.fused += 1
            return real(*args)

        monkeypatch.setattr(models, "fused_decode", fused)
        for dec in model.decoders.values():
            if hasattr(dec, "gru"):
                dec.gru.register_forward_hook(lambda *_: setattr(self, "gru", self.gru + 1))


# --- the numbers -------------------------------------------------------------------------


def test_block_diagonal_is_torch_block_diag_per_gate():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(9, 2, generator=g), torch.randn(9, 2, generator=g)  # (3r, I), r = 3
    literal = torch.cat([torch.block_diag(x, y) for x, y in zip(a.chunk(3), b.chunk(3))])
    assert torch.equal(block_diagonal([a, b]), literal)


@pytest.mark.parametrize("layers", [1, 2])
def test_fused_weights_hold_each_task_gru_in_its_own_units(layers):
    torch.manual_seed(0)
    grus = [torch.nn.GRU(2, 3, num_layers=layers, batch_first=True) for _ in range(2)]
    w = fused_gru_weights(grus)
    assert [t.shape for t in w] == [
        s for k in range(layers) for s in [(18, 4 if k == 0 else 6), (18, 6), (18,), (18,)]
    ]
    assert torch.equal(w[2].view(3, 2, 3)[:, 1], grus[1].bias_ih_l0.view(3, 3))  # gate, task, unit
    # one flat buffer as cuDNN lays it out: every layer's weights, then every layer's biases
    order = [i for k in range(layers) for i in (4 * k, 4 * k + 1)]
    order += [i for k in range(layers) for i in (4 * k + 2, 4 * k + 3)]
    ptrs = [w[i].data_ptr() for i in order]
    assert ptrs[0] == w[0].untyped_storage().data_ptr()
    assert all(p + w[i].numel() * 4 == q for i, p, q in zip(order, ptrs, ptrs[1:]))


@pytest.mark.parametrize(
    "kind, kw",
    [
        ("continuous", {}),
        ("continuous", {"shared": 1.0}),
        ("continuous", {"decoder_layers": 2}),
        ("categorical", {}),
        ("categorical", {"shared": 1.0, "embedding": 5}),
        ("categorical", {"decoder_layers": 2, "embedding": 5}),
    ],
)
def test_fused_decoders_give_the_per_task_loss_and_gradients(kind, kw):
    model, x, lengths, anchors = model_and_batch(kind, **kw)
    loss, grads = loss_and_grads(model, x, lengths, anchors, fuse=False)
    fused_loss, fused_grads = loss_and_grads(model, x, lengths, anchors, fuse=True)
    torch.testing.assert_close(fused_loss, loss, rtol=1e-6, atol=1e-7)
    assert (loss > 0).all()
    for (name, _), g, fg in zip(model.named_parameters(), grads, fused_grads):
        torch.testing.assert_close(fg, g, rtol=1e-5, atol=1e-6, msg=name)
    assert any(torch.count_nonzero(g) for g in fused_grads)


# --- when the fused path is taken ---------------------------------------------------------


def test_default_fuses_only_on_fuse_devices(monkeypatch):
    model, x, lengths, anchors = model_and_batch("continuous")
    spy = Spy(model, monkeypatch)
    inp = model.inputs(x)
    H = model.encode(inp)
    model.aux_loss(inp, H, lengths, anchors)  # CPU: slower fused, so one GRU per task
    assert (spy.fused, spy.gru) == (0, 2)
    monkeypatch.setattr(models, "FUSE_DEVICES", ("cpu",))
    model.aux_loss(inp, H, lengths, anchors)
    assert (spy.fused, spy.gru) == (1, 2)  # one call, no per-task GRU
    model.aux_loss(inp, H, lengths, anchors, fuse=False)
    assert (spy.fused, spy.gru) == (1, 4)


class Doubled(GRUDecoder):
    """A GRUDecoder subclass with a forward of its own: the fused path would skip it."""

    def forward(self, h0, inputs, teacher, shared=None):
        return 2 * super().forward(h0, inputs, teacher, shared)


@pytest.mark.parametrize(
    "kw, subclass",
    [({"decoder_input": "estimate"}, False), ({"tasks": ("pred",)}, False), ({}, True)],
)
def test_fused_path_is_not_taken_where_it_would_not_be_exact(kw, subclass, monkeypatch):
    model, x, lengths, anchors = model_and_batch("continuous", **kw)
    if subclass:
        model.decoders["pred"] = Doubled(2, model.shared_units, 1)
    spy = Spy(model, monkeypatch)
    inp = model.inputs(x)
    model.aux_loss(inp, model.encode(inp), lengths, anchors, fuse=True)
    assert spy.fused == 0 and spy.gru > 0


def test_fusing_leaves_parameters_and_state_dict_as_they_were():
    model, x, lengths, anchors = model_and_batch("continuous")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    loss_and_grads(model, x, lengths, anchors, fuse=True)
    after = model.state_dict()
    assert list(after) == list(before) and not list(model.buffers())
    assert all(torch.equal(after[k], v) for k, v in before.items())


# --- on a GPU: the default path, no cuDNN weight warning ----------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("layers", [1, 2])
def test_cuda_default_is_fused_exact_and_silent(layers, monkeypatch):
    model, x, lengths, anchors = model_and_batch("continuous", decoder_layers=layers)
    model, x = model.cuda(), x.cuda()
    spy = Spy(model, monkeypatch)
    inp = model.inputs(x)
    H = model.encode(inp)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fused = model.aux_loss(inp, H, lengths, anchors)
        fused.sum().backward()
    assert not caught, [str(w.message) for w in caught]
    assert (spy.fused, spy.gru) == (1, 0)
    torch.testing.assert_close(
        fused, model.aux_loss(inp, H, lengths, anchors, fuse=False), rtol=1e-6, atol=1e-7
    )
