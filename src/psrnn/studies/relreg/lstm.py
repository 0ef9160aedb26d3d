"""The baseline: one torch.nn.LSTM layer over one-hot tokens and a linear head per step.

    from psrnn.studies.relreg.lstm import LSTMModel
    out = LSTMModel(hidden=8)(x)   # x (B, T) -> out.logits (B, T, 2)

Thesis eq. 2.3-2.4 (and 2.2 for the head); Table 4.1 sweeps the hidden size.
"""

from __future__ import annotations

import torch
from torch import nn

from psrnn.studies.relreg.base import CLASSES, VOCAB, ModelOutput, one_hot


class LSTMModel(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.lstm = nn.LSTM(VOCAB, hidden, num_layers=1, batch_first=True)
        self.head = nn.Linear(hidden, CLASSES)

    def forward(self, x: torch.Tensor) -> ModelOutput:
        inp = one_hot(x)  # (B, T, VOCAB)
        h, _ = self.lstm(inp)  # (B, T, H)
        return ModelOutput(self.head(h))  # (B, T, CLASSES)
