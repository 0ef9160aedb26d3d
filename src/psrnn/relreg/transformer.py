"""The Transformer baseline (thesis Table 4.3): an encoder over token embeddings plus
sinusoidal positions, with a linear head per position.

    from psrnn.relreg.transformer import TransformerModel
    out = TransformerModel(ff_size=48, key_size=6, heads=2, layers=1)(x)   # x (B, T) -> (B, T, 2)

Table 4.3's (hidden size, key size, heads) reads as dim_feedforward = hidden size and
d_model = key size * heads: every listed hidden size is 4 * key size * heads, the ratio of
Vaswani et al. 2017. Post-norm layers (torch's default, as in that paper), ReLU, dropout 0.

No causal mask: the whole input number is given before any output bit is read, so every
output position may attend to every input bit (the carry needs the lower bits only, but
nothing tells the encoder so). The positions are computed for any length, so the 7-17-step
test sequences run; nothing makes the encoder generalise past the 4 steps it trained on,
which is the thesis' point about Transformers.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from psrnn.relreg.models import CLASSES, VOCAB, ModelOutput


def positions(steps: int, width: int, like: torch.Tensor) -> torch.Tensor:
    """(T, d) sinusoidal position encodings (Vaswani et al. 2017, Section 3.5), any T and d."""
    pos = torch.arange(steps, dtype=like.dtype, device=like.device).unsqueeze(1)  # (T, 1)
    even = torch.arange(0, width, 2, dtype=like.dtype, device=like.device)  # (ceil(d / 2),)
    angle = pos * torch.exp(even * (-math.log(10000.0) / width))  # (T, ceil(d / 2))
    pe = torch.zeros(steps, width, dtype=like.dtype, device=like.device)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : width // 2])
    return pe


class TransformerModel(nn.Module):
    def __init__(self, ff_size: int, key_size: int, heads: int, layers: int):
        super().__init__()
        self.width = key_size * heads
        self.embed = nn.Embedding(VOCAB, self.width)
        layer = nn.TransformerEncoderLayer(
            self.width, heads, dim_feedforward=ff_size, dropout=0.0, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        # TransformerEncoder deep-copies one layer, so all layers would start identical;
        # draw each afresh, as torch.nn.Transformer does (Xavier-uniform matrices).
        for p in self.encoder.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        self.head = nn.Linear(self.width, CLASSES)

    def forward(self, x: torch.Tensor) -> ModelOutput:
        e = self.embed(x) * math.sqrt(self.width)  # (B, T, d), scaled as in Vaswani et al.
        h = self.encoder(e + positions(x.shape[1], self.width, e))  # (B, T, d), no mask
        return ModelOutput(self.head(h))  # (B, T, CLASSES)
