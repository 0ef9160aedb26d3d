"""Proto-LSTM cells with a relation loader (thesis Chapter 3, eq. 3.1-3.5, Figure 3.1).

    from psrnn.studies.relreg.proto import ProtoLSTM
    out = ProtoLSTM(hidden=8, cells=4, noise=0.1)(x)   # x (B, T) -> logits (B, T, 2), loading (B, T, 4)

K LSTM cells ("proto-LSTM cells", each a prototype of one relation) share one state (h, c).
At every step the relation loader, a linear layer on [x_t; h_{t-1}], gives the loading
probabilities p = softmax(loader([x_t; h_{t-1}])) (eq. 3.3-3.4), and the step runs one
LSTM whose weights and biases are the p-weighted sums of the K cells' (eq. 3.2), through
the ordinary LSTM equations (eq. 3.1). Every sample of the batch has its own p, so its own
mixed weights.

Cell noise injection (eq. 3.5), in training only and when noise = epsilon > 0: at every
time step each cell's weights get Gaussian noise of standard deviation epsilon * std(W^k)
(std over all of that cell's weights, input and recurrent together, detached), and its
bias epsilon * std(b^k); one draw per step, shared by the batch, from torch's global RNG.

Layout: per cell, torch.nn.LSTMCell's (gates i, f, g, o; weight_ih, weight_hh) with a
single bias b^k as in eq. 3.1 (LSTMCell's bias_ih + bias_hh). The cell parameters of
eq. 3.7 are weight_ih, weight_hh and bias; the loader and the head are non-cell.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from psrnn.studies.relreg.base import CLASSES, VOCAB, ModelOutput, one_hot


class ProtoLSTMCell(nn.Module):
    """K proto-LSTM cells mixed per sample and step by a relation loader.

    forward(x (B, I), (h, c) each (B, H)) -> (h', c', p (B, K)).
    """

    def __init__(self, input_size: int, hidden: int, cells: int, noise: float = 0.0):
        super().__init__()
        self.input_size, self.hidden, self.cells, self.noise = input_size, hidden, cells, noise
        self.weight_ih = nn.Parameter(torch.empty(cells, 4 * hidden, input_size))  # W_x^k, gates i, f, g, o
        self.weight_hh = nn.Parameter(torch.empty(cells, 4 * hidden, hidden))  # W_h^k
        self.bias = nn.Parameter(torch.empty(cells, 4 * hidden))  # b^k
        self.loader = nn.Linear(input_size + hidden, cells)  # the relation loader (eq. 3.3)
        self.reset_cells()

    def reset_cells(self) -> None:
        """Each cell drawn independently as torch.nn.LSTMCell draws one: U(-1/sqrt(H), 1/sqrt(H))
        for the weights; the one bias is the sum of two such draws, LSTMCell's
        bias_ih + bias_hh, so the pre-activations start with LSTMCell's spread."""
        bound = 1.0 / math.sqrt(self.hidden)
        with torch.no_grad():
            self.weight_ih.uniform_(-bound, bound)
            self.weight_hh.uniform_(-bound, bound)
            self.bias.uniform_(-bound, bound).add_(torch.empty_like(self.bias).uniform_(-bound, bound))

    def cell_parameters(self) -> list[nn.Parameter]:
        """W^k and b^k of every cell: eq. 3.7's cell parameters (the loader is non-cell)."""
        return [self.weight_ih, self.weight_hh, self.bias]

    def step_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """This step's cell weights (K, 4H, I), (K, 4H, H) and biases (K, 4H): the parameters
        themselves, or in training with noise > 0 a fresh draw of eq. 3.5 around them."""
        if not (self.training and self.noise > 0):
            return self.weight_ih, self.weight_hh, self.bias
        k = self.cells
        with torch.no_grad():  # sigma_w^k, sigma_b^k: scales, not paths for the gradient
            w_all = torch.cat([self.weight_ih.reshape(k, -1), self.weight_hh.reshape(k, -1)], dim=1)
            sigma_w = w_all.std(dim=1)  # (K,)
            sigma_b = self.bias.std(dim=1)  # (K,)
        eps = self.noise
        w_ih = self.weight_ih + eps * sigma_w.view(k, 1, 1) * torch.randn_like(self.weight_ih)
        w_hh = self.weight_hh + eps * sigma_w.view(k, 1, 1) * torch.randn_like(self.weight_hh)
        b = self.bias + eps * sigma_b.view(k, 1) * torch.randn_like(self.bias)
        return w_ih, w_hh, b

    def forward(
        self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h, c = state  # (B, H) each
        p = torch.softmax(self.loader(torch.cat([x, h], dim=1)), dim=1)  # (B, K) eq. 3.3-3.4
        w_ih, w_hh, b = self.step_weights()
        # (sum_k p^k W^k) z = sum_k p^k (W^k z): the pre-activations are linear in the weights,
        # so applying every cell and mixing the results is eq. 3.2's mixing of the weights,
        # without building a (B, 4H, I + H) weight per sample.
        per_cell = (
            torch.einsum("bi,kgi->bkg", x, w_ih) + torch.einsum("bh,kgh->bkg", h, w_hh) + b
        )  # (B, K, 4H)
        gates = torch.einsum("bk,bkg->bg", p, per_cell)  # (B, 4H)
        i, f, g, o = gates.chunk(4, dim=1)  # (B, H) each
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)  # eq. 3.1
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c, p


class ProtoLSTM(nn.Module):
    """ProtoLSTMCell over one-hot tokens, zero initial state, a linear head per step."""

    def __init__(self, hidden: int, cells: int, noise: float = 0.0):
        super().__init__()
        self.cell = ProtoLSTMCell(VOCAB, hidden, cells, noise)
        self.head = nn.Linear(hidden, CLASSES)

    def cell_parameters(self) -> list[nn.Parameter]:
        """The proto-LSTM cells' W^k and b^k (eq. 3.7's 1_cell)."""
        return self.cell.cell_parameters()

    def noncell_parameters(self) -> list[nn.Parameter]:
        """Every other parameter: the relation loader and the head."""
        cells = {id(p) for p in self.cell_parameters()}
        return [p for p in self.parameters() if id(p) not in cells]

    def forward(self, x: torch.Tensor) -> ModelOutput:
        inputs = one_hot(x)  # (B, T, VOCAB)
        h = c = inputs.new_zeros(inputs.shape[0], self.cell.hidden)  # (B, H)
        hs, ps = [], []
        for t in range(inputs.shape[1]):
            h, c, p = self.cell(inputs[:, t], (h, c))
            hs.append(h)
            ps.append(p)
        logits = self.head(torch.stack(hs, dim=1))  # (B, T, CLASSES)
        return ModelOutput(logits, torch.stack(ps, dim=1))  # loading (B, T, K)
