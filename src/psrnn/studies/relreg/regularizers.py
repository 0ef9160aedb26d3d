"""The regularization terms added to the training loss (thesis Section 3.3).

    from psrnn.studies.relreg.regularizers import penalty
    loss = cross_entropy + penalty(model, l2=1e-3, l2_cell=0.0, l2_noncell=0.0)

    l2(model)                           sum of w^2 over every parameter (eq. 3.6, without lambda)
    cell_noncell_l2(model, lc, ln)      lc * sum over the proto-LSTM cells' W^k and b^k
                                        + ln * sum over every other parameter (eq. 3.7)
    penalty(model, l2, lc, ln)          l2 * eq. 3.6 + eq. 3.7

"Every parameter" includes the biases: the thesis' sums run over all N parameters of the
model. The cell parameters are those of every ProtoLSTMCell in the model (not its relation
loader); a model without proto-LSTM cells has only non-cell parameters. The cell noise of
eq. 3.5 is not a loss term: it acts on the weights inside psrnn.studies.relreg.proto.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from psrnn.studies.relreg.proto import ProtoLSTMCell


def _sum_squares(params: Iterable[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    total = like.new_zeros(())
    for p in params:
        total = total + p.pow(2).sum()
    return total


def _like(model: nn.Module) -> torch.Tensor:
    """A parameter for device and dtype (a CPU float zero for a model without any)."""
    return next(model.parameters(), torch.zeros(()))


def cell_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The W^k and b^k of every proto-LSTM cell in the model (empty for the baselines)."""
    found: dict[int, nn.Parameter] = {}
    for m in model.modules():
        if isinstance(m, ProtoLSTMCell):
            found.update((id(p), p) for p in m.cell_parameters())
    return list(found.values())


def l2(model: nn.Module) -> torch.Tensor:
    """Eq. 3.6 without lambda: sum of squares of all parameters, biases included."""
    return _sum_squares(model.parameters(), _like(model))


def cell_noncell_l2(model: nn.Module, lambda_cell: float, lambda_noncell: float) -> torch.Tensor:
    """Eq. 3.7: lambda_cell * sum_i 1_cell w_i^2 + lambda_noncell * sum_i (1 - 1_cell) w_i^2."""
    cells = {id(p) for p in cell_parameters(model)}
    like = _like(model)
    total = like.new_zeros(())
    if lambda_cell:
        total = total + lambda_cell * _sum_squares((p for p in model.parameters() if id(p) in cells), like)
    if lambda_noncell:
        others = (p for p in model.parameters() if id(p) not in cells)
        total = total + lambda_noncell * _sum_squares(others, like)
    return total


def penalty(model: nn.Module, l2: float, l2_cell: float, l2_noncell: float) -> torch.Tensor:
    """The loss' regularization term: l2 * eq. 3.6 + eq. 3.7 (a 0-dim tensor, exactly 0 when
    every lambda is 0). `l2` here is lambda_whole, the run setting of that name."""
    total = cell_noncell_l2(model, l2_cell, l2_noncell)
    if l2:
        total = total + l2 * _sum_squares(model.parameters(), _like(model))
    return total
