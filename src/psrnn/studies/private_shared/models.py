"""The model: a GRU classifier whose hidden state is split into shared and private units.

    python -m psrnn train --config config/small.yaml --experiment mnist_gru --seed 0

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
- The main GRU's initialisation is a setting (`init`, psrnn.studies.private_shared.recurrent.init_recurrent):
  PyTorch's uniform default, or orthogonal recurrent weights with the update gate's bias
  drawn "chrono" style so that units start out remembering over up to T steps. The paper
  does not say how it initialised; the decoders (windows of at most 64 steps) keep PyTorch's.

Where to extend it: `ModelConfig` holds every knob of the model (built from a RunConfig by
`ModelConfig.from_run`), `AUX_TASKS` has one row per auxiliary task, and
`psrnn.studies.private_shared.decoders.AuxDecoder` states what a decoder is given (the shared states at the
anchors, or all of them) and what it returns.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Self, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from psrnn.config import ConfigError
from psrnn.studies.private_shared.decoders import GRUDecoder, SharedStates, fusable, fused_decode
from psrnn.studies.private_shared.recurrent import gru_cell, init_recurrent
from psrnn.studies.private_shared.settings import RunConfig

INPUT_KINDS = ("continuous", "categorical")  # manifest.json "input"


# --- the auxiliary tasks and the model's settings ----------------------------------------


@dataclass(frozen=True)
class AuxTask:
    """One auxiliary task: a window of `window` inputs beside each anchor, decoded from h^s."""

    direction: int  # -1: the inputs before the anchor, read backwards; +1: the inputs after it
    description: str  # one line, for config docs and the schema


# Every task the model knows; `window_positions` reads the direction. A new task that is
# another window beside the anchor is one row here (and its name in settings.TASKS and the
# schema, which tests/test_models.py checks against this table).
AUX_TASKS = {
    "rec": AuxTask(-1, "reconstruct the window before the anchor, backwards (thesis eq. 3.1-3.4)"),
    "pred": AuxTask(+1, "predict the window after the anchor (thesis eq. 3.5-3.8)"),
}


@dataclass(frozen=True)
class ModelConfig:
    """Everything PSRNN's shape and initialisation depend on, and nothing else: no data
    paths, no optimisation. No defaults: RunConfig holds them; `from_run` takes a run's.

    shared_units = 0 and tasks = () build exactly a plain GRU + head.
    """

    input_kind: str  # one of INPUT_KINDS: "continuous" float vectors or "categorical" symbol indices
    features: int  # values per step, or alphabet size
    classes: int  # classifier outputs C
    hidden: int  # main GRU hidden size d
    shared_units: int  # r: units h[:r] that start the decoders; 0 exactly when `tasks` is empty
    tasks: tuple[str, ...]  # keys of AUX_TASKS, one decoder each, built in this order
    window: int  # window length l of every task
    decoder_layers: int  # GRU layers per decoder (hidden size r; each layer starts from h^s)
    teacher: bool  # decoder step k reads the true x_{k-1}; False: its own previous estimate
    embedding: int  # categorical only: >0 learns an embedding of this size; 0 = one-hot
    head: str  # classifier on the full final state: "linear" | "mlp"
    head_hidden: int  # width of the MLP head's hidden layer (0 = same as `hidden`)
    init: str  # main GRU initialisation, one of INITS (`init_recurrent`)
    init_steps: int  # the sequence length "chrono" spreads memories over
    aux_anchors: str = "sum"  # per-anchor losses "sum"med (the sources) or "mean" (ablation)

    def __post_init__(self):
        if self.input_kind not in INPUT_KINDS:
            raise ValueError(f"input kind {self.input_kind!r} not in {INPUT_KINDS}")
        if self.embedding > 0 and self.input_kind != "categorical":
            raise ConfigError(
                f"embedding={self.embedding}: a learned embedding needs text "
                f"(categorical) input, this data is {self.input_kind}"
            )
        if any(task not in AUX_TASKS for task in self.tasks):
            raise ValueError(f"tasks {self.tasks}: each must be one of {tuple(AUX_TASKS)}")
        if (self.shared_units > 0) != bool(self.tasks):
            raise ValueError(
                f"shared_units={self.shared_units} with tasks {self.tasks}: "
                f"shared units exist only to feed a task"
            )

    @classmethod
    def from_run(cls, run: RunConfig, input_kind: str, features: int, classes: int, steps: int = 784) -> Self:
        """The model settings of `run` on data of `input_kind` with `features` values (or
        symbols) per step and `classes` classes; steps: `init_steps` (training passes the
        prepared training split's mean length). A run without auxiliary loss (no shared
        unit, no task or no anchor) gets r = 0 and no task."""
        aux = run.has_aux
        return cls(
            input_kind=input_kind,
            features=features,
            classes=classes,
            hidden=run.hidden,
            shared_units=run.shared_units if aux else 0,
            tasks=tuple(run.tasks) if aux else (),
            window=run.window,
            decoder_layers=run.decoder_layers,
            teacher=run.decoder_input == "teacher",
            embedding=run.embedding,
            head=run.head,
            head_hidden=run.head_hidden,
            init=run.init,
            init_steps=steps,
            aux_anchors=run.aux_anchors,
        )

    @property
    def categorical(self) -> bool:
        return self.input_kind == "categorical"

    @property
    def input_size(self) -> int:
        """F': the width of the vectors the main GRU and the decoders read."""
        return self.embedding or self.features  # __post_init__: an embedding means categorical


# --- anchors and windows (pure functions of tensors, tested on their own) ----------------


def sample_anchors(
    lengths: torch.Tensor, count: int, window: int, sampling: str, generator: torch.Generator
) -> torch.Tensor:
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
    """(decoder input positions, target positions), each int64 (B, m, window), for a task
    of AUX_TASKS:

    rec:  inputs a, a-1, ..., a-l+1  -> targets a-1, a-2, ..., a-l  (backwards, eq. 3.1-3.3)
    pred: inputs a, a+1, ..., a+l-1  -> targets a+1, a+2, ..., a+l  (eq. 3.5-3.7)
    Step k's teacher-forced input is step k-1's target; step 0 gets x_a itself.
    """
    k = torch.arange(window, device=anchors.device)  # (l,)
    sign = AUX_TASKS[task].direction
    inputs = anchors[..., None] + sign * k  # (B, m, l)
    return inputs, inputs + sign


def gather_steps(
    seq: torch.Tensor, pos: torch.Tensor, lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """seq (B, T, F) at positions pos (B, m, l) -> values (B, m, l, F), valid (B, m, l).

    Positions outside [0, n) of their own sequence are invalid; their values are zeros.
    """
    B, T, _ = seq.shape
    valid = (pos >= 0) & (pos < lengths.to(pos.device)[:, None, None])  # (B, m, l)
    rows = torch.arange(B, device=seq.device)[:, None, None]  # (B, 1, 1)
    values = seq[rows, pos.clamp(0, T - 1)]  # (B, m, l, F)
    return values * valid[..., None].to(values.dtype), valid


# --- the model -------------------------------------------------------------------------

# Device types on which `PSRNN.aux_loss` fuses its GRU decoders by default. On an H100 one
# GRU of hidden K*r is faster than K GRUs of hidden r run one after another (fewer, larger
# kernels; at N = 1280, l = 64, F = 1, r = 64: 5.6 ms against 8.4 ms forward+backward). On
# a CPU the zero blocks are real multiplications, so there it is slower (one thread: 930
# against 520 ms) and stays off: CPU results stay bit-identical to the per-task loop.
FUSE_DEVICES = ("cuda",)


class PSRNN(nn.Module):
    """GRU classifier with private and shared hidden units and auxiliary decoders.

    Parameter groups (the metrics split): `embed` + `gru` = main, `head`, `decoders` = aux.
    Built in this order, which fixes the draws from the global RNG.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.shared_units = config.shared_units  # r
        self.embed = nn.Embedding(config.features, config.embedding) if config.embedding else None
        self.gru = nn.GRU(config.input_size, config.hidden, batch_first=True)
        init_recurrent(self.gru, config.init, config.init_steps)
        self.head: nn.Module
        if config.head == "mlp":
            width = config.head_hidden or config.hidden
            self.head = nn.Sequential(
                nn.Linear(config.hidden, width), nn.ReLU(), nn.Linear(width, config.classes)
            )
        else:
            self.head = nn.Linear(config.hidden, config.classes)
        self.decoders = nn.ModuleDict(
            {
                task: GRUDecoder(config.input_size, config.shared_units, config.decoder_layers)
                for task in config.tasks
            }
        )

    @property
    def has_aux(self) -> bool:
        return bool(self.config.tasks)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """Model input vectors (B, T, F') from a batch: float (B, T, F) as is; symbol
        indices int64 (B, T) expanded to one-hot (F' = alphabet) or embedded (F' = embedding)."""
        if not self.config.categorical:
            return x
        if self.embed is not None:
            return self.embed(x)  # (B, T, E)
        return F.one_hot(x, self.config.features).to(torch.float32)  # (B, T, V)

    def encode(self, inp: torch.Tensor) -> torch.Tensor:
        """Main GRU states H (B, T, d) from input vectors (B, T, F'): one cuDNN call.

        Ragged batches are right-padded; a unidirectional GRU's states before a sequence's
        end do not see its padding, so they equal the packed-sequence result.
        """
        out, _ = self.gru(inp)  # (B, T, d)
        return out

    def replay(self, inp: torch.Tensor, probe: torch.Tensor) -> torch.Tensor:
        """`encode`'s states (B, T, d) step by step, `probe[:, t]` (B, T, d) added to each
        state as it enters the next step: grad_norms' d(loss)/d(h_t) is the gradient at
        the probe. A model family with another recurrence replays its own here."""
        cell = gru_cell(self.gru)
        h = inp.new_zeros(inp.shape[0], self.config.hidden)
        states = []
        for t in range(inp.shape[1]):
            h = cell(inp[:, t], h) + probe[:, t]  # (B, d)
            states.append(h)
        return torch.stack(states, dim=1)

    def classify(self, H: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Logits (B, C) from the full state at each sequence's last true step."""
        rows = torch.arange(H.shape[0], device=H.device)
        last = H[rows, lengths.to(H.device) - 1]  # (B, d)
        return self.head(last)  # (B, C)

    def aux_loss(
        self,
        inp: torch.Tensor,
        H: torch.Tensor,
        lengths: torch.Tensor,
        anchors: torch.Tensor,
        fuse: bool | None = None,
    ) -> torch.Tensor:
        """Auxiliary loss per sequence (B,): for each task and anchor, the squared error
        summed over the window (and features) divided by `window`, summed over anchors and
        tasks (eq. 3.3-3.4, 3.7-3.8). anchors: int64 (B, m).

        fuse: run the decoders as one block-diagonal GRU (`fused_decode`) where that is
        exact (`fusable`); None: only on FUSE_DEVICES (CUDA), where it is faster; False:
        always one by one (the tests compare the two)."""
        anchors = anchors.to(H.device)
        lengths = lengths.to(H.device)
        B, m = anchors.shape
        r, l = self.shared_units, self.config.window
        rows = torch.arange(B, device=H.device)[:, None]  # (B, 1)
        h0 = H[rows, anchors, :r].reshape(B * m, r)  # (B*m, r): only h^s, eq. 3.9
        source = inp.detach() if self.embed is not None else inp  # targets never train the embedding
        windows = [self.task_windows(source, lengths, anchors, task) for task in self.decoders]
        inputs = [x for x, _, _ in windows]  # per task (B*m, l, F)
        shared = SharedStates(H[..., :r], lengths, anchors)  # a view: (B, T, r)
        if fuse is None:
            fuse = H.device.type in FUSE_DEVICES
        estimates = self.decode(h0, inputs, shared, fuse)  # per task (B*m, l, F)
        total = H.new_zeros(B)
        for est, (_, target, valid) in zip(estimates, windows):  # in task order, as the sum always was
            err = (est.reshape(B, m, l, -1) - target).pow(2).sum(-1)  # (B, m, l)
            total = total + (err * valid).sum(-1).div(l).sum(-1)  # (B,)
        if self.config.aux_anchors == "mean":  # ablation; the sources sum over anchors
            total = total / m
        return total

    def decode(
        self, h0: torch.Tensor, inputs: list[torch.Tensor], shared: SharedStates, fuse: bool
    ) -> list[torch.Tensor]:
        """Every task's estimates (N, l, F) from h0 (N, r) and its inputs (N, l, F): one
        block-diagonal GRU call if `fuse` and it is exact (`fusable`), else one call each."""
        if fuse and fusable(self.decoders, self.config.teacher):
            return fused_decode(cast(list[GRUDecoder], list(self.decoders.values())), h0, inputs)
        return [
            decoder(h0, x, self.config.teacher, shared if decoder.reads_sequence else None)
            for decoder, x in zip(self.decoders.values(), inputs)
        ]

    def task_windows(
        self, source: torch.Tensor, lengths: torch.Tensor, anchors: torch.Tensor, task: str
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One task's decoder inputs (B*m, l, F), targets (B, m, l, F) and their validity
        (B, m, l) at every anchor (B, m) of `source` (B, T, F)."""
        B, m = anchors.shape
        in_pos, tgt_pos = window_positions(anchors, self.config.window, task)  # (B, m, l) each
        dec_in, _ = gather_steps(source, in_pos, lengths)  # (B, m, l, F)
        target, valid = gather_steps(source, tgt_pos, lengths)  # (B, m, l, F), (B, m, l)
        return dec_in.reshape(B * m, self.config.window, -1), target, valid

    def forward(
        self, x: torch.Tensor, lengths: torch.Tensor, anchors: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits (B, C), aux loss per sequence (B,) or None without tasks/anchors)."""
        inp = self.inputs(x)  # (B, T, F')
        H = self.encode(inp)  # (B, T, d)
        logits = self.classify(H, lengths)
        if not self.has_aux or anchors is None or anchors.shape[1] == 0:
            return logits, None
        return logits, self.aux_loss(inp, H, lengths, anchors)


def build_model(cfg: RunConfig, input_kind: str, features: int, num_classes: int, steps: int = 784) -> PSRNN:
    """The PSRNN of run `cfg` on this data (`ModelConfig.from_run` says what it takes)."""
    return PSRNN(ModelConfig.from_run(cfg, input_kind, features, num_classes, steps))


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


@contextmanager
def training_mode(model: nn.Module) -> Iterator[None]:
    """`model` in training mode inside the block, and in the mode it had after it."""
    was_training = model.training
    model.train()
    try:
        yield
    finally:
        model.train(was_training)


def grad_norms(
    model: PSRNN,
    x: torch.Tensor,
    lengths: torch.Tensor,
    y: torch.Tensor,
    anchors: torch.Tensor | None,
    aux_weight: float,
) -> dict[str, np.ndarray | np.int64]:
    """How strongly each loss reaches the shared and private units at every time step.

    For each step t: the L2 norm of d(loss)/d(h_t) over the shared units h_t[:r] and over
    the private units h_t[r:], averaged over the sequences that reach t. d/d(h_t) is the
    *total* derivative (through the recurrence, as in the paper's Figure 3.1), measured by
    adding a zero tensor to each state in a step-by-step replay of the main GRU
    (`PSRNN.replay`; a measurement, not the training path). Losses are per sequence, not
    batch means, so a sequence's gradients do not depend on how many others are measured
    with it; the aux term is aux_weight * aux as it enters the training loss.

    Returns float64 arrays (T,) ce_shared, ce_private, aux_shared, aux_private and int64
    scalars shared_units, hidden.
    """
    # cuDNN computes RNN (decoder) gradients only in training mode; nothing here is random
    with training_mode(model):
        d, r = model.config.hidden, model.shared_units
        inp = model.inputs(x)  # (B, T, F')
        B, T, _ = inp.shape
        probe = torch.zeros(B, T, d, device=inp.device, requires_grad=True)  # (B, T, d)
        H = model.replay(inp, probe)  # (B, T, d)
        ce = F.cross_entropy(model.classify(H, lengths), y.to(H.device), reduction="sum")
        (g_ce,) = torch.autograd.grad(ce, probe, retain_graph=True)  # (B, T, d)
        if model.has_aux and anchors is not None and anchors.shape[1] > 0:
            aux = aux_weight * model.aux_loss(inp, H, lengths, anchors).sum()
            (g_aux,) = torch.autograd.grad(aux, probe)  # (B, T, d)
        else:
            g_aux = torch.zeros_like(g_ce)
        inside = torch.arange(T, device=H.device)[None, :] < lengths.to(H.device)[:, None]  # (B, T)
        reach = inside.sum(0).clamp(min=1).to(torch.float64)  # (T,)

        def mean_norm(g: torch.Tensor) -> np.ndarray:
            norms = g.to(torch.float64).norm(dim=-1) * inside  # (B, T)
            return (norms.sum(0) / reach).cpu().numpy()  # (T,)

        return {
            "ce_shared": mean_norm(g_ce[..., :r]),
            "ce_private": mean_norm(g_ce[..., r:]),
            "aux_shared": mean_norm(g_aux[..., :r]),
            "aux_private": mean_norm(g_aux[..., r:]),
            "shared_units": np.int64(r),
            "hidden": np.int64(d),
        }
