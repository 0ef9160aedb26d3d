"""The Transformer baseline (thesis Table 4.3): an encoder over token embeddings plus
sinusoidal positions, with a linear head per position.

    from psrnn.studies.relreg.transformer import TransformerModel
    model = TransformerModel(ff_size=48, key_size=6, heads=2, layers=1, causal=True)
    out = model(x)   # x (B, T) -> out.logits (B, T, 2)

Table 4.3's (hidden size, key size, heads) reads as dim_feedforward = hidden size and
d_model = key size * heads: every listed hidden size is 4 * key size * heads, the ratio of
Vaswani et al. 2017. Post-norm layers (torch's default, as in that paper), ReLU, dropout 0.

`causal` (the run setting of the same name): step t attends to steps <= t only, as every
other model of the study reads the bits, one per step (the carry into bit t needs the
lower bits only). Without it (the encoder as first shipped, kept as an ablation) every
output also attends to the bits after it, at positions never seen in training. The
positions are computed for any length, so the 7-17-step test sequences run; the thesis
finds its Transformer "inconsistent" on the longer numbers (Section 4.2), and nothing here
makes an encoder generalise past the 4 steps it trained on.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from psrnn.studies.relreg.base import CLASSES, VOCAB, ModelOutput


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
    def __init__(self, ff_size: int, key_size: int, heads: int, layers: int, causal: bool = False):
        super().__init__()
        self.width = key_size * heads
        self.causal = causal
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
        steps = x.shape[1]
        e = self.embed(x) * math.sqrt(self.width)  # (B, T, d), scaled as in Vaswani et al.
        mask = None
        if self.causal:  # (T, T): 0 on and below the diagonal, -inf above (later steps)
            mask = nn.Transformer.generate_square_subsequent_mask(steps, device=e.device, dtype=e.dtype)
        h = self.encoder(e + positions(steps, self.width, e), mask=mask, is_causal=self.causal)  # (B, T, d)
        return ModelOutput(self.head(h))  # (B, T, CLASSES)
