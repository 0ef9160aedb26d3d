"""What every model of the Binary Counter study shares: the token and class counts, the
one-hot input and the output of forward (psrnn.studies.relreg.models builds the models; each model
file imports this module, so the registry may import them without a cycle)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

VOCAB = 3  # input tokens: bit 0, bit 1, START
CLASSES = 2  # output classes per step: bit 0, bit 1


@dataclass
class ModelOutput:
    """What every model's forward returns."""

    logits: torch.Tensor  # (B, T, CLASSES): one prediction per input step
    loading: torch.Tensor | None = None  # (B, T, K) loading probabilities p^k (eq. 3.4); proto only


def one_hot(x: torch.Tensor) -> torch.Tensor:
    """Token ids (B, T) -> one-hot float inputs (B, T, VOCAB)."""
    return F.one_hot(x, VOCAB).float()
