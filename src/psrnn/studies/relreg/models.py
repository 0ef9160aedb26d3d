"""The four models of the Binary Counter study behind one interface (thesis Section 4.2).

    from psrnn.studies.relreg.models import build_model
    model = build_model("proto", hidden=8, cells=4, key_size=4, heads=2, layers=1, noise=0.1)
    out = model(x)   # x (B, T) token ids -> out.logits (B, T, 2), out.loading (B, T, K)

Every model reads token ids in {0, 1, START = 2} (the start token at step 0, then the bits
least significant first) and emits one 2-way prediction per step, sequence to sequence:

    lstm         torch.nn.LSTM + linear head, the baseline (Table 4.1)          psrnn.studies.relreg.lstm
    proto        K proto-LSTM cells mixed by a relation loader (eq. 3.1-3.5)     psrnn.studies.relreg.proto
    rmc          relational memory core, Santoro et al. 2018 (Table 4.2)         psrnn.studies.relreg.rmc
    transformer  encoder-only Transformer (Table 4.3), causal or not
    psrnn.studies.relreg.transformer

The regularizers of eq. 3.6-3.7 are in psrnn.studies.relreg.regularizers; the vocabulary, the one-hot
input and ModelOutput in psrnn.studies.relreg.base.
"""

from __future__ import annotations

from torch import nn

from psrnn.studies.relreg.base import CLASSES, VOCAB, ModelOutput, one_hot  # noqa: F401 (re-exports)
from psrnn.studies.relreg.lstm import LSTMModel
from psrnn.studies.relreg.proto import ProtoLSTM
from psrnn.studies.relreg.rmc import RMCModel
from psrnn.studies.relreg.transformer import TransformerModel

MODELS = ("lstm", "proto", "rmc", "transformer")


def build_model(
    kind: str,
    *,
    hidden: int,
    cells: int,
    key_size: int,
    heads: int,
    layers: int,
    noise: float,
    slots: int = 1,
    causal: bool = False,
) -> nn.Module:
    """One model of MODELS from the run settings (psrnn.studies.relreg.settings). What each reads:

    lstm         hidden
    proto        hidden, cells (K), noise (epsilon of eq. 3.5)
    rmc          key_size, heads, slots; hidden must equal key_size * heads (Table 4.2)
    transformer  hidden (feed-forward size), key_size, heads (d_model = key_size * heads), layers,
                 causal (each step attends to itself and earlier steps only)

    Raises ValueError naming the setting when a value does not fit the model.
    """
    if kind not in MODELS:
        raise ValueError(f"model: {kind!r} is not one of {', '.join(MODELS)}")
    if noise < 0:
        raise ValueError(f"noise: must be >= 0, got {noise}")
    if noise > 0 and kind != "proto":
        raise ValueError(f"noise: model {kind} has no proto-LSTM cells to inject noise into")
    if causal and kind != "transformer":
        raise ValueError(
            f"causal: model {kind} is recurrent, causal by construction; the setting is the transformer's"
        )
    for name, value in (("hidden", hidden), ("cells", cells), ("key_size", key_size), ("heads", heads)):
        if value < 1:
            raise ValueError(f"{name}: must be >= 1, got {value}")
    if kind == "lstm":
        return LSTMModel(hidden)
    if kind == "proto":
        return ProtoLSTM(hidden, cells, noise)
    if kind == "rmc":
        if hidden != key_size * heads:
            raise ValueError(
                f"hidden, key_size, heads: the RMC's hidden size is key_size * heads "
                f"({key_size} * {heads} = {key_size * heads}), got hidden = {hidden}"
            )
        if slots < 1:
            raise ValueError(f"slots: must be >= 1, got {slots}")
        return RMCModel(key_size, heads, slots)
    if layers < 1:
        raise ValueError(f"layers: must be >= 1, got {layers}")
    return TransformerModel(hidden, key_size, heads, layers, causal)
