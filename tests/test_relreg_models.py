"""The Binary Counter models and regularizers against the thesis' equations: the proto-LSTM
cells (eq. 3.1-3.4) against torch.nn.LSTMCell and a literal per-sample mixing of the
weights, the cell noise's scale (eq. 3.5), and the L2 terms (eq. 3.6-3.7) on hand-set
parameters."""

import pytest
import torch
from torch import nn

from psrnn.studies.relreg.lstm import LSTMModel
from psrnn.studies.relreg.models import CLASSES, MODELS, VOCAB, build_model
from psrnn.studies.relreg.proto import ProtoLSTM, ProtoLSTMCell
from psrnn.studies.relreg.regularizers import cell_noncell_l2, cell_parameters, l2, penalty
from psrnn.studies.relreg.rmc import RMCModel
from psrnn.studies.relreg.transformer import TransformerModel

SMALL = dict(hidden=8, cells=3, key_size=4, heads=2, layers=2, noise=0.0)


def num(t: torch.Tensor) -> float:
    return t.detach().item()


def copy_lstmcell(ref: nn.LSTMCell, cell: ProtoLSTMCell, k: int) -> None:
    with torch.no_grad():
        cell.weight_ih[k] = ref.weight_ih
        cell.weight_hh[k] = ref.weight_hh
        cell.bias[k] = ref.bias_ih + ref.bias_hh


def run_cell(cell, xs, hidden):
    """Step a cell over xs (T, B, I) from a zero state: lists of h, c, p per step."""
    h = c = torch.zeros(xs.shape[1], hidden)
    out = []
    for x in xs:
        h, c, p = cell(x, (h, c))
        out.append((h, c, p))
    return out


# --- proto-LSTM cells (eq. 3.1-3.4) ---------------------------------------------------------


def test_one_proto_cell_is_an_lstm_cell():
    torch.manual_seed(0)
    ref = nn.LSTMCell(3, 5)
    cell = ProtoLSTMCell(3, 5, cells=1)
    copy_lstmcell(ref, cell, 0)
    xs = torch.randn(6, 4, 3)  # (T, B, I)
    h = c = torch.zeros(4, 5)
    for x, (h1, c1, p) in zip(xs, run_cell(cell, xs, 5)):
        h, c = ref(x, (h, c))
        torch.testing.assert_close(h1, h, atol=1e-6, rtol=0)
        torch.testing.assert_close(c1, c, atol=1e-6, rtol=0)
        assert torch.equal(p, torch.ones(4, 1))


def test_identical_cells_mix_to_that_cell():
    """sum_k p^k W = W whatever the loader says (eq. 3.2)."""
    torch.manual_seed(1)
    one, two = ProtoLSTMCell(3, 5, cells=1), ProtoLSTMCell(3, 5, cells=2)
    with torch.no_grad():
        two.weight_ih.copy_(one.weight_ih.expand(2, -1, -1))
        two.weight_hh.copy_(one.weight_hh.expand(2, -1, -1))
        two.bias.copy_(one.bias.expand(2, -1))
        two.loader.weight.normal_(0, 3.0)  # a loader far from uniform
    xs = torch.randn(5, 4, 3)
    for (h1, c1, _), (h2, c2, p2) in zip(run_cell(one, xs, 5), run_cell(two, xs, 5)):
        torch.testing.assert_close(h2, h1, atol=1e-6, rtol=0)
        torch.testing.assert_close(c2, c1, atol=1e-6, rtol=0)
        assert (p2.max(1).values - p2.min(1).values).max() > 0.1  # the mix really was uneven


def literal_step(cell: ProtoLSTMCell, x, h, c):
    """Eq. 3.2-3.4 and 3.1 as written: per sample, W = sum_k p^k W^k and b = sum_k p^k b^k,
    then the LSTM equations with plain matrix-vector products."""
    hs, cs, ps = [], [], []
    for b in range(x.shape[0]):
        z = torch.cat([x[b], h[b]])
        p = torch.softmax(cell.loader.weight @ z + cell.loader.bias, dim=0)  # eq. 3.3-3.4
        w_x = sum(p[k] * cell.weight_ih[k] for k in range(cell.cells))  # (4H, I)
        w_h = sum(p[k] * cell.weight_hh[k] for k in range(cell.cells))  # (4H, H)
        bias = sum(p[k] * cell.bias[k] for k in range(cell.cells))  # (4H,)
        pre = (w_x @ x[b] + w_h @ h[b] + bias).chunk(4)  # the gates' pre-activations, (H,) each
        i, f, g, o = torch.sigmoid(pre[0]), torch.sigmoid(pre[1]), torch.tanh(pre[2]), torch.sigmoid(pre[3])
        c_new = f * c[b] + i * g
        hs.append(o * torch.tanh(c_new))
        cs.append(c_new)
        ps.append(p)
    return torch.stack(hs), torch.stack(cs), torch.stack(ps)


def test_mixing_is_eq_3_2_per_sample():
    torch.manual_seed(2)
    cell = ProtoLSTMCell(3, 4, cells=3)
    with torch.no_grad():
        cell.loader.weight.normal_(0, 2.0)
    xs = torch.randn(5, 6, 3)  # (T, B, I)
    h = c = torch.zeros(6, 4)
    for x, (h1, c1, p1) in zip(xs, run_cell(cell, xs, 4)):
        h, c, p = literal_step(cell, x, h, c)
        torch.testing.assert_close(p1, p, atol=1e-6, rtol=0)
        torch.testing.assert_close(h1, h, atol=1e-6, rtol=0)
        torch.testing.assert_close(c1, c, atol=1e-6, rtol=0)
    assert (p1.argmax(1) != p1.argmax(1)[0]).any()  # the rows did load different cells


def test_a_forced_loader_runs_each_row_on_its_own_cell():
    """Loader reads only the token: bit 0 -> cell 0, bit 1 -> cell 1, START -> cell 2. Then
    each row is exactly an LSTMCell holding the weights of the cell its token picks."""
    torch.manual_seed(3)
    refs = [nn.LSTMCell(VOCAB, 4) for _ in range(3)]
    model = ProtoLSTM(hidden=4, cells=3)
    for k, ref in enumerate(refs):
        copy_lstmcell(ref, model.cell, k)
    with torch.no_grad():
        model.cell.loader.weight.zero_()
        model.cell.loader.weight[:, :VOCAB] = 60.0 * torch.eye(3)
        model.cell.loader.bias.zero_()
    x = torch.tensor([[2, 0, 1, 1, 0], [2, 1, 0, 0, 1], [2, 1, 1, 1, 1]])  # (B, T)
    out = model(x)
    assert torch.equal(out.loading.argmax(-1), torch.where(x == 2, 2, x))
    assert torch.allclose(out.loading.max(-1).values, torch.ones(3, 5))
    for b in range(3):
        h = c = torch.zeros(1, 4)
        for t in range(5):
            h, c = refs[int(x[b, t])](nn.functional.one_hot(x[b, t : t + 1], VOCAB).float(), (h, c))
            torch.testing.assert_close(model.head(h)[0], out.logits[b, t], atol=1e-6, rtol=0)


# --- cell noise (eq. 3.5) -------------------------------------------------------------------


def test_noise_only_in_training():
    torch.manual_seed(4)
    x = torch.randint(0, 2, (4, 6))
    noisy = ProtoLSTM(hidden=6, cells=2, noise=0.5)
    clean = ProtoLSTM(hidden=6, cells=2, noise=0.0)
    clean.load_state_dict(noisy.state_dict())
    noisy.eval()
    a, b = noisy(x).logits, noisy(x).logits
    assert torch.equal(a, b)
    assert torch.equal(a, clean(x).logits)  # clean is in training mode: eps = 0 means no noise
    noisy.train()
    c, d = noisy(x).logits, noisy(x).logits
    assert not torch.allclose(c, d) and not torch.allclose(c, a)
    # one draw per step for the whole batch: identical rows stay identical
    same = noisy(torch.tensor([[2, 1, 0, 1]] * 3)).logits
    assert torch.equal(same[0], same[1]) and torch.equal(same[1], same[2])


def test_noise_scale_is_eps_times_each_cells_std():
    torch.manual_seed(5)
    eps = 0.3
    cell = ProtoLSTMCell(3, 64, cells=2, noise=eps)
    with torch.no_grad():  # cell 1 ten times as wide as cell 0
        cell.weight_ih[1] *= 10
        cell.weight_hh[1] *= 10
        cell.bias[1] *= 10
    cell.train()
    dw, db = [], []
    for _ in range(20):
        w_ih, w_hh, b = cell.step_weights()
        dw.append(torch.cat([(w_ih - cell.weight_ih).flatten(1), (w_hh - cell.weight_hh).flatten(1)], 1))
        db.append(b - cell.bias)
    dw, db = torch.cat(dw, 1).detach(), torch.cat(db, 1).detach()  # (K, draws * weights)
    for k in range(2):
        sigma_w = float(torch.cat([cell.weight_ih[k].flatten(), cell.weight_hh[k].flatten()]).detach().std())
        sigma_b = float(cell.bias[k].detach().std())
        assert float(dw[k].std()) / (eps * sigma_w) == pytest.approx(1.0, abs=0.01)
        assert float(db[k].std()) / (eps * sigma_b) == pytest.approx(1.0, abs=0.05)
        assert abs(float(dw[k].mean())) < 0.01 * eps * sigma_w
    cell.eval()
    assert all(w is p for w, p in zip(cell.step_weights(), cell.cell_parameters()))


def test_noise_is_drawn_afresh_at_every_step_and_passes_gradients():
    torch.manual_seed(6)
    model = ProtoLSTM(hidden=5, cells=2, noise=0.1)
    draws = []
    original = model.cell.step_weights

    def recording():
        w = original()
        draws.append(w[0].detach().clone())
        return w

    model.cell.step_weights = recording
    model(torch.randint(0, 2, (3, 7))).logits.sum().backward()
    assert len(draws) == 7
    assert all(not torch.equal(a, b) for a, b in zip(draws, draws[1:]))
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.cell_parameters())


# --- regularizers (eq. 3.6-3.7) ---------------------------------------------------------------


def tiny_proto() -> ProtoLSTM:
    """hidden 1, K = 2: cells 2 * (4*3 + 4*1 + 4) = 40 parameters set to 0.5; loader
    (3 + 1) * 2 + 2 = 10 and head 1 * 2 + 2 = 4 parameters set to 2.0."""
    model = ProtoLSTM(hidden=1, cells=2)
    with torch.no_grad():
        for p in model.cell_parameters():
            p.fill_(0.5)
        for p in model.noncell_parameters():
            p.fill_(2.0)
    return model


def test_l2_sums_every_parameter():
    model = tiny_proto()
    assert sum(p.numel() for p in model.cell_parameters()) == 40
    assert sum(p.numel() for p in model.noncell_parameters()) == 14
    assert num(l2(model)) == pytest.approx(40 * 0.25 + 14 * 4.0)  # 66, biases included
    lstm = LSTMModel(hidden=1)  # LSTM 4*3 + 4*1 + 4 + 4 = 24, head 4
    with torch.no_grad():
        for p in lstm.parameters():
            p.fill_(0.5)
    assert num(l2(lstm)) == pytest.approx(28 * 0.25)


def test_cell_and_noncell_l2_split():
    model = tiny_proto()
    assert {id(p) for p in cell_parameters(model)} == {id(p) for p in model.cell_parameters()}
    assert {id(p) for p in model.cell_parameters()} == {
        id(model.cell.weight_ih),
        id(model.cell.weight_hh),
        id(model.cell.bias),
    }
    assert num(cell_noncell_l2(model, 1.0, 0.0)) == pytest.approx(10.0)
    assert num(cell_noncell_l2(model, 0.0, 1.0)) == pytest.approx(56.0)
    assert num(cell_noncell_l2(model, 0.1, 0.01)) == pytest.approx(1.0 + 0.56)
    assert num(penalty(model, 0.5, 0.1, 0.01)) == pytest.approx(33.0 + 1.56)
    lstm = LSTMModel(hidden=1)  # no proto cells: everything is non-cell
    assert cell_parameters(lstm) == []
    assert num(cell_noncell_l2(lstm, 1.0, 0.0)) == 0.0
    assert num(cell_noncell_l2(lstm, 0.0, 1.0)) == pytest.approx(num(l2(lstm)))


def test_penalty_is_exactly_zero_without_lambdas_and_has_the_l2_gradient():
    model = tiny_proto()
    zero = penalty(model, 0.0, 0.0, 0.0)
    assert isinstance(zero, torch.Tensor) and zero.shape == () and num(zero) == 0.0
    penalty(model, 0.5, 0.1, 0.01).backward()
    # d/dw of (0.5 + 0.1) w^2 at 0.5 = 0.6; of (0.5 + 0.01) w^2 at 2.0 = 2.04
    assert torch.allclose(model.cell.bias.grad, torch.full_like(model.cell.bias, 0.6))
    assert torch.allclose(model.head.weight.grad, torch.full_like(model.head.weight, 2.04))


# --- every model ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", MODELS)
def test_shapes_and_gradients(kind):
    torch.manual_seed(7)
    model = build_model(kind, **SMALL)
    for steps in (4, 17):
        x = torch.cat([torch.full((3, 1), 2), torch.randint(0, 2, (3, steps - 1))], 1)  # (B, T)
        out = model(x)
        assert out.logits.shape == (3, steps, CLASSES)
        if kind == "proto":
            assert out.loading.shape == (3, steps, SMALL["cells"])
            assert torch.allclose(out.loading.sum(-1), torch.ones(3, steps))
        else:
            assert out.loading is None
    model.zero_grad()
    nn.functional.cross_entropy(out.logits.reshape(-1, CLASSES), torch.randint(0, 2, (3 * 17,))).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize(("kind", "causal"), [*((k, False) for k in MODELS), ("transformer", True)])
@pytest.mark.parametrize("train", [False, True])
def test_output_at_step_t_reads_no_later_input_unless_the_encoder_is_unmasked(kind, causal, train):
    """Flip every input bit after step t, for every t: the outputs up to t stay bit for bit
    the same for the recurrent models and the causal Transformer (in training and in
    inference); the unmasked encoder's change at every t, and every model's later outputs do."""
    torch.manual_seed(8)
    model = build_model(kind, **{**SMALL, "layers": 2}, causal=causal).train(train)
    x = torch.cat([torch.full((6, 1), 2), torch.randint(0, 2, (6, 11))], 1)  # (B, 12) start token, 11 bits
    a = model(x).logits
    for t in range(x.shape[1] - 1):
        y = x.clone()
        y[:, t + 1 :] = 1 - y[:, t + 1 :]
        b = model(y).logits
        if kind == "transformer" and not causal:
            assert not torch.allclose(a[:, : t + 1], b[:, : t + 1]), t
        else:
            assert torch.equal(a[:, : t + 1], b[:, : t + 1]), t
        assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :]), t


def test_causal_is_a_transformer_setting():
    tf = build_model("transformer", **SMALL, causal=True)
    assert isinstance(tf, TransformerModel) and tf.causal
    assert not build_model("transformer", **SMALL).causal  # the default: the encoder as first shipped
    for kind in ("lstm", "proto", "rmc"):
        with pytest.raises(ValueError, match=f"causal: model {kind} is recurrent"):
            build_model(kind, **SMALL, causal=True)


def test_build_model_reads_its_settings():
    proto = build_model("proto", hidden=6, cells=5, key_size=1, heads=1, layers=1, noise=0.01)
    assert isinstance(proto, ProtoLSTM) and proto.cell.weight_hh.shape == (5, 24, 6)
    assert proto.cell.noise == 0.01
    assert isinstance(build_model("lstm", **SMALL), LSTMModel)
    rmc = build_model("rmc", **SMALL)
    assert isinstance(rmc, RMCModel) and rmc.core.width == 8 and rmc.head.in_features == 8
    rmc3 = build_model("rmc", **SMALL, slots=3)
    assert rmc3.head.in_features == 24 and rmc3(torch.tensor([[2, 0, 1]])).logits.shape == (1, 3, 2)
    tf = build_model("transformer", hidden=48, cells=1, key_size=6, heads=2, layers=3, noise=0.0)  # Table 4.3
    assert isinstance(tf, TransformerModel) and len(tf.encoder.layers) == 3
    layer = tf.encoder.layers[0]
    assert layer.self_attn.embed_dim == 12 and layer.self_attn.num_heads == 2
    assert layer.linear1.out_features == 48
    # the layers start from independent draws, not copies of one layer
    assert not torch.equal(tf.encoder.layers[0].linear1.weight, tf.encoder.layers[1].linear1.weight)


@pytest.mark.parametrize(
    "kind, change, words",
    [
        ("gru", {}, "model"),
        ("rmc", {"hidden": 6}, "hidden, key_size, heads"),
        ("lstm", {"noise": 0.1}, "noise"),
        ("proto", {"noise": -1.0}, "noise"),
        ("proto", {"cells": 0}, "cells"),
        ("transformer", {"layers": 0}, "layers"),
    ],
)
def test_build_model_errors_name_the_setting(kind, change, words):
    with pytest.raises(ValueError, match=words):
        build_model(kind, **{**SMALL, **change})
