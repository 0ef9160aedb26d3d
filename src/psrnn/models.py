"""The model: a GRU classifier whose hidden state is split into shared and private units.

    python -m psrnn train --config config/small.yaml --experiment mnist_ps --seed 0

A main GRU reads x_1..x_n and classifies from the full final state h_n. The first
r = round(shared * hidden) units of h (the shared slice h^s) also start one GRU decoder
per auxiliary task at m anchors: "rec" reconstructs the `window` inputs before the anchor
backwards (x_{a-1}..x_{a-l}), "pred" predicts the `window` inputs after it
(x_{a+1}..x_{a+l}); thesis eq. 3.1-3.9. The private slice h^p = h[r:] is seen only by the
classifier, so the auxiliary loss never reaches it directly. shared = 0 (or no task, or
no anchor) builds exactly a plain GRU + head; shared = 1 is the RNN-AE of Trinh et al.

Positions are 0-based here: x[:, t] is x_{t+1} of the paper, H[:, t] the state after it.

Choices the sources leave open (stated so a reader can see them):
- Anchors lie in [window, n - window) (0-based), so both tasks' windows fit inside the
  sequence; for a ragged sequence too short for that, anywhere in [0, n), with the targets
  that fall outside [0, n) masked out of the loss.
- A decoder with several layers starts every layer from h^s.
- The decoders read and regress the model's input vectors with squared error (eq. 3.3):
  pixels, one-hot characters (as the paper), or, with a learned embedding (DBpedia), the
  embedding vectors *detached* (as decoder inputs and targets), so the auxiliary loss
  cannot shrink its own targets by collapsing the embedding towards zero; it still
  shapes the embedding through h^s and the main GRU.
- Decoder outputs are linear (no squashing): the squared error is on raw estimates.
- The main GRU's initialisation is a setting (`init`, `init_recurrent` below): PyTorch's
  uniform default, or orthogonal recurrent weights with the update gate's bias drawn
  "chrono" style so that units start out remembering over up to T steps. The paper does
  not say how it initialised; the decoders (windows of at most 64 steps) keep PyTorch's.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from psrnn.config import INITS, ConfigError, RunConfig

INPUT_KINDS = ("continuous", "categorical")  # manifest.json "input"


# --- anchors and windows (pure functions of tensors, tested on their own) ----------------


def sample_anchors(lengths: torch.Tensor, count: int, window: int, sampling: str,
                   generator: torch.Generator) -> torch.Tensor:
    """int64 (B, count): anchor positions per sequence, drawn from `generator`.

    lengths: int64 (B,) steps per sequence. The valid range is [window, n - window);
    "stratified" (thesis 3.1) splits it into `count` equal consecutive regions and draws one
    anchor uniformly inside each; "uniform" (Trinh et al.) draws every anchor over the whole
    range. One vectorised draw per batch, no Python loop over sequences.
    """
    n = lengths.to(torch.float64)  # (B,)
    fits = n - 2 * window >= 1
    lo = torch.where(fits, torch.full_like(n, float(window)), torch.zeros_like(n))  # (B,)
    hi = torch.where(fits, n - window, n)  # (B,) exclusive
    width = (hi - lo)[:, None]  # (B, 1)
    # float64 so that u * width never rounds up to width itself
    u = torch.rand((len(lengths), count), dtype=torch.float64, generator=generator)  # (B, m)
    if sampling == "stratified":
        j = torch.arange(count, dtype=torch.float64)[None, :]  # (1, m)
        start = torch.floor(j * width / count)  # (B, m)
        end = torch.floor((j + 1) * width / count)  # (B, m)
        offset = start + torch.floor(u * (end - start))  # (B, m)
    elif sampling == "uniform":
        offset = torch.floor(u * width)  # (B, m)
    else:
        raise ValueError(f"unknown anchor sampling {sampling!r}")
    a = lo[:, None] + offset  # (B, m)
    # a region narrower than one step (ragged text shorter than 2*window + count) keeps its start
    a = torch.minimum(a, hi[:, None] - 1).clamp(min=0)
    return a.to(torch.int64)


def window_positions(anchors: torch.Tensor, window: int, task: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(decoder input positions, target positions), each int64 (B, m, window).

    rec:  inputs a, a-1, ..., a-l+1  -> targets a-1, a-2, ..., a-l  (backwards, eq. 3.1-3.3)
    pred: inputs a, a+1, ..., a+l-1  -> targets a+1, a+2, ..., a+l  (eq. 3.5-3.7)
    Step k's teacher-forced input is step k-1's target; step 0 gets x_a itself.
    """
    k = torch.arange(window, device=anchors.device)  # (l,)
    sign = {"rec": -1, "pred": 1}[task]
    inputs = anchors[..., None] + sign * k  # (B, m, l)
    return inputs, inputs + sign


def gather_steps(seq: torch.Tensor, pos: torch.Tensor,
                 lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """seq (B, T, F) at positions pos (B, m, l) -> values (B, m, l, F), valid (B, m, l).

    Positions outside [0, n) of their own sequence are invalid; their values are zeros.
    """
    B, T, _ = seq.shape
    valid = (pos >= 0) & (pos < lengths.to(pos.device)[:, None, None])  # (B, m, l)
    rows = torch.arange(B, device=seq.device)[:, None, None]  # (B, 1, 1)
    values = seq[rows, pos.clamp(0, T - 1)]  # (B, m, l, F)
    return values * valid[..., None].to(values.dtype), valid


# --- initialisation ----------------------------------------------------------------------


@torch.no_grad()
def init_recurrent(gru: nn.GRU, scheme: str, steps: int, generator: torch.Generator | None = None) -> None:
    """Initialise a 1-layer GRU in place.

    "torch": leave PyTorch's uniform(+-1/sqrt(d)) weights and biases.
    "orthogonal": each gate's recurrent block W_h{r,z,n} (d, d) orthogonal, each input
        block Xavier-uniform, biases 0: the recurrence neither shrinks nor blows up a
        state at the start, the usual remedy for vanishing gradients over long sequences.
    "chrono": "orthogonal", and the update gate's input bias b_iz = log(U(1, steps - 1))
        per unit (Tallec & Ollivier 2018, "Can recurrent neural networks warp time?").
        PyTorch's GRU keeps z * h_{t-1}, so z = sigmoid(b) near 1 - 1/e^b makes a unit
        remember for about e^b steps: the units start with memories spread from 1 step to
        the sequence length `steps`, instead of all forgetting within a few steps.
    Weights on the meta device (parameter counting) are left alone.
    """
    if scheme not in INITS:
        raise ValueError(f"unknown init {scheme!r}, expected one of {INITS}")
    if scheme == "torch" or gru.weight_hh_l0.is_meta:
        return
    d = gru.hidden_size
    for w_ih, w_hh in zip(gru.weight_ih_l0.split(d), gru.weight_hh_l0.split(d)):  # gates r, z, n
        nn.init.xavier_uniform_(w_ih, generator=generator)
        nn.init.orthogonal_(w_hh, generator=generator)
    gru.bias_ih_l0.zero_()
    gru.bias_hh_l0.zero_()
    if scheme == "chrono":
        u = torch.rand(d, generator=generator, device=gru.bias_ih_l0.device)  # (d,)
        gru.bias_ih_l0[d:2 * d] = torch.log1p(u * max(steps - 2, 0))  # log U(1, steps - 1)


# --- modules -----------------------------------------------------------------------------


class Decoder(nn.Module):
    """One auxiliary task: a GRU of hidden size r started from h^s, and a linear read-out."""

    def __init__(self, input_size: int, shared_units: int, layers: int):
        super().__init__()
        self.layers = layers
        self.gru = nn.GRU(input_size, shared_units, num_layers=layers, batch_first=True)
        self.out = nn.Linear(shared_units, input_size)

    def forward(self, h0: torch.Tensor, inputs: torch.Tensor, teacher: bool) -> torch.Tensor:
        """h0 (N, r) shared state at the anchors, inputs (N, l, F) true decoder inputs
        (x_a then the previous targets) -> estimates (N, l, F).

        teacher: one GRU call over all N = batch x anchors windows. Otherwise each step
        is fed the previous estimate, which needs a loop over the l window steps (batched
        over all anchors; never a loop over anchors or over the main sequence).
        """
        state = h0[None].expand(self.layers, -1, -1).contiguous()  # (L, N, r)
        if teacher:
            out, _ = self.gru(inputs, state)  # (N, l, r)
            return self.out(out)  # (N, l, F)
        step = inputs[:, :1]  # (N, 1, F) = x_a
        estimates = []
        for _ in range(inputs.shape[1]):
            out, state = self.gru(step, state)  # (N, 1, r)
            step = self.out(out)  # (N, 1, F)
            estimates.append(step)
        return torch.cat(estimates, dim=1)  # (N, l, F)


class PSRNN(nn.Module):
    """GRU classifier with private and shared hidden units and auxiliary decoders.

    Parameter groups (the metrics split): `embed` + `gru` = main, `head`, `decoders` = aux.
    """

    def __init__(self, cfg: RunConfig, input_kind: str, features: int, num_classes: int,
                 steps: int = 784):
        """steps: the sequence length the "chrono" init spreads memories over (training
        passes the prepared training split's mean length)."""
        super().__init__()
        if input_kind not in INPUT_KINDS:
            raise ValueError(f"input kind {input_kind!r} not in {INPUT_KINDS}")
        if cfg.embedding > 0 and input_kind != "categorical":
            raise ConfigError(f"embedding={cfg.embedding}: a learned embedding needs text "
                              f"(categorical) input, {cfg.dataset} is {input_kind}")
        self.categorical = input_kind == "categorical"
        self.features = features  # values per step, or alphabet size
        self.embed = nn.Embedding(features, cfg.embedding) if self.categorical and cfg.embedding else None
        self.input_size = cfg.embedding if self.embed is not None else features
        self.hidden = cfg.hidden
        self.shared_units = cfg.shared_units if cfg.has_aux else 0
        self.tasks = tuple(cfg.tasks) if self.shared_units else ()
        self.window = cfg.window
        self.teacher = cfg.decoder_input == "teacher"

        self.gru = nn.GRU(self.input_size, cfg.hidden, batch_first=True)
        init_recurrent(self.gru, cfg.init, steps)
        if cfg.head == "mlp":
            width = cfg.head_hidden or cfg.hidden
            self.head = nn.Sequential(nn.Linear(cfg.hidden, width), nn.ReLU(),
                                      nn.Linear(width, num_classes))
        else:
            self.head = nn.Linear(cfg.hidden, num_classes)
        self.decoders = nn.ModuleDict({
            task: Decoder(self.input_size, self.shared_units, cfg.decoder_layers) for task in self.tasks
        })

    @property
    def has_aux(self) -> bool:
        return bool(self.tasks)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """Model input vectors (B, T, F') from a batch: float (B, T, F) as is; symbol
        indices int64 (B, T) expanded to one-hot (F' = alphabet) or embedded (F' = embedding)."""
        if not self.categorical:
            return x
        if self.embed is not None:
            return self.embed(x)  # (B, T, E)
        return F.one_hot(x, self.features).to(torch.float32)  # (B, T, V)

    def encode(self, inp: torch.Tensor) -> torch.Tensor:
        """Main GRU states H (B, T, d) from input vectors (B, T, F'): one cuDNN call.

        Ragged batches are right-padded; a unidirectional GRU's states before a sequence's
        end do not see its padding, so they equal the packed-sequence result.
        """
        out, _ = self.gru(inp)  # (B, T, d)
        return out

    def classify(self, H: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Logits (B, C) from the full state at each sequence's last true step."""
        rows = torch.arange(H.shape[0], device=H.device)
        last = H[rows, lengths.to(H.device) - 1]  # (B, d)
        return self.head(last)  # (B, C)

    def aux_loss(self, inp: torch.Tensor, H: torch.Tensor, lengths: torch.Tensor,
                 anchors: torch.Tensor) -> torch.Tensor:
        """Auxiliary loss per sequence (B,): for each task and anchor, the squared error
        summed over the window (and features) divided by `window`, summed over anchors and
        tasks (eq. 3.3-3.4, 3.7-3.8). anchors: int64 (B, m)."""
        anchors = anchors.to(H.device)
        lengths = lengths.to(H.device)
        B, m = anchors.shape
        r, l = self.shared_units, self.window
        rows = torch.arange(B, device=H.device)[:, None]  # (B, 1)
        h0 = H[rows, anchors, :r].reshape(B * m, r)  # (B*m, r): only h^s, eq. 3.9
        source = inp.detach() if self.embed is not None else inp  # targets never train the embedding
        total = H.new_zeros(B)
        for task, decoder in self.decoders.items():  # at most two tasks
            in_pos, tgt_pos = window_positions(anchors, l, task)  # (B, m, l) each
            dec_in, _ = gather_steps(source, in_pos, lengths)  # (B, m, l, F)
            target, valid = gather_steps(source, tgt_pos, lengths)  # (B, m, l, F), (B, m, l)
            est = decoder(h0, dec_in.reshape(B * m, l, -1), self.teacher)  # (B*m, l, F)
            err = (est.reshape(B, m, l, -1) - target).pow(2).sum(-1)  # (B, m, l)
            total = total + (err * valid).sum(-1).div(l).sum(-1)  # (B,)
        return total

    def forward(self, x: torch.Tensor, lengths: torch.Tensor,
                anchors: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits (B, C), aux loss per sequence (B,) or None without tasks/anchors)."""
        inp = self.inputs(x)  # (B, T, F')
        H = self.encode(inp)  # (B, T, d)
        logits = self.classify(H, lengths)
        if not self.has_aux or anchors is None or anchors.shape[1] == 0:
            return logits, None
        return logits, self.aux_loss(inp, H, lengths, anchors)


def build_model(cfg: RunConfig, input_kind: str, features: int, num_classes: int,
                steps: int = 784) -> PSRNN:
    return PSRNN(cfg, input_kind, features, num_classes, steps)


# --- parameter counts --------------------------------------------------------------------


def count_params(model: PSRNN) -> dict[str, int]:
    """Trainable parameters split as in metrics.json: main (embedding + GRU), head, aux."""
    def n(mod: nn.Module | None) -> int:
        return 0 if mod is None else sum(p.numel() for p in mod.parameters() if p.requires_grad)

    counts = {
        "params_main": n(model.embed) + n(model.gru),
        "params_head": n(model.head),
        "params_aux": n(model.decoders),
    }
    counts["params"] = sum(counts.values())
    assert counts["params"] == n(model)  # every parameter belongs to one group
    return counts


def param_counts(cfg: RunConfig, input_kind: str, features: int, num_classes: int) -> dict[str, int]:
    """Parameter counts of the model `cfg` would build, without data or memory (meta device).

    Returns params, params_main, params_head, params_aux and shared_units.
    """
    with torch.device("meta"):
        model = build_model(cfg, input_kind, features, num_classes)
    return {**count_params(model), "shared_units": model.shared_units}


# --- measurements (Figure 3, gradient norms) ---------------------------------------------


@torch.no_grad()
def hidden_states(model: PSRNN, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Main GRU states h_1..h_n as float (B, T, d); zero after each sequence's end."""
    H = model.encode(model.inputs(x))  # (B, T, d)
    steps = torch.arange(H.shape[1], device=H.device)
    inside = steps[None, :] < lengths.to(H.device)[:, None]  # (B, T)
    return H * inside[..., None]


def grad_norms(model: PSRNN, x: torch.Tensor, lengths: torch.Tensor, y: torch.Tensor,
               anchors: torch.Tensor | None, aux_weight: float) -> dict[str, np.ndarray]:
    """How strongly each loss reaches the shared and private units at every time step.

    For each step t: the L2 norm of d(loss)/d(h_t) over the shared units h_t[:r] and over
    the private units h_t[r:], averaged over the sequences that reach t. d/d(h_t) is the
    *total* derivative (through the recurrence, as in the paper's Figure 3.1), measured by
    adding a zero tensor to each state in a step-by-step replay of the main GRU (a
    measurement, not the training path). Losses are per sequence, not batch means, so a
    sequence's gradients do not depend on how many others are measured with it; the aux
    term is aux_weight * aux as it enters the training loss.

    Returns float64 arrays (T,) ce_shared, ce_private, aux_shared, aux_private and int64
    scalars shared_units, hidden.
    """
    was_training = model.training
    model.train()  # cuDNN computes RNN (decoder) gradients only in training mode; nothing here is random
    try:
        return _grad_norms(model, x, lengths, y, anchors, aux_weight)
    finally:
        model.train(was_training)


def _grad_norms(model: PSRNN, x: torch.Tensor, lengths: torch.Tensor, y: torch.Tensor,
                anchors: torch.Tensor | None, aux_weight: float) -> dict[str, np.ndarray]:
    d, r = model.hidden, model.shared_units
    cell = nn.GRUCell(model.input_size, d).to(model.gru.weight_hh_l0.device)
    with torch.no_grad():
        cell.weight_ih.copy_(model.gru.weight_ih_l0)
        cell.weight_hh.copy_(model.gru.weight_hh_l0)
        cell.bias_ih.copy_(model.gru.bias_ih_l0)
        cell.bias_hh.copy_(model.gru.bias_hh_l0)
    inp = model.inputs(x)  # (B, T, F')
    B, T, _ = inp.shape
    probe = torch.zeros(B, T, d, device=inp.device, requires_grad=True)  # (B, T, d)
    h = inp.new_zeros(B, d)
    states = []
    for t in range(T):
        h = cell(inp[:, t], h) + probe[:, t]  # (B, d)
        states.append(h)
    H = torch.stack(states, dim=1)  # (B, T, d)
    ce = F.cross_entropy(model.classify(H, lengths), y.to(H.device), reduction="sum")
    g_ce, = torch.autograd.grad(ce, probe, retain_graph=True)  # (B, T, d)
    if model.has_aux and anchors is not None and anchors.shape[1] > 0:
        aux = aux_weight * model.aux_loss(inp, H, lengths, anchors).sum()
        g_aux, = torch.autograd.grad(aux, probe)  # (B, T, d)
    else:
        g_aux = torch.zeros_like(g_ce)
    inside = (torch.arange(T, device=H.device)[None, :] < lengths.to(H.device)[:, None])  # (B, T)
    reach = inside.sum(0).clamp(min=1).to(torch.float64)  # (T,)

    def mean_norm(g: torch.Tensor) -> np.ndarray:
        norms = g.to(torch.float64).norm(dim=-1) * inside  # (B, T)
        return (norms.sum(0) / reach).cpu().numpy()  # (T,)

    return {
        "ce_shared": mean_norm(g_ce[..., :r]), "ce_private": mean_norm(g_ce[..., r:]),
        "aux_shared": mean_norm(g_aux[..., :r]), "aux_private": mean_norm(g_aux[..., r:]),
        "shared_units": np.int64(r), "hidden": np.int64(d),
    }
