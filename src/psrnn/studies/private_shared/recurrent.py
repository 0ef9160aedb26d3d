"""The main GRU's initialisation schemes (the `init` run setting) and a GRUCell copy of one of
its layers for step-by-step replays; psrnn.studies.private_shared.models builds the GRU and calls these.

    init_recurrent(model.gru, "chrono", steps=784)   # in place, before training
    cell = gru_cell(model.gru)                        # cell(x_t, h) is one step of layer 0
"""

from __future__ import annotations

import torch
from torch import nn

from psrnn.studies.private_shared.settings import INITS


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
    w_ih, w_hh = gru.get_parameter("weight_ih_l0"), gru.get_parameter("weight_hh_l0")  # (3d, I), (3d, d)
    b_ih, b_hh = gru.get_parameter("bias_ih_l0"), gru.get_parameter("bias_hh_l0")  # (3d,) each
    if scheme == "torch" or w_hh.is_meta:
        return
    d = gru.hidden_size
    for w_i, w_h in zip(w_ih.split(d), w_hh.split(d)):  # gates r, z, n
        nn.init.xavier_uniform_(w_i, generator=generator)
        nn.init.orthogonal_(w_h, generator=generator)
    b_ih.zero_()
    b_hh.zero_()
    if scheme == "chrono":
        u = torch.rand(d, generator=generator, device=b_ih.device)  # (d,)
        b_ih[d : 2 * d] = torch.log1p(u * max(steps - 2, 0))  # log U(1, steps - 1)


def gru_cell(gru: nn.GRU, layer: int = 0) -> nn.GRUCell:
    """A GRUCell holding a copy of `gru`'s weights of `layer`, on their device: one call
    of it is one step of that layer (nn.GRU and nn.GRUCell order the gates r, z, n alike).

    The cell is built with PyTorch's init before the copy, so it draws from the global RNG
    as any new GRUCell does. Used for the step-by-step replays: `grad_norms`, the slow
    reference `psrnn.studies.private_shared.naive` and the tests' literal decoder.
    """
    w_ih = getattr(gru, f"weight_ih_l{layer}")  # (3 * hidden, input)
    cell = nn.GRUCell(w_ih.shape[1], gru.hidden_size, bias=gru.bias)
    with torch.no_grad():
        for name, p in cell.named_parameters():  # weight_ih, weight_hh[, bias_ih, bias_hh]
            p.copy_(getattr(gru, f"{name}_l{layer}"))
    return cell.to(w_ih.device)
