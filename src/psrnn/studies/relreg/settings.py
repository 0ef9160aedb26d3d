"""The run settings of the relation-level regularization study (`study: relreg`).

    python -m psrnn config config/relreg.yaml          # validate, list the runs
    python -m psrnn train --config config/relreg.yaml --experiment proto_both --seed 1 \
        --selected results/relreg/search/proto_both/selected.json

A suite config with `study: relreg` resolves each (experiment, seed) to one RelRegConfig,
exactly as the first study's configs resolve to psrnn.studies.private_shared.settings.RunConfig:
defaults < experiment < grid point < --set. config/relreg.schema.yaml types every field.
Where the thesis is silent (epochs, batch size, optimizer, data sizes), the value chosen
here is marked "(ours)"; docs/relreg.md ("Where the thesis is silent we chose") lists them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

MODELS = ("lstm", "proto", "rmc", "transformer")


@dataclass(frozen=True)
class RelRegConfig:
    """Everything one Binary Counter run depends on. Field comments are the documentation."""

    # --- data (psrnn.studies.relreg.data; generated in the run, seeded) -------------------------
    dataset: Literal["bincounter"] = "bincounter"
    train_bits: int = 3  # thesis: trained on 3-bit numbers
    train_size: int = 512  # sequences per epoch, drawn from the 2^train_bits numbers (ours)
    valid_bits: tuple[int, ...] = (4, 5)  # model and epoch selection on all 4- and 5-bit numbers (ours)
    test_bits: tuple[int, ...] = (6, 8, 10, 12, 14, 16)  # thesis Table 4.5 (16 in the text)
    test_count: int = 1024  # numbers per test length: all up to 10 bits, 1,024 distinct above (ours)
    data_seed: int = 0  # draws of the training sequences and the long test numbers
    # --- model (psrnn.studies.relreg.models.build_model) ----------------------------------------
    model: Literal["lstm", "proto", "rmc", "transformer"] = "lstm"
    hidden: int = 8  # LSTM / proto-LSTM hidden size; Transformer feed-forward size
    cells: int = 4  # K proto-LSTM cells (eq. 3.1-3.2)
    key_size: int = 4  # RMC / Transformer: size per attention head
    heads: int = 2  # RMC / Transformer: attention heads (RMC memory = key_size * heads = hidden)
    layers: int = 1  # Transformer encoder layers
    # Transformer: step t attends to steps <= t only, as the recurrent models read (they are
    # causal by construction). false = every step sees the whole number, the encoder as first
    # shipped; the default, so that the runs recorded before this field existed keep their settings
    causal: bool = False
    slots: int = 1  # RMC memory slots (not given in the thesis; ours)
    # --- regularization (psrnn.studies.relreg.regularizers, eq. 3.5-3.7) -----------------------
    l2: float = 0.0  # lambda_whole: L2 over every parameter (eq. 3.6)
    l2_cell: float = 0.0  # lambda_cell: L2 over the proto-LSTM cells' weights and biases (eq. 3.7)
    l2_noncell: float = 0.0  # lambda_non-cell: L2 over every other parameter (eq. 3.7)
    noise: float = 0.0  # epsilon: cell noise injection in training (eq. 3.5)
    # --- optimisation (the thesis gives only the learning rates; ours) ------------------
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = 0.01
    batch_size: int = 32
    epochs: int = 30  # fixed; the best epoch on validation is kept
    clip: float = 1.0  # max global gradient norm (0 = off)
    # --- bookkeeping --------------------------------------------------------------------
    loading_samples: int = 4  # proto: test sequences whose loading probabilities are saved
    seed: int = 0
    device: str = "cpu"  # "auto" | "cpu" | "cuda" | "cuda:N" | "mps"; tiny models run best on a CPU
    progress: Literal["auto", "bar", "plain"] = "plain"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def with_defaults(recorded: dict[str, Any]) -> dict[str, Any]:
    """Settings a run recorded (metrics.json, ckpt_last.pt "config") with every field it
    predates at its default: a new field's default is the behaviour runs had before it
    existed (slots, causal), so such a run compares equal to the same run today."""
    defaults = RelRegConfig().to_dict()
    return {**{k: v for k, v in defaults.items() if k not in recorded}, **recorded}


# Fused training (psrnn.engine.group, psrnn.studies.relreg.fused): runs whose settings differ only in
# these train as one batched model; the model kinds it batches (the others train alone)
FUSED_PER_RUN = ("seed", "lr", "l2", "l2_cell", "l2_noncell", "noise", "clip")
FUSED_MODELS = ("lstm", "proto", "rmc", "transformer")


def group_key(cfg: RelRegConfig) -> tuple | None:
    """Runs of one key (all settings but FUSED_PER_RUN) train as one batched model on the
    CPU; None: this run trains alone."""
    if cfg.model not in FUSED_MODELS or cfg.device != "cpu":
        return None
    d = cfg.to_dict()
    return tuple((k, repr(d[k])) for k in sorted(d) if k not in FUSED_PER_RUN)


def check_run(cfg: RelRegConfig) -> None:
    """Cross-field checks (the schema checks each field); each error names the keys."""
    from psrnn.config import ConfigError

    if cfg.model == "rmc" and cfg.hidden != cfg.key_size * cfg.heads:
        raise ConfigError(
            f"hidden: {cfg.hidden} must equal key_size * heads = {cfg.key_size} * {cfg.heads} "
            "for model rmc (its memory is heads x key_size wide, thesis Table 4.2)"
        )
    if cfg.model != "proto" and (cfg.l2_cell or cfg.l2_noncell or cfg.noise):
        raise ConfigError(f"l2_cell/l2_noncell/noise: model {cfg.model} has no proto-LSTM cells; use l2")
    if cfg.causal and cfg.model != "transformer":
        raise ConfigError(
            f"causal: model {cfg.model} is recurrent, causal by construction; "
            "the setting is the transformer's"
        )
