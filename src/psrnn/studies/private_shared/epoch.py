"""One training epoch and one evaluation: the step mechanics of every run.

    python -m psrnn train --config config/small.yaml --experiment mnist_gru --seed 0

A step draws the batch's anchors, runs the batch in pieces under max_tokens
(data.micro_batches) whose gradients add up to the batch's, clips the gradients (norm in
float64; over all parameters, or the classifier path and the decoders apart) and steps
the optimizer and the warm-restart schedule; a step's loss and gradient
norm are checked for NaN/inf one step later, so the host never waits for the device.
Evaluation draws its anchors from a fixed-seed generator, so auxiliary losses are
comparable across epochs and runs. psrnn.engine.train calls these once per epoch; the
benchmark (psrnn.bench.measure) times them as they are. `model` is a PSRNN or a stand-in
with its interface (forward(x, lengths, anchors) -> (logits, aux loss or None), has_aux):
the benchmark's NaivePSRNN and Autocast.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from psrnn.engine.checkpoint import Generators
from psrnn.engine.fit import HEARTBEAT_S
from psrnn.engine.hooks import StepHook
from psrnn.engine.runlog import heartbeat_line
from psrnn.errors import TrainingDiverged
from psrnn.studies.private_shared import settings as S
from psrnn.studies.private_shared.data import SequenceSplit, batch_order, micro_batches
from psrnn.studies.private_shared.models import PSRNN, hidden_states, sample_anchors

EVAL_ANCHOR_SEED = 1234  # same evaluation anchors every epoch and every run


def draw_anchors(
    model: nn.Module, cfg: S.RunConfig, lengths: torch.Tensor, gen: torch.Generator
) -> torch.Tensor | None:
    if not model.has_aux:
        return None  # no draw: a baseline consumes no anchor randomness
    return sample_anchors(lengths, cfg.anchors, cfg.window, cfg.sampling, gen)


def clip_groups(model: nn.Module, scope: str) -> list[list[torch.Tensor]]:
    """The parameter groups whose gradient norms are clipped apart (RunConfig.clip_scope):
    "global" one group; "groups" the classifier path (embedding, main GRU, head) and the
    auxiliary decoders (any parameter under a `decoders` module, also inside a wrapper)."""
    params: list[tuple[str, torch.Tensor]] = list(model.named_parameters())
    if scope == "global":
        return [[p for _, p in params]]
    aux = [p for name, p in params if ".decoders." in f".{name}"]
    main = [p for name, p in params if ".decoders." not in f".{name}"]
    return [group for group in (main, aux) if group]


def clip_by_group(groups: list[list[torch.Tensor]], max_norm: float) -> torch.Tensor:
    """clip_gradients on each group apart; returns the norm over all of them (before
    clipping), which the finite check and the logs read."""
    norms = [clip_gradients(group, max_norm) for group in groups]
    return norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms))


def clip_gradients(params, max_norm: float) -> torch.Tensor:
    """Global gradient L2 norm (0-dim, on the device); with max_norm > 0, gradients are
    scaled so their norm is at most max_norm.

    Unlike torch.nn.utils.clip_grad_norm_, the norm is accumulated in float64: exploding
    RNN gradients can exceed float32's range when squared (~1e19) while every gradient is
    still finite, and such a step must be clipped, not reported as non-finite. The norm is
    inf/nan only when a gradient itself is.
    """
    params = list(params)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:  # a group that no loss reached (decoders of a run without anchors)
        return torch.zeros((), dtype=torch.float64, device=params[0].device if params else None)
    # one foreach kernel per step on the GPU, not one norm and one multiply per parameter
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2, dtype=torch.float64)))
    if max_norm > 0:
        scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)  # no sync: stays on the device
        torch._foreach_mul_(grads, scale.to(grads[0].dtype))
    return norm


def train_epoch(
    model: nn.Module,
    split: SequenceSplit,
    cfg: S.RunConfig,
    opt,
    sched,
    gens: Generators,
    device: torch.device,
    epoch: int,
    on_step: StepHook | None = None,
    bar: bool = False,
    heartbeat: Callable[[str], None] | None = None,
    heartbeat_s: float = HEARTBEAT_S,
) -> dict[str, float]:
    """One pass over `split` in a seeded random order; returns the epoch's mean losses.

    heartbeat: receives a heartbeat_line() at the first step at least heartbeat_s seconds
    after the previous line (or the epoch's start). Raises TrainingDiverged at the first
    non-finite loss or gradient norm.
    """
    model.train()
    n = len(split)
    all_lengths = split.lengths  # (N,), computed once: text's come from its offsets
    batches = batch_order(all_lengths, cfg.batch_size, cfg.bucket, gens.shuffle)
    lr = opt.param_groups[0]["lr"]
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # CE sum, aux sum, correct
    steps = range(len(batches))
    if bar:
        from tqdm import tqdm

        steps = tqdm(steps, desc=f"epoch {epoch}", leave=False, dynamic_ncols=True)
    start = last_beat = time.monotonic()
    pending = None  # the previous step's (step, loss, gradient norm), checked a step late
    groups = clip_groups(model, cfg.clip_scope)
    losses = piece_losses(model, cfg, device)
    for step in steps:
        opt.zero_grad(set_to_none=True)
        batch = batches[step]
        lengths = all_lengths[batch]
        anchors = draw_anchors(model, cfg, lengths, gens.draws)  # (B, m) | None
        loss = torch.zeros((), device=device)
        for piece in micro_batches(lengths, cfg.max_tokens):
            # each piece's mean losses weighted by its share: the batch mean, as one piece
            piece_loss, piece_sums = piece_backward(
                losses, piece_inputs(split, batch, piece, anchors, device), len(piece) / len(batch)
            )
            loss = loss + piece_loss
            sums += piece_sums
        gnorm = clip_by_group(groups, cfg.clip)
        if pending is not None:
            check_finite(*pending, len(batches), epoch, cfg)
        pending = (step, loss, gnorm)
        opt.step()
        if sched is not None:
            sched.step(epoch - 1 + (step + 1) / len(batches))
        if on_step is not None:
            on_step(epoch, step + 1, model)
        if heartbeat is not None:
            # the finite check's sync keeps the host within two steps of the device
            now = time.monotonic()
            if now - last_beat >= heartbeat_s:
                heartbeat(heartbeat_line(epoch, cfg.max_epochs, step + 1, len(batches), now - start))
                last_beat = now
    if pending is not None:
        check_finite(*pending, len(batches), epoch, cfg)
    ce_sum, aux_sum, correct = sums.tolist()
    return {"lr": lr, "train_main_loss": ce_sum / n, "train_aux_loss": aux_sum / n, "train_acc": correct / n}


def piece_backward(
    losses: Callable[..., tuple], inputs: tuple[torch.Tensor, ...], share: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backward of one piece's loss x share (its part of the batch); returns that loss and
    (CE, aux, correct) sums over the piece, detached. Nothing of the autograd graph
    outlives the call: a CUDA graph captured at the next piece must find no node of this
    one alive (make_graphed_callables fails on an AccumulateGrad node of the default
    stream)."""
    total, ce, aux_mean, correct = losses(*inputs)
    if share != 1.0:
        total = total * share
    total.backward()
    b = len(inputs[0])
    # detached: a graphed node's outputs all require grad, and the sums live all epoch
    sums = torch.stack([ce.detach() * b, aux_mean.detach() * b, correct]).to(torch.float64)
    return total.detach(), sums


class PieceLoss(nn.Module):
    """One piece's training loss: (CE + aux_weight x mean auxiliary loss, which backward
    differentiates; CE, mean auxiliary loss and correct count, detached). A module, so
    torch.cuda.make_graphed_callables differentiates the model's parameters too."""

    def __init__(self, model: nn.Module, aux_weight: float):
        super().__init__()
        self.model = model
        self.aux_weight = aux_weight

    def forward(
        self, x: torch.Tensor, lengths: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        logits, aux = self.model(x, lengths, anchors)
        ce = F.cross_entropy(logits, y)
        aux_mean = aux.mean() if aux is not None else torch.zeros((), device=ce.device)
        total = ce + self.aux_weight * aux_mean
        return total, ce.detach(), aux_mean.detach(), (logits.argmax(-1) == y).sum()


class GraphedPieces:
    """PieceLoss whose forward and backward replay as CUDA graphs (RunConfig.cuda_graphs).

    A graph holds fixed shapes, so there is one per input shape, captured by
    torch.cuda.make_graphed_callables the second time a shape comes (the first runs eager:
    a shape that never comes back, as most padded text batches, costs no capture), at most
    `limit` of them (each holds its own activations); any other shape runs eager. Capture
    warms up on the batch at hand with torch.autograd.grad, which leaves the parameters and
    their gradients alone, so the run trains the same steps it would eager. The optimizer,
    clipping and the schedule stay eager: a graph would freeze the learning rate SGDR moves
    every step. Unused parameters (decoders of a batch without anchors) keep no gradient,
    as eager.
    """

    def __init__(self, model: nn.Module, aux_weight: float, limit: int = 4, graph=None):
        self.model, self.aux_weight, self.limit = model, aux_weight, limit
        self.eager = PieceLoss(model, aux_weight)
        self.graph = graph if graph is not None else torch.cuda.make_graphed_callables
        self.seen: dict[tuple, int] = {}
        self.graphs: dict[tuple, Callable[..., Any]] = {}

    def __call__(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if not self.model.training:
            return self.eager(*args)
        key = tuple((tuple(t.shape), t.dtype) for t in args)
        graphed = self.graphs.get(key)
        if graphed is None:
            self.seen[key] = self.seen.get(key, 0) + 1
            if self.seen[key] < 2 or len(self.graphs) >= self.limit:
                return self.eager(*args)
            # make_graphed_callables replaces a module's forward: one PieceLoss per shape
            graphed = self.graphs[key] = cast(Callable[..., Any], self.graph)(
                PieceLoss(self.model, self.aux_weight), args, allow_unused_input=True
            )
        return graphed(*args)


def piece_losses(model: nn.Module, cfg: S.RunConfig, device: torch.device) -> Callable[..., tuple]:
    """What computes a piece's losses (PieceLoss's outputs): its CUDA graphs when
    cfg.cuda_graphs on a CUDA device, kept on the model from epoch to epoch (the optimizer
    updates the parameters the graphs read in place; they go with the model); else
    PieceLoss, eager."""
    if not (cfg.cuda_graphs and device.type == "cuda"):
        return PieceLoss(model, cfg.aux_weight)
    graphed = model.__dict__.get("_graphed_pieces")
    if graphed is None or graphed.aux_weight != cfg.aux_weight:
        graphed = model.__dict__["_graphed_pieces"] = GraphedPieces(model, cfg.aux_weight)
    return graphed


def piece_inputs(
    split: SequenceSplit,
    batch: torch.Tensor,
    piece: torch.Tensor,
    anchors: torch.Tensor | None,
    device: torch.device,
) -> tuple[torch.Tensor, ...]:
    """PieceLoss's inputs (x, lengths, y[, anchors]) on `device`: the sequences at positions
    `piece` of `batch` (data.micro_batches), with their rows of the batch's anchors."""
    whole = len(piece) == len(batch)  # one piece: the batch as drawn, in its order
    x, lengths, y = split.batch(batch if whole else batch[piece])
    if anchors is None:
        return to_device(device, x, lengths, y)
    return to_device(device, x, lengths, y, anchors if whole else anchors[piece])


def piece_forward(
    model: nn.Module,
    split: SequenceSplit,
    batch: torch.Tensor,
    piece: torch.Tensor,
    anchors: torch.Tensor | None,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(logits (b, C), aux loss per sequence (b,) or None, labels (b,)) of the sequences at
    positions `piece` of `batch` (piece_inputs)."""
    x, lengths, y, *rest = piece_inputs(split, batch, piece, anchors, device)
    logits, aux = model(x, lengths, rest[0] if rest else None)
    return logits, aux, y


def to_device(device: torch.device, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A batch's tensors on `device`. non_blocking: a plain copy to a GPU waits for all
    the work queued before it, so a step would stall at every one."""
    return tuple(t.to(device, non_blocking=True) for t in tensors)


def check_finite(
    step: int, loss: torch.Tensor, gnorm: torch.Tensor, steps: int, epoch: int, cfg: S.RunConfig
) -> None:
    """Raise TrainingDiverged when a step's loss or gradient norm is not finite.

    Called for step s while step s + 1 is queued, so the host waits for step s only and the
    GPU is never idle for it: a step's non-finite update is applied, and the run stops one
    step later (nothing of it is saved: the last checkpoint is from the epoch before).
    """
    if bool(torch.isfinite(loss) & torch.isfinite(gnorm)):  # the step's one sync
        return
    what = "loss" if not torch.isfinite(loss) else "gradient norm"
    value = float(loss if what == "loss" else gnorm)
    hint = "lower lr" + (" or set clip > 0" if cfg.clip <= 0 else "")
    raise TrainingDiverged(
        f"non-finite {what} ({value}) at epoch {epoch}, step {step + 1} of {steps}; {hint}"
    )


@torch.no_grad()
def evaluate(
    model: nn.Module, split: SequenceSplit, cfg: S.RunConfig, device: torch.device
) -> dict[str, float]:
    """Accuracy and per-sample mean losses on a split, anchors from a fixed-seed generator."""
    model.eval()
    gen = torch.Generator().manual_seed(EVAL_ANCHOR_SEED)
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # CE sum, aux sum, correct
    # by length: metrics do not depend on the order, and ragged text pads least this way
    ragged = split.offsets is not None
    all_lengths = split.lengths  # (N,)
    order = torch.argsort(all_lengths, stable=True) if ragged else torch.arange(len(split))
    for batch in order.split(cfg.batch_size):
        lengths = all_lengths[batch]
        anchors = draw_anchors(model, cfg, lengths, gen)
        for piece in micro_batches(lengths, cfg.max_tokens):
            logits, aux, y = piece_forward(model, split, batch, piece, anchors, device)
            ce = F.cross_entropy(logits, y, reduction="sum")
            aux_sum = aux.sum() if aux is not None else torch.zeros((), device=device)
            sums += torch.stack([ce, aux_sum, (logits.argmax(-1) == y).sum()]).to(torch.float64)
    ce_sum, aux_sum, correct = sums.tolist()
    n = max(len(split), 1)
    return {"main_loss": ce_sum / n, "aux_loss": aux_sum / n, "acc": correct / n}


def capture(model: PSRNN, split: SequenceSplit, count: int, device: torch.device) -> torch.Tensor:
    """float32 (S, T, d) states of the first `count` sequences of `split`, on the CPU."""
    x, lengths, _ = split.batch(torch.arange(min(count, len(split))))
    model.eval()
    return hidden_states(model, x.to(device), lengths).float().cpu()
