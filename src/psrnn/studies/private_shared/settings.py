"""The first study's run settings: one run's knobs (`RunConfig`) and their checks.

    python -m psrnn config config/small.yaml            # validate, print the runs

A suite config's experiments resolve to one RunConfig per seed (psrnn.config.resolve_run);
psrnn.registry names `RunConfig`, `check_run` and `check_window` for the first study.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, get_args

from psrnn.errors import ConfigError
from psrnn.studies.private_shared.datasets import REGISTRY

DATASETS = tuple(REGISTRY)  # mnist, fmnist, cifar10, imdb, dbpedia (psrnn.studies.private_shared.datasets)
TASKS = ("rec", "pred")
# the choices of RunConfig's enum-like fields (config/schema.yaml lists the same; a test checks)
Optimizer = Literal["sgdr", "adamwr", "adam"]
Init = Literal["torch", "orthogonal", "chrono"]
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
INITS: tuple[str, ...] = get_args(Init)


@dataclass(frozen=True)
class RunConfig:
    """Everything one training run depends on. Field comments are the documentation."""

    # --- data -------------------------------------------------------------------------
    dataset: Literal["mnist", "fmnist", "cifar10", "imdb", "dbpedia"] = "mnist"  # DATASETS
    data_dir: str = ""  # prepared dataset directory (train/valid/test .pt + manifest.json)
    # --- model ------------------------------------------------------------------------
    hidden: int = 128  # main GRU hidden size d
    shared: float = 0.5  # shared proportion r/d: units [0, round(shared*hidden)) feed the decoders
    tasks: tuple[str, ...] = ("rec",)  # auxiliary tasks: "rec" (backwards, before anchor), "pred" (after)
    anchors: int = 1  # anchors m per sequence
    window: int = 50  # window length l of each auxiliary task
    # "stratified" (thesis 3.1: one draw in each of m regions) | "uniform" (Trinh et al.)
    sampling: Literal["stratified", "uniform"] = "stratified"
    # "teacher": decoder step k gets the true x_{k-1}; "estimate": its own previous output
    decoder_input: Literal["teacher", "estimate"] = "teacher"
    decoder_layers: int = 1  # GRU layers of each auxiliary decoder (its hidden size is r)
    # total loss = CE + aux_weight * aux. The sources give no coefficient: the losses are
    # added as they are (paper 3.1, thesis eq. 3.4/3.8; the thesis argues against weighting),
    # so 1 is the sources' loss and anything else an ablation
    aux_weight: float = 1.0
    # how the per-anchor auxiliary losses of a sequence combine: "sum" (the sources' eq.
    # 3.4/3.8, no coefficient) | "mean" over anchors (an ablation: m times smaller)
    aux_anchors: Literal["sum", "mean"] = "sum"
    embedding: int = 0  # text only: >0 learns a character embedding of this size (DBpedia: 100); 0 = one-hot
    head: Literal["linear", "mlp"] = "linear"  # classifier on the full final state: "linear" | "mlp"
    head_hidden: int = 0  # width of the MLP head's hidden layer (0 = same as `hidden`)
    # main GRU: "torch" (PyTorch's uniform) | "orthogonal" (orthogonal recurrent blocks, zero
    # biases) | "chrono" (orthogonal + update-gate bias log U(1, T-1), T = mean training
    # length; models.init_recurrent)
    init: Init = "torch"
    # --- optimisation -----------------------------------------------------------------
    # "sgdr": SGD + momentum + warm restarts (paper) | "adamwr": AdamW + the same warm
    # restarts (Loshchilov & Hutter 2019) | "adam": Adam at a constant rate
    optimizer: Optimizer = "sgdr"
    lr: float = 0.05
    momentum: float = 0.9  # SGD only
    weight_decay: float = 0.0  # L2 in the gradient (sgdr, adam); decoupled decay (adamwr)
    restart_epochs: int = 10  # SGDR T_0 (epochs until the first restart)
    restart_mult: int = 2  # SGDR T_mult (each cycle this many times longer)
    batch_size: int = 128
    # text: sort each pool of this many random batches by length, so a batch pads to near
    # its own length (batch order stays random); 0 = plain random batches
    bucket: int = 0
    # memory bound: a batch of more padded steps (sequences x longest length) than this is
    # run as pieces whose gradients add up to the batch's (data.micro_batches), in training
    # and evaluation alike; 0 = no bound. Peak memory grows with it (metrics.json)
    max_tokens: int = 0
    max_epochs: int = 200
    patience: int = 50  # early stopping on validation accuracy (paper: 50 epochs; 0 = off)
    clip: float = 1.0  # max gradient norm (0 = off; the sources mention no clipping)
    # what one norm covers: "global" (every parameter, torch's clip_grad_norm_) | "groups"
    # (the classifier path, i.e. main GRU, embedding and head, apart from the decoders,
    # each clipped at `clip`), so large decoder gradients cannot shrink the classifier's step
    clip_scope: Literal["global", "groups"] = "global"
    # on a CUDA device, each piece's forward and backward replay as CUDA graphs, one per
    # input shape (psrnn.studies.private_shared.epoch.GraphedPieces): the same kernels with one launch,
    # so the same
    # numbers (checked on an H200: results/bench/graphs); False = eager launches. No effect
    # on a CPU
    cuda_graphs: bool = True
    # --- bookkeeping ------------------------------------------------------------------
    seed: int = 0
    device: str = "auto"  # "auto" (cuda if available) | "cpu" | "cuda" | "cuda:N" | "mps"
    capture_epochs: tuple[
        int, ...
    ] = ()  # record h_1..h_n after these many training epochs (Figure 3); 0 = at initialisation
    capture_samples: int = 1  # how many test sequences are recorded
    # "auto" (a bar on a terminal, plain lines otherwise) | "bar" | "plain"
    progress: Literal["auto", "bar", "plain"] = "auto"

    @property
    def shared_units(self) -> int:
        """r: the number of shared hidden units."""
        return int(round(self.shared * self.hidden))

    @property
    def has_aux(self) -> bool:
        return self.shared_units > 0 and len(self.tasks) > 0 and self.anchors > 0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def check_run(cfg: RunConfig) -> None:
    """Value checks for one run; each error names the key."""

    def bad(key: str, why: str) -> None:
        raise ConfigError(f"{key}={getattr(cfg, key)!r}: {why}")

    if cfg.dataset not in DATASETS:
        bad("dataset", f"unknown dataset, expected one of {', '.join(DATASETS)}")
    if not 0.0 <= cfg.shared <= 1.0:
        bad("shared", "must be in [0, 1]")
    if cfg.hidden < 1:
        bad("hidden", "must be >= 1")
    if cfg.shared > 0 and cfg.shared_units == 0 and cfg.tasks and cfg.anchors > 0:
        bad(
            "shared",
            f"x hidden {cfg.hidden} rounds to 0 shared units: tasks {list(cfg.tasks)} need at least 1",
        )
    if any(t not in TASKS for t in cfg.tasks):
        bad("tasks", f"each task must be one of {', '.join(TASKS)}")
    if cfg.anchors < 0:
        bad("anchors", "must be >= 0")
    if cfg.window < 1:
        bad("window", "must be >= 1")
    if cfg.sampling not in ("stratified", "uniform"):
        bad("sampling", "must be 'stratified' or 'uniform'")
    if cfg.decoder_input not in ("teacher", "estimate"):
        bad("decoder_input", "must be 'teacher' or 'estimate'")
    if cfg.head not in ("linear", "mlp"):
        bad("head", "must be 'linear' or 'mlp'")
    if cfg.optimizer not in OPTIMIZERS:
        bad("optimizer", f"must be one of {', '.join(OPTIMIZERS)}")
    if cfg.init not in INITS:
        bad("init", f"must be one of {', '.join(INITS)}")
    for key in ("lr", "batch_size", "max_epochs", "restart_epochs", "restart_mult", "decoder_layers"):
        if getattr(cfg, key) <= 0:
            bad(key, "must be > 0")
    for key in ("patience", "clip", "weight_decay", "momentum", "aux_weight", "embedding", "capture_samples"):
        if getattr(cfg, key) < 0:
            bad(key, "must be >= 0")


def min_length(cfg: dict[str, Any], dataset: str) -> int:
    """The shortest sequence a dataset can hold under this config (for window checks)."""
    return REGISTRY[dataset].min_length(cfg["datasets"][dataset].get("prepare"))


def check_window(cfg: dict[str, Any], name: str, run: RunConfig, source: str) -> None:
    if not run.has_aux:
        return
    n = min_length(cfg, run.dataset)
    if not REGISTRY[run.dataset].short_texts and n - 2 * run.window < run.anchors:
        raise ConfigError(
            f"{source}: experiments.{name}.anchors/window: {run.anchors} anchor(s) need n - 2 x window >= "
            f"anchors, but window {run.window} leaves {max(n - 2 * run.window, 0)} of n = {n} steps"
        )
