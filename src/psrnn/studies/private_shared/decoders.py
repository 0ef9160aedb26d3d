"""The auxiliary tasks' decoders: what one task is given and returns (`AuxDecoder`), the
paper's GRU decoder, and all tasks' GRU decoders run as one block-diagonal GRU.

    python -m psrnn train --config config/small.yaml --experiment mnist_gru --seed 0

`psrnn.studies.private_shared.models.PSRNN` builds one decoder per auxiliary task and scores their estimates
(thesis eq. 3.3); a new decoder subclasses `AuxDecoder`. `fused_decode` computes what
`fusable` decoders compute one by one, in fewer, larger kernels (PSRNN.aux_loss uses it on
the devices of `models.FUSE_DEVICES`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class SharedStates:
    """Every step's shared state of a batch, for a decoder that reads more than h^s at its
    anchor (`AuxDecoder.reads_sequence`). States after an anchor have read that anchor's
    "pred" targets: such a decoder must mask them, or it is shown its answers."""

    states: torch.Tensor  # (B, T, r) h^s_1..h^s_T; after a sequence's end they read padding
    lengths: torch.Tensor  # int64 (B,) steps per sequence
    anchors: torch.Tensor  # int64 (B, m): window i of the N = B*m decoded sits at anchors[i // m, i % m]


class AuxDecoder(nn.Module):
    """The interface of an auxiliary task's decoder; a new one (attention over the shared
    states, another read-out) subclasses this and is built in `PSRNN.__init__`.

    forward(h0, inputs, teacher, shared) -> estimates (N, l, F) of a window's targets, for
    all N = B*m windows of a batch at once (window i: sequence i // m, anchor i % m):
        h0       (N, r)     h^s at each window's anchor: the paper's decoders read only this
        inputs   (N, l, F)  the true decoder inputs: x_a, then the window's targets but the last
        teacher  bool       read `inputs` at every step, or x_a and then its own estimates
        shared   SharedStates, given only when `reads_sequence` is True; otherwise None, so
                 the GRU decoder's call (and its torch.compile graph) stays as it was
    `PSRNN.aux_loss` scores the estimates (eq. 3.3). Whatever a decoder reads, it sees
    only h[:r]: the private units h[r:] stay out of the auxiliary loss.
    """

    reads_sequence = False

    def forward(
        self, h0: torch.Tensor, inputs: torch.Tensor, teacher: bool, shared: SharedStates | None = None
    ) -> torch.Tensor:
        raise NotImplementedError


class GRUDecoder(AuxDecoder):
    """The paper's decoder: a GRU of hidden size r started from h^s, and a linear read-out."""

    def __init__(self, input_size: int, shared_units: int, layers: int):
        super().__init__()
        self.layers = layers
        self.gru = nn.GRU(input_size, shared_units, num_layers=layers, batch_first=True)
        self.out = nn.Linear(shared_units, input_size)

    def forward(
        self, h0: torch.Tensor, inputs: torch.Tensor, teacher: bool, shared: SharedStates | None = None
    ) -> torch.Tensor:
        """teacher: one GRU call over all N windows. Otherwise each step is fed the
        previous estimate, which needs a loop over the l window steps (batched over all
        anchors; never a loop over anchors or over the main sequence)."""
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


# --- all tasks' GRU decoders as one block-diagonal GRU -----------------------------------


def fusable(decoders: nn.ModuleDict, teacher: bool) -> bool:
    """Whether `fused_decode` computes exactly what the decoders compute one by one: plain
    GRUDecoders (a subclass may change forward), teacher forcing (the estimate-fed loop
    would need each task's read-out between steps), and more than one task to fuse."""
    decs = list(decoders.values())
    return teacher and len(decs) > 1 and all(type(d) is GRUDecoder for d in decs)


def block_diagonal(weights: list[torch.Tensor]) -> torch.Tensor:
    """Per-task GRU weights, each (3 * r, I) (gates r, z, n), -> one (3 * K*r, K*I) whose
    gate g is block_diag(task 0's gate g, ..., task K-1's): unit k*r + i of the fused GRU
    is unit i of task k, reading only task k's inputs. Multiplying by the identity (not
    indexing or a loop over gates) keeps it to one op, and exact: x * 1 = x, x * 0 = 0."""
    K = len(weights)
    r3, d_in = weights[0].shape
    w = torch.stack(weights).view(K, 3, r3 // 3, 1, d_in)  # (K, 3, r, 1, I)
    eye = torch.eye(K, dtype=w.dtype, device=w.device).view(K, 1, 1, K, 1)  # (K, 1, 1, K, 1)
    return (w * eye).transpose(0, 1).reshape(r3 * K, K * d_in)  # (3, K, r, K, I) -> (3Kr, KI)


def fused_gru_weights(grus: list[nn.GRU]) -> list[torch.Tensor]:
    """The weight list of one GRU of hidden K*r that runs K GRUs of hidden r side by side
    (a GRU's gates act unit by unit, so a block-diagonal GRU is exactly K independent ones),
    assembled from their parameters on every call so that their gradients flow back to
    them. Per layer: weight_ih, weight_hh, bias_ih, bias_hh, as nn.GRU lists them.

    All are views of one flat buffer laid out as cuDNN lays out a flattened nn.GRU (every
    layer's weight_ih, weight_hh, then every layer's biases): cuDNN then uses it as is,
    instead of compacting the weights and warning on every call."""
    K, layers = len(grus), range(grus[0].num_layers)
    weights = [
        block_diagonal([getattr(g, f"{name}_l{k}") for g in grus])  # (3Kr, K*I)
        for k in layers
        for name in ("weight_ih", "weight_hh")
    ]
    biases = [
        torch.stack([getattr(g, f"{name}_l{k}") for name in ("bias_ih", "bias_hh") for g in grus])
        for k in layers
    ]  # per layer (2K, 3r): the K input biases, then the K recurrent ones
    r = biases[0].shape[1] // 3
    flat = torch.cat(
        [w.reshape(-1) for w in weights]
        + [b.view(2, K, 3, r).transpose(1, 2).reshape(-1) for b in biases]  # (2, 3, K, r)
    )
    shapes = [w.shape for w in weights] + [(3 * K * r,)] * (2 * len(biases))
    views = [v.view(s) for v, s in zip(flat.split([math.prod(s) for s in shapes]), shapes)]
    w, b = views[: len(weights)], views[len(weights) :]
    return [t for k in layers for t in (w[2 * k], w[2 * k + 1], b[2 * k], b[2 * k + 1])]


def fused_decode(
    decoders: list[GRUDecoder], h0: torch.Tensor, inputs: list[torch.Tensor]
) -> list[torch.Tensor]:
    """Teacher-forced estimates (N, l, F) of K GRUDecoders from one GRU call of hidden K*r:
    the same numbers as calling each (`fusable` says when), in fewer, larger kernels.

    torch._VF.gru is the function nn.GRU.forward calls; it takes the weight list directly,
    so no second nn.GRU (with parameters of its own in the state dict) is needed."""
    K, L = len(decoders), decoders[0].layers
    x = torch.cat(inputs, dim=-1)  # (N, l, K*F): task k's inputs at features k*F..
    state = torch.cat([h0] * K, dim=-1)[None].expand(L, -1, -1).contiguous()  # (L, N, K*r)
    weights = fused_gru_weights([d.gru for d in decoders])
    train = decoders[0].gru.training  # cuDNN keeps what backward needs only in training mode
    out, _ = torch._VF.gru(x, state, weights, True, L, 0.0, train, False, True)  # (N, l, K*r)
    halves = out.chunk(K, dim=-1)  # K x (N, l, r)
    return [d.out(h) for d, h in zip(decoders, halves)]  # K x (N, l, F)
