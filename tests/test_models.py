"""Model tests: settings, shapes, parameter counts, anchors/windows, gradient isolation,
the vectorised auxiliary loss against a plain per-anchor, per-step reference, and the
decoder interface.

    uv run pytest tests/test_models.py -q
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from psrnn import config as C
from psrnn.config import ConfigError
from psrnn.studies.private_shared import settings as S
from psrnn.studies.private_shared.decoders import AuxDecoder
from psrnn.studies.private_shared.models import (
    AUX_TASKS,
    PSRNN,
    ModelConfig,
    build_model,
    count_params,
    gather_steps,
    grad_norms,
    gru_cell,
    hidden_states,
    param_counts,
    sample_anchors,
    window_positions,
)
from psrnn.studies.private_shared.naive import NaivePSRNN
from psrnn.studies.private_shared.settings import RunConfig


def cfg_(**kw) -> RunConfig:
    base = dict(hidden=12, shared=0.5, tasks=("rec", "pred"), anchors=3, window=4)
    return RunConfig(**{**base, **kw})


def images(B=3, T=30, F=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(B, T, F, generator=g), torch.full((B,), T, dtype=torch.int64)


def text(lengths=(30, 17, 9, 4), V=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    x = torch.randint(1, V, (len(lengths), int(lengths.max())), generator=g)
    x[torch.arange(x.shape[1])[None, :] >= lengths[:, None]] = 0  # padding, as SequenceSplit.batch
    return x, lengths


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# --- the model's settings and its task table -------------------------------------------


def test_model_config_holds_the_model_settings_of_a_run():
    run = cfg_(tasks=("pred",), decoder_input="estimate", embedding=4, head="mlp", init="chrono")
    mc = ModelConfig.from_run(run, "categorical", 7, 3, steps=50)
    assert mc == ModelConfig(
        input_kind="categorical",
        features=7,
        classes=3,
        hidden=12,
        shared_units=6,
        tasks=("pred",),
        window=4,
        decoder_layers=1,
        teacher=False,
        embedding=4,
        head="mlp",
        head_hidden=0,
        init="chrono",
        init_steps=50,
    )
    assert mc.input_size == 4
    torch.manual_seed(0)
    direct = PSRNN(mc)
    torch.manual_seed(0)
    built = build_model(run, "categorical", 7, 3, steps=50)
    assert built.config == mc
    for k, v in direct.state_dict().items():
        assert torch.equal(v, built.state_dict()[k])
    # no anchor: no auxiliary loss, so neither shared units nor tasks reach the model
    no_aux = ModelConfig.from_run(cfg_(anchors=0), "continuous", 2, 5)
    assert (no_aux.shared_units, no_aux.tasks) == (0, ())


@pytest.mark.parametrize(
    "change,match",
    [
        ({"input_kind": "audio"}, "input kind 'audio'"),
        ({"tasks": ("rec", "denoise")}, "denoise"),
        ({"tasks": ()}, "shared_units=6"),
        ({"shared_units": 0}, "shared_units=0"),
    ],
)
def test_model_config_refuses_a_model_it_cannot_build(change, match):
    mc = ModelConfig.from_run(cfg_(), "continuous", 2, 5)
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(mc, **change)


def test_config_and_schema_offer_exactly_the_tasks_of_the_table():
    # config.py and config/schema.yaml do not import torch, so they name the tasks themselves
    assert S.TASKS == tuple(AUX_TASKS)
    assert C.suite_schema()["$defs"]["run"]["properties"]["tasks"]["items"]["enum"] == list(AUX_TASKS)


def test_gru_cell_steps_like_the_gru_layer_it_copies():
    torch.manual_seed(0)
    gru = nn.GRU(3, 5, num_layers=2, batch_first=True)
    cells = [gru_cell(gru, 0), gru_cell(gru, 1)]
    assert cells[0].weight_ih.shape == (15, 3) and cells[1].weight_ih.shape == (15, 5)
    x = torch.randn(4, 6, 3)
    out, h_n = gru(x)  # (B, T, 5), (2, B, 5)
    h = [torch.zeros(4, 5), torch.zeros(4, 5)]
    for t in range(6):
        h[0] = cells[0](x[:, t], h[0])
        h[1] = cells[1](h[0], h[1])
        torch.testing.assert_close(h[1], out[:, t])
    torch.testing.assert_close(torch.stack(h), h_n)
    # trainable copies: the slow reference trains its cell apart from the model's GRU
    assert all(p.is_leaf and p.requires_grad for p in cells[0].parameters())
    with torch.no_grad():
        cells[0].weight_hh.add_(1.0)
    assert not torch.equal(cells[0].weight_hh, gru.weight_hh_l0)


# --- shapes and parameter counts ---------------------------------------------------------


@pytest.mark.parametrize(
    "kind,kw",
    [
        ("continuous", {}),
        ("continuous", {"head": "mlp", "head_hidden": 5, "decoder_layers": 2}),
        ("categorical", {}),
        ("categorical", {"embedding": 6, "decoder_input": "estimate"}),
    ],
)
def test_forward_shapes(kind, kw):
    cfg = cfg_(**kw)
    if kind == "continuous":
        x, lengths = images(B=3, T=30, F=2)
        model = build_model(cfg, kind, 2, 5)
    else:
        x, lengths = text()
        model = build_model(cfg, kind, 7, 5)
    anchors = sample_anchors(lengths, cfg.anchors, cfg.window, cfg.sampling, gen())
    logits, aux = model(x, lengths, anchors)
    B = len(lengths)
    assert logits.shape == (B, 5)
    assert aux.shape == (B,) and (aux > 0).all()
    assert model(x, lengths, None)[1] is None
    assert hidden_states(model, x, lengths).shape == (B, x.shape[1], cfg.hidden)


def test_shared_zero_is_exactly_a_plain_gru_classifier():
    torch.manual_seed(3)
    model = build_model(cfg_(shared=0.0), "continuous", 2, 5)
    torch.manual_seed(3)
    gru, head = nn.GRU(2, 12, batch_first=True), nn.Linear(12, 5)
    plain = sum(p.numel() for p in [*gru.parameters(), *head.parameters()])
    assert plain == 3 * (2 * 12 + 12 * 12 + 2 * 12) + 12 * 5 + 5 == 641
    assert count_params(model) == {"params": 641, "params_main": 576, "params_head": 65, "params_aux": 0}
    assert len(model.decoders) == 0 and not model.has_aux
    x, lengths = images(F=2)
    logits, aux = model(x, lengths, sample_anchors(lengths, 3, 4, "stratified", gen()))
    assert aux is None
    torch.testing.assert_close(logits, head(gru(x)[0][:, -1]), rtol=0, atol=0)


@pytest.mark.parametrize("kw", [{"tasks": ()}, {"anchors": 0}, {"shared": 0.01}])
def test_no_task_or_no_anchor_or_no_shared_unit_means_no_aux_parameters(kw):
    model = build_model(cfg_(**kw), "continuous", 2, 5)
    assert count_params(model)["params_aux"] == 0 and model.shared_units == 0


def test_main_weights_do_not_depend_on_shared_proportion():
    # decoders are built after the GRU and head, so one seed gives one main network
    torch.manual_seed(0)
    a = build_model(cfg_(shared=0.0), "continuous", 2, 5)
    torch.manual_seed(0)
    b = build_model(cfg_(shared=0.5), "continuous", 2, 5)
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k])


def test_aux_parameters_formula():
    # per task: GRU(F -> r) + Linear(r -> F); r = round(0.5 * 12) = 6, F = 2
    F, r = 2, 6
    per_task = 3 * (F * r + r * r + 2 * r) + r * F + F
    counts = count_params(build_model(cfg_(), "continuous", F, 5))
    assert counts["params_aux"] == 2 * per_task == 2 * 194


@pytest.mark.parametrize(
    "kind,features,kw",
    [
        ("continuous", 1, {}),
        ("continuous", 3, {"shared": 1.0, "head": "mlp", "decoder_layers": 2}),
        ("categorical", 60, {"shared": 0.6, "tasks": ("rec",)}),
        ("categorical", 70, {"embedding": 16, "shared": 0.4, "head": "mlp", "head_hidden": 9}),
        ("continuous", 1, {"shared": 0.0}),
    ],
)
def test_param_counts_matches_built_model(kind, features, kw):
    cfg = cfg_(hidden=20, **kw)
    counts = param_counts(cfg, kind, features, 10)
    built = build_model(cfg, kind, features, 10)
    assert counts == {**count_params(built), "shared_units": built.shared_units}
    assert counts["params"] == sum(p.numel() for p in built.parameters())


def test_embedding_needs_text():
    with pytest.raises(ConfigError, match="embedding"):
        build_model(cfg_(embedding=8), "continuous", 1, 10)


# --- anchors and windows -----------------------------------------------------------------


def test_stratified_anchors_fall_in_their_regions_and_cover_the_range():
    # n = 103, l = 10: valid range [10, 93), 83 positions in 4 regions split at floor(j*83/4)
    lengths = torch.full((4000,), 103)
    a = sample_anchors(lengths, 4, 10, "stratified", gen(1))
    assert a.shape == (4000, 4) and a.dtype == torch.int64
    bounds = [10, 30, 51, 72, 93]
    for j in range(4):
        assert set(a[:, j].tolist()) == set(range(bounds[j], bounds[j + 1]))


def test_uniform_anchors_stay_in_range_and_ignore_regions():
    lengths = torch.full((4000,), 100)
    a = sample_anchors(lengths, 4, 10, "uniform", gen(1))
    assert set(a.flatten().tolist()) == set(range(10, 90))
    assert set(a[:, 0].tolist()) == set(range(10, 90))  # first anchor anywhere, not in region 0


def test_anchors_are_reproducible_from_the_generator():
    lengths = torch.full((8,), 50)
    a = sample_anchors(lengths, 3, 5, "stratified", gen(7))
    assert torch.equal(a, sample_anchors(lengths, 3, 5, "stratified", gen(7)))
    assert not torch.equal(a, sample_anchors(lengths, 3, 5, "stratified", gen(8)))


def test_ragged_anchors_respect_each_sequence_length():
    # n=100: [10, 90); n=30: [10, 20); n=15 and n=5 are shorter than 2l+1: anywhere in [0, n)
    lengths = torch.tensor([100, 30, 15, 5]).repeat(500)
    a = sample_anchors(lengths, 2, 10, "stratified", gen(2))
    n = lengths[:, None]
    long = n >= 21
    assert ((a >= 10) & (a < n - 10))[long.expand_as(a)].all()
    assert ((a >= 0) & (a < n))[~long.expand_as(a)].all()
    assert set(a[lengths == 30].flatten().tolist()) == set(range(10, 20))
    assert set(a[lengths == 5].flatten().tolist()) == set(range(5))


def test_reconstruction_targets_are_the_reversed_window_before_the_anchor():
    T = 40
    seq = torch.arange(T, dtype=torch.float32).reshape(1, T, 1).repeat(2, 1, 1)  # x_t = t
    lengths = torch.tensor([T, T])
    anchors = torch.tensor([[10, 25], [6, 33]])
    inp_pos, tgt_pos = window_positions(anchors, 4, "rec")
    targets, valid = gather_steps(seq, tgt_pos, lengths)
    inputs, _ = gather_steps(seq, inp_pos, lengths)
    assert targets[0, 0, :, 0].tolist() == [9, 8, 7, 6]
    assert targets[1, 1, :, 0].tolist() == [32, 31, 30, 29]
    assert inputs[0, 0, :, 0].tolist() == [10, 9, 8, 7]  # x_a, then the previous targets
    assert valid.all()


def test_prediction_targets_are_the_window_after_the_anchor():
    T = 40
    seq = torch.arange(T, dtype=torch.float32).reshape(1, T, 1)
    inp_pos, tgt_pos = window_positions(torch.tensor([[20]]), 5, "pred")
    targets, _ = gather_steps(seq, tgt_pos, torch.tensor([T]))
    inputs, _ = gather_steps(seq, inp_pos, torch.tensor([T]))
    assert targets[0, 0, :, 0].tolist() == [21, 22, 23, 24, 25]
    assert inputs[0, 0, :, 0].tolist() == [20, 21, 22, 23, 24]


def test_targets_outside_the_sequence_are_masked():
    seq = (torch.arange(10, dtype=torch.float32) + 1).reshape(1, 10, 1).repeat(2, 1, 1)
    lengths = torch.tensor([10, 6])  # the second is padded after step 6
    anchors = torch.tensor([[2], [4]])
    _, rec = window_positions(anchors, 4, "rec")
    values, valid = gather_steps(seq, rec, lengths)
    assert valid[0, 0].tolist() == [True, True, False, False]  # positions 1, 0, -1, -2
    assert values[0, 0, :, 0].tolist() == [2, 1, 0, 0]
    _, pred = window_positions(anchors, 4, "pred")
    values, valid = gather_steps(seq, pred, lengths)
    assert valid[1, 0].tolist() == [True, False, False, False]  # positions 5, 6, 7, 8 with n = 6
    assert values[1, 0, :, 0].tolist() == [6, 0, 0, 0]


# --- the vectorised aux loss against a plain loop ----------------------------------------


def reference_aux(model, inp, H, lengths, anchors) -> torch.Tensor:
    """Per sequence, per anchor, per window step, with GRUCells: eq. 3.1-3.9 read literally."""
    B, m = anchors.shape
    r, l = model.shared_units, model.config.window
    source = inp.detach() if model.embed is not None else inp
    total = torch.zeros(B)
    for task, dec in model.decoders.items():
        cells = [gru_cell(dec.gru, k) for k in range(dec.layers)]
        sign = {"rec": -1, "pred": +1}[task]  # the paper's two tasks, written out
        for b in range(B):
            n = int(lengths[b])
            for j in range(m):
                a = int(anchors[b, j])
                states = [H[b, a, :r] for _ in cells]  # every layer starts from h^s
                step_in = source[b, a]
                loss = torch.zeros(())
                for k in range(l):
                    h = step_in
                    for i, cell in enumerate(cells):
                        states[i] = cell(h[None], states[i][None])[0]
                        h = states[i]
                    est = dec.out(h)
                    t = a + sign * (k + 1)
                    inside = 0 <= t < n
                    target = source[b, t] if inside else torch.zeros_like(est)
                    if inside:
                        loss = loss + ((est - target) ** 2).sum()
                    step_in = target if model.config.teacher else est
                total[b] = total[b] + loss / l
    return total


@pytest.mark.parametrize("decoder_input", ["teacher", "estimate"])
@pytest.mark.parametrize("tasks", [("rec",), ("pred",), ("rec", "pred")])
def test_vectorised_aux_equals_reference_on_images(decoder_input, tasks):
    cfg = cfg_(tasks=tasks, decoder_input=decoder_input, anchors=3, window=5)
    torch.manual_seed(0)
    model = build_model(cfg, "continuous", 2, 5)
    x, lengths = images(B=3, T=30, F=2)
    anchors = sample_anchors(lengths, 3, 5, "stratified", gen(4))
    inp = model.inputs(x)
    H = model.encode(inp)
    fast = model.aux_loss(inp, H, lengths, anchors)
    slow = reference_aux(model, inp, H, lengths, anchors)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)
    assert (fast > 0).all()


@pytest.mark.parametrize("decoder_input", ["teacher", "estimate"])
@pytest.mark.parametrize("kw", [{}, {"embedding": 5}, {"decoder_layers": 2}])
def test_vectorised_aux_equals_reference_on_ragged_text(decoder_input, kw):
    # lengths 9 and 4 are shorter than 2 * window + 1: windows run off the ends and are masked
    cfg = cfg_(decoder_input=decoder_input, anchors=2, window=6, **kw)
    torch.manual_seed(1)
    model = build_model(cfg, "categorical", 7, 3)
    x, lengths = text()
    anchors = sample_anchors(lengths, 2, 6, "uniform", gen(5))
    inp = model.inputs(x)
    H = model.encode(inp)
    fast = model.aux_loss(inp, H, lengths, anchors)
    slow = reference_aux(model, inp, H, lengths, anchors)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)


def test_one_hot_targets_and_padding_do_not_leak():
    # padding after a sequence's end must not change its loss: same sequence, two paddings
    cfg = cfg_(anchors=2, window=6)
    torch.manual_seed(2)
    model = build_model(cfg, "categorical", 7, 3)
    x, lengths = text(lengths=(12, 30))
    x2 = x.clone()
    x2[0, 12:] = 5  # different garbage after the end of sequence 0
    anchors = torch.tensor([[3, 8], [10, 20]])
    a1 = model(x, lengths, anchors)
    a2 = model(x2, lengths, anchors)
    torch.testing.assert_close(a1[0], a2[0], rtol=0, atol=0)
    torch.testing.assert_close(a1[1], a2[1], rtol=0, atol=0)


# --- gradient isolation: the point of the paper ------------------------------------------


@pytest.mark.parametrize("decoder_input", ["teacher", "estimate"])
def test_aux_gradient_never_reaches_private_units(decoder_input):
    cfg = cfg_(hidden=12, shared=0.25, anchors=3, window=4, decoder_input=decoder_input)
    torch.manual_seed(0)
    model = build_model(cfg, "continuous", 2, 5)
    x, lengths = images(B=4, T=40, F=2)
    anchors = sample_anchors(lengths, 3, 4, "stratified", gen(3))
    inp = model.inputs(x)
    H = model.encode(inp)  # (B, T, d)
    (g,) = torch.autograd.grad(model.aux_loss(inp, H, lengths, anchors).sum(), H)
    r = model.shared_units
    assert r == 3
    assert torch.count_nonzero(g[..., r:]) == 0  # private slice: exactly zero, everywhere
    at_anchor = torch.zeros(4, 40, dtype=torch.bool)
    at_anchor[torch.arange(4)[:, None], anchors] = True
    shared_norm = g[..., :r].norm(dim=-1)  # (B, T)
    assert (shared_norm[at_anchor] > 1e-6).all()  # every anchor's shared slice gets gradient
    assert torch.count_nonzero(shared_norm[~at_anchor]) == 0  # and no other step directly


def test_grad_norms_through_time():
    # one anchor at step 20 for every sequence: the aux loss reaches the private units only
    # through the recurrence, i.e. strictly before the anchor; nothing after it
    cfg = cfg_(hidden=12, shared=0.5, anchors=1, window=4, tasks=("rec", "pred"))
    torch.manual_seed(0)
    model = build_model(cfg, "continuous", 2, 5)
    x, lengths = images(B=5, T=40, F=2)
    y = torch.tensor([0, 1, 2, 3, 4])
    out = grad_norms(model, x, lengths, y, torch.full((5, 1), 20), aux_weight=1.0)
    assert set(out) == {"ce_shared", "ce_private", "aux_shared", "aux_private", "shared_units", "hidden"}
    assert out["shared_units"] == 6 and out["hidden"] == 12
    assert all(out[k].shape == (40,) for k in ("ce_shared", "ce_private", "aux_shared", "aux_private"))
    assert (out["aux_private"][20:] == 0).all() and (out["aux_private"][:20] > 0).all()
    assert out["aux_shared"][20] > 0 and (out["aux_shared"][21:] == 0).all()
    assert (out["ce_private"] > 0).all() and (out["ce_shared"] > 0).all()
    # the CE gradient fades going back in time (the long-range problem the aux loss addresses)
    assert out["ce_private"][0] < out["ce_private"][-1]
    doubled = grad_norms(model, x, lengths, y, torch.full((5, 1), 20), aux_weight=2.0)
    torch.testing.assert_close(doubled["aux_shared"], 2 * out["aux_shared"])


def test_grad_norms_of_a_plain_gru_have_no_aux_and_no_shared_part():
    model = build_model(cfg_(shared=0.0), "continuous", 2, 5)
    x, lengths = images(B=2, T=15, F=2)
    out = grad_norms(model, x, lengths, torch.tensor([0, 1]), None, aux_weight=1.0)
    assert (out["aux_shared"] == 0).all() and (out["aux_private"] == 0).all()
    assert (out["ce_shared"] == 0).all() and (out["ce_private"] > 0).all()


def test_embedding_targets_are_detached():
    # with h^s cut off, the aux loss has no path into the embedding: targets are constants
    cfg = cfg_(embedding=5, anchors=2, window=3)
    model = build_model(cfg, "categorical", 7, 3)
    x, lengths = text(lengths=(20, 15))
    inp = model.inputs(x)
    H = model.encode(inp).detach()
    loss = model.aux_loss(inp, H, lengths, torch.tensor([[5, 10], [4, 9]])).sum()
    assert loss > 0
    assert loss.grad_fn is not None  # decoders still learn
    loss.backward()
    assert model.embed.weight.grad is None or torch.count_nonzero(model.embed.weight.grad) == 0
    assert torch.count_nonzero(model.decoders["rec"].out.weight.grad) > 0


def test_hidden_states_match_encoder_and_are_zero_after_the_end():
    model = build_model(cfg_(), "categorical", 7, 3)
    x, lengths = text(lengths=(12, 30))
    states = hidden_states(model, x, lengths)
    with torch.no_grad():
        H = model.encode(model.inputs(x))
    torch.testing.assert_close(states[1], H[1])
    torch.testing.assert_close(states[0, :12], H[0, :12])
    assert torch.count_nonzero(states[0, 12:]) == 0


# --- the decoder interface (decoders.AuxDecoder) -----------------------------------------


class MeanUpToAnchor(AuxDecoder):
    """Reads every shared state up to its anchor (a stand-in for an attention decoder)."""

    reads_sequence = True

    def __init__(self, shared_units: int, features: int):
        super().__init__()
        self.out = nn.Linear(shared_units, features)

    def forward(self, h0, inputs, teacher, shared=None):
        B, m = shared.anchors.shape
        states = shared.states.repeat_interleave(m, dim=0)  # (N, T, r): window i is sequence i // m
        upto = torch.arange(states.shape[1]) <= shared.anchors.reshape(-1, 1)  # (N, T)
        mean = (states * upto[..., None]).sum(1) / upto.sum(1, keepdim=True)  # (N, r)
        return self.out(mean)[:, None].expand(-1, inputs.shape[1], -1)  # (N, l, F)


def test_a_decoder_can_read_all_shared_states_and_still_never_the_private_ones():
    torch.manual_seed(0)
    model = build_model(cfg_(hidden=12, shared=0.25, tasks=("rec", "pred"), anchors=2), "continuous", 2, 5)
    model.decoders["pred"] = MeanUpToAnchor(model.shared_units, 2)
    x, lengths = images(B=3, T=30, F=2)
    anchors = torch.tensor([[8, 20], [5, 14], [10, 25]])
    inp = model.inputs(x)
    H = model.encode(inp)  # (B, T, d)
    aux = model.aux_loss(inp, H, lengths, anchors)
    (g,) = torch.autograd.grad(aux.sum(), H)
    r = model.shared_units
    assert torch.count_nonzero(g[..., r:]) == 0  # the private units stay out
    reached = g[..., :r].norm(dim=-1) > 0  # (B, T): every step up to the last anchor, none after
    assert torch.equal(reached, torch.arange(30)[None, :] <= anchors.max(1).values[:, None])
    # the slow reference hands the same states to the same decoder
    torch.testing.assert_close(
        NaivePSRNN.from_model(model)(x, lengths, anchors)[1],
        model(x, lengths, anchors)[1],
        rtol=1e-5,
        atol=1e-6,
    )


# --- initialisation (models.init_recurrent) ----------------------------------------------


def test_orthogonal_init_makes_each_recurrent_gate_block_orthogonal_and_biases_zero():
    torch.manual_seed(0)
    model = build_model(cfg_(init="orthogonal", hidden=16), "continuous", 1, 10, steps=196)
    d = 16
    for block in model.gru.weight_hh_l0.detach().split(d):  # gates r, z, n: (d, d) each
        assert torch.allclose(block @ block.T, torch.eye(d), atol=1e-5)
    assert model.gru.bias_ih_l0.abs().max() == 0 and model.gru.bias_hh_l0.abs().max() == 0


def test_chrono_init_sets_only_the_update_gate_bias_to_log_uniform_1_to_T():
    torch.manual_seed(0)
    d, T = 256, 196
    model = build_model(cfg_(init="chrono", hidden=d), "continuous", 1, 10, steps=T)
    b = model.gru.bias_ih_l0.detach()
    r, z, n = b.split(d)
    assert r.abs().max() == 0 and n.abs().max() == 0 and model.gru.bias_hh_l0.abs().max() == 0
    # log U(1, T - 1): between 0 and log(195) = 5.27, spread over the range
    assert 0 <= float(z.min()) and float(z.max()) <= torch.log(torch.tensor(T - 1.0))
    # exp(b) is uniform on [1, T - 1]: its mean is near T / 2 (d = 256 draws)
    assert 0.4 * T < float(torch.exp(z).mean()) < 0.6 * T
    # z = sigmoid(b) near 1 keeps h_{t-1}: the mean memory exp(b) spans 1 .. T steps
    assert 1.0 <= float(torch.exp(z).min()) and float(torch.exp(z).max()) <= T - 1
    # decoders keep PyTorch's init (uniform +-1/sqrt(r)), never orthogonal/zero biases
    dec = model.decoders["rec"].gru
    assert dec.bias_ih_l0.abs().max() > 0


def test_torch_init_is_pytorchs_default_and_init_is_part_of_the_random_stream():
    torch.manual_seed(0)
    plain = build_model(cfg_(init="torch"), "continuous", 1, 10)
    torch.manual_seed(0)
    ref = nn.GRU(1, 12, batch_first=True)
    assert torch.equal(plain.gru.weight_hh_l0, ref.weight_hh_l0)
    torch.manual_seed(0)
    a = build_model(cfg_(init="chrono"), "continuous", 1, 10, steps=50)
    torch.manual_seed(0)
    b = build_model(cfg_(init="chrono"), "continuous", 1, 10, steps=50)
    assert torch.equal(a.gru.weight_hh_l0, b.gru.weight_hh_l0)  # seeded: same init
    assert torch.equal(a.gru.bias_ih_l0, b.gru.bias_ih_l0)


def test_unknown_init_is_named():
    with pytest.raises(ConfigError, match="init='xavier'"):
        from psrnn.studies.private_shared.settings import check_run

        check_run(cfg_(init="xavier"))


def test_parameter_counts_do_not_depend_on_the_init():
    assert param_counts(cfg_(init="chrono"), "continuous", 1, 10) == param_counts(
        cfg_(init="torch"), "continuous", 1, 10
    )


def test_mean_over_anchors_is_the_sum_divided_by_their_count():
    # the sources sum the per-anchor losses (eq. 3.4/3.8); "mean" is the labelled ablation
    x, lengths = images(B=3, T=30, F=2)
    anchors = sample_anchors(lengths, 4, 3, "stratified", gen(1))
    losses = {}
    for how in ("sum", "mean"):
        torch.manual_seed(0)
        model = build_model(cfg_(anchors=4, window=3, aux_anchors=how), "continuous", 2, 5)
        inp = model.inputs(x)
        losses[how] = model.aux_loss(inp, model.encode(inp), lengths, anchors)
    torch.testing.assert_close(losses["mean"] * 4, losses["sum"])
    assert (losses["sum"] > 0).all()
