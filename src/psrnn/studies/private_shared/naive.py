"""The SLOW REFERENCE: the private/shared model written the way such models often are.

    python -m psrnn bench --only train      # times it against psrnn.studies.private_shared.models.PSRNN

A Python loop of GRUCell steps over the whole sequence, then, for every anchor and every
task, one decoder call on that anchor's window. It computes the same function as
`psrnn.studies.private_shared.models.PSRNN` with the same weights (`NaivePSRNN.from_model`;
tests/test_bench.py
checks that logits and auxiliary loss agree), so the benchmark's "vectorised speed-up"
compares like with like. Never used for training: it exists to be measured.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from psrnn.studies.private_shared.models import AUX_TASKS, PSRNN, SharedStates, gru_cell


class NaivePSRNN(nn.Module):
    """Same parameters and outputs as a PSRNN; one GRUCell step per time step per call."""

    def __init__(self, model: PSRNN):
        super().__init__()
        self.config = model.config  # frozen: safe to share
        self.shared_units = model.shared_units
        # copies, not shared tensors: the benchmark trains each model on its own
        self.embed = copy.deepcopy(model.embed)
        self.cell = gru_cell(model.gru)
        self.head = copy.deepcopy(model.head)
        self.decoders = copy.deepcopy(model.decoders)

    @classmethod
    def from_model(cls, model: PSRNN) -> NaivePSRNN:
        return cls(model)

    @property
    def has_aux(self) -> bool:
        return len(self.decoders) > 0

    def forward(
        self, x: torch.Tensor, lengths: torch.Tensor, anchors: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits (B, C), aux loss per sequence (B,) or None), as PSRNN.forward."""
        if not self.config.categorical:
            inp = x  # (B, T, F)
        elif self.embed is not None:
            inp = self.embed(x)  # (B, T, E)
        else:
            inp = F.one_hot(x, self.config.features).float()  # (B, T, V)
        B, T, _ = inp.shape
        lengths = lengths.to(inp.device)
        h = inp.new_zeros(B, self.config.hidden)  # (B, d)
        states = []
        for t in range(T):  # the slow part: one cell call (and autograd node set) per step
            h = self.cell(inp[:, t], h)  # (B, d)
            states.append(h)
        H = torch.stack(states, dim=1)  # (B, T, d)
        rows = torch.arange(B, device=inp.device)  # (B,)
        logits = self.head(H[rows, lengths - 1])  # (B, C)
        if not self.has_aux or anchors is None or anchors.shape[1] == 0:
            return logits, None

        anchors = anchors.to(inp.device)
        r, l = self.shared_units, self.config.window
        source = inp.detach() if self.embed is not None else inp
        k = torch.arange(l, device=inp.device)  # (l,)
        total = H.new_zeros(B)  # (B,)
        for j in range(anchors.shape[1]):  # one decoder call per anchor and task
            a = anchors[:, j]  # (B,)
            h0 = H[rows, a, :r]  # (B, r)
            shared = SharedStates(H[..., :r], lengths, anchors[:, j : j + 1])  # windows = sequences
            for task, decoder in self.decoders.items():
                sign = AUX_TASKS[task].direction
                in_pos = a[:, None] + sign * k  # (B, l)
                tgt_pos = in_pos + sign  # (B, l)
                dec_in = self._at(source, in_pos, lengths)  # (B, l, F)
                target = self._at(source, tgt_pos, lengths)  # (B, l, F)
                valid = ((tgt_pos >= 0) & (tgt_pos < lengths[:, None])).float()  # (B, l)
                est = decoder(
                    h0, dec_in, self.config.teacher, shared if decoder.reads_sequence else None
                )  # (B, l, F)
                err = (est - target).pow(2).sum(-1)  # (B, l)
                total = total + (err * valid).sum(-1) / l
        return logits, total

    @staticmethod
    def _at(seq: torch.Tensor, pos: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """seq (B, T, F) at pos (B, l); zeros where pos is outside [0, n)."""
        inside = (pos >= 0) & (pos < lengths[:, None])  # (B, l)
        rows = torch.arange(seq.shape[0], device=seq.device)[:, None]  # (B, 1)
        return seq[rows, pos.clamp(0, seq.shape[1] - 1)] * inside[..., None].to(seq.dtype)
