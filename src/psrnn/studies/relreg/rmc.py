"""A compact relational memory core (RMC): Santoro et al. 2018, "Relational recurrent neural
networks" (NeurIPS; arXiv:1806.01822), Section 3, the thesis' second baseline (Table 4.2).

    from psrnn.studies.relreg.rmc import RMCModel
    out = RMCModel(key_size=4, heads=2, slots=1)(x)   # x (B, T) -> out.logits (B, T, 2)

The state is a memory M of `slots` rows, each d = heads * key_size wide (the thesis'
"hidden size" of Table 4.2 is d). At every step:

    x~ = W_in x_t                                   the input as one more row (B, 1, d)
    A  = MHDPA(queries M, keys and values [M; x~])  memories attend to each other and the input
    M' = LN(M + A);  M' = LN(M' + MLP(M'))          2-layer row-wise MLP, residuals, layer norm
    i, f = sigmoid(W_i x~ + U_i tanh M + 0), sigmoid(W_f x~ + U_f tanh M + 1)
    M_t = i * tanh(M') + f * M                      the paper's LSTM-style gating, per unit

and the step's output is the flattened memory, read by a linear head. This follows the
authors' Sonnet module (one attention block, 2 MLP layers, "unit" gates, forget bias 1,
input bias 0, the identity-like initial memory); torch.nn.MultiheadAttention adds an output
projection the Sonnet module does not have. The number of slots is not given in the
thesis (ours: 1).
"""

from __future__ import annotations

import torch
from torch import nn

from psrnn.studies.relreg.base import CLASSES, VOCAB, ModelOutput, one_hot


class RelationalMemory(nn.Module):
    """One RMC step: forward(x (B, I), memory (B, N, d)) -> next memory (B, N, d)."""

    def __init__(self, input_size: int, key_size: int, heads: int, slots: int = 1):
        super().__init__()
        self.slots, self.width = slots, key_size * heads
        d = self.width
        self.project = nn.Linear(input_size, d)
        self.attend = nn.MultiheadAttention(d, heads, batch_first=True)  # key_size = d / heads per head
        self.norm_attend, self.norm_mlp = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))
        self.gate_input = nn.Linear(d, 2 * d)  # input and forget gates, from the input ...
        self.gate_memory = nn.Linear(d, 2 * d, bias=False)  # ... and from tanh(previous memory)
        self.input_bias, self.forget_bias = 0.0, 1.0

    def initial(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        """(B, N, d): row n holds a 1 in column n (the Sonnet module's start), zeros elsewhere."""
        eye = torch.eye(self.slots, self.width, dtype=like.dtype, device=like.device)  # (N, d)
        return eye.expand(batch, -1, -1)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        xp = self.project(x).unsqueeze(1)  # (B, 1, d)
        both = torch.cat([memory, xp], dim=1)  # (B, N + 1, d)
        # Queries from the memory rows only: the Sonnet module also updates the input row
        # and then drops it, and every step after the attention is row-wise, so the memory
        # rows come out the same.
        attended, _ = self.attend(memory, both, both, need_weights=False)  # (B, N, d)
        m = self.norm_attend(memory + attended)  # (B, N, d)
        m = self.norm_mlp(m + self.mlp(m))  # (B, N, d) the candidate memory
        gates = self.gate_input(xp) + self.gate_memory(torch.tanh(memory))  # (B, N, 2d)
        i, f = gates.chunk(2, dim=-1)  # (B, N, d) each
        i, f = torch.sigmoid(i + self.input_bias), torch.sigmoid(f + self.forget_bias)
        return i * torch.tanh(m) + f * memory  # (B, N, d)


class RMCModel(nn.Module):
    """RelationalMemory over one-hot tokens and a linear head on the flattened memory per step."""

    def __init__(self, key_size: int, heads: int, slots: int = 1):
        super().__init__()
        self.core = RelationalMemory(VOCAB, key_size, heads, slots)
        self.head = nn.Linear(slots * self.core.width, CLASSES)

    def forward(self, x: torch.Tensor) -> ModelOutput:
        inputs = one_hot(x)  # (B, T, VOCAB)
        memory = self.core.initial(inputs.shape[0], inputs)  # (B, N, d)
        outs = []
        for t in range(inputs.shape[1]):
            memory = self.core(inputs[:, t], memory)
            outs.append(memory.flatten(1))  # (B, N * d)
        return ModelOutput(self.head(torch.stack(outs, dim=1)))  # (B, T, CLASSES)
