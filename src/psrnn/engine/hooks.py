"""What a study gives the engine: its `Hooks` (the science the engine calls, one subclass
per study, named by the study's row in psrnn.registry), what one training epoch is told
(`Epoch`) and, for a study that batches runs, its `Batched` members. psrnn.engine.fit
trains any study's run with them.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from psrnn import registry
from psrnn.engine.checkpoint import Generators, RunState

StepHook = Callable[[int, int, nn.Module], None]  # (epoch, step, model), after each optimizer step
ENGINE_COLUMNS = ("epoch",)  # history.csv columns a study must keep: the engine reads them back on resume


@dataclass(frozen=True)
class Epoch:
    """What one training epoch is told besides the model and data."""

    number: int
    on_step: StepHook | None  # called after every optimizer step (tests interrupt runs with it)
    bar: bool  # a progress bar shows the steps
    beat: Callable[[str], None] | None  # where heartbeat lines go (None under the bar)
    heartbeat_s: float


class Hooks(abc.ABC):
    """A study's science as the engine calls it: one subclass per study, which the study's
    row names ("module:Class"; psrnn.studies.private_shared.hooks.PrivateSharedHooks,
    psrnn.studies.relreg.hooks.RelRegHooks). mypy checks a subclass's hooks against these
    signatures; a hook it lacks is named when the study loads (hooks_of).

    Data `data(run)` returns has `train` (len = training samples per epoch) and `identity`
    (a string naming prepared data, checked on resume; None for data the settings
    determine). `train_epoch` returns the epoch's history columns (LOSS_COLUMN among
    them), `evaluate` the validation numbers, `valid_row` their history columns, `score`
    the selection score, `finish` (best model loaded) the study's metrics, writing its
    own files into the run folder. `capture` and `may_stop` have the defaults most studies
    keep: nothing kept per epoch, early stopping after any epoch.
    """

    HISTORY_COLUMNS: tuple[str, ...]
    LOSS_COLUMN: str
    METRIC_KEYS: frozenset[str]

    # `run` stays Any, not psrnn.engine.settings.RunSettings: each study's hook takes its own
    # settings class, and a parameter narrower than the base's is an incompatible override
    # (mypy: 21 errors across both studies' hooks when tried)
    @abc.abstractmethod
    def data(self, run: Any) -> Any: ...
    @abc.abstractmethod
    def build(self, run: Any, data: Any) -> nn.Module: ...
    @abc.abstractmethod
    def optimizer(self, run: Any, model: nn.Module) -> tuple[torch.optim.Optimizer, Any]: ...
    @abc.abstractmethod
    def limits(self, run: Any) -> tuple[int, int]: ...  # (max epochs, patience; 0 = none)
    @abc.abstractmethod
    def first_loss(self, data: Any) -> tuple[float, str]: ...  # (loss at init, e.g. "ln 10")
    @abc.abstractmethod
    def header(self, out_dir: Path, device: Any, model: Any, data: Any, run: Any, resumed: Any) -> str: ...
    @abc.abstractmethod
    def train_epoch(
        self, model: Any, data: Any, run: Any, opt: Any, sched: Any, gens: Any, device: Any, e: Epoch
    ) -> dict[str, float]: ...
    @abc.abstractmethod
    def evaluate(self, model: Any, data: Any, run: Any, device: Any) -> dict[str, Any]: ...
    @abc.abstractmethod
    def valid_row(self, valid: dict[str, Any]) -> dict[str, float]: ...
    @abc.abstractmethod
    def score(self, valid: dict[str, Any]) -> tuple[float, ...]: ...
    @abc.abstractmethod
    def epoch_line(self, row: dict[str, Any], run: Any, st: RunState) -> str: ...
    @abc.abstractmethod
    def finish(
        self, model: Any, data: Any, run: Any, st: RunState, device: Any, out_dir: Path
    ) -> dict[str, Any]: ...

    def capture(self, model: Any, data: Any, run: Any, device: Any, epoch: int, valid: Any) -> Any:
        """Arrays to keep of this epoch in the checkpoint (st.captures); None: nothing."""
        return None

    def may_stop(self, run: Any, epoch: int) -> bool:
        """Whether early stopping may end the run after `epoch` (default: after any)."""
        return True

    def data_identity(self, run: Any) -> str | None:
        """The identity `data(run)` would have, without loading the data (a finished run
        is returned only on the data it records); None where the settings determine the
        data, or none can be read now (default: None)."""
        return None


class Batched(abc.ABC):
    """Members (runs) trained as one model, each kept as its own: the engine's epoch loop
    (psrnn.engine.fit.train_members) steps every run through it. A study that batches runs
    subclasses it in its `fused` module (psrnn.registry; psrnn.studies.relreg.fused); a run
    alone is psrnn.engine.fit.Alone, its one member.

    `runs` are the members' settings, `models` their own models (built under their seeds,
    restored from their checkpoints), `opts` their optimizers or the states the study keeps
    of them (None: no step is taken). The batch reads whatever of the settings it needs
    itself: the engine knows only seed, lr, device, progress and dataset
    (psrnn.engine.settings.RunSettings).
    """

    # True: a member's random draws (its global RNG state as a run alone has it) come from
    # the generator train_epoch is given per member; False: from the process's generators
    # (a run alone: the engine then keeps no RNG state of its own for it)
    OWN_RNG: ClassVar[bool] = True

    @abc.abstractmethod
    def __init__(self, runs: list[Any], models: list[nn.Module], opts: list[Any] | None = None): ...

    @abc.abstractmethod
    def train_epoch(
        self, data: Any, epoch: int, gens: list[Generators], rngs: list[torch.Generator]
    ) -> dict[str, Any]:
        """One epoch of every member: history column -> one value per member (a sequence or
        a 1-d tensor), LOSS_COLUMN among them; a non-finite loss marks a failed member.
        `gens`: each member's Generators (its data order), `rngs`: each member's generator
        for the draws a run alone takes from torch's global one (see OWN_RNG)."""

    @abc.abstractmethod
    def validate(self, data: Any) -> list[dict[str, Any]]:
        """Every member on the validation data, each as the study's Hooks.evaluate gives it."""

    @abc.abstractmethod
    def write_back(self, r: int, model: nn.Module, opt: Any) -> None:
        """Member r's current weights into its own model and its optimizer state into its
        own optimizer (its checkpoints and its best epoch are taken from them)."""

    @abc.abstractmethod
    def keep(self, rows: list[int]) -> None:
        """Go on with members `rows` only (the others stopped or failed)."""

    def failure(self, r: int) -> str | None:
        """Why member r's last epoch failed, in the study's words (None: the engine's)."""
        return None


@functools.cache
def _hooks(ref: str, name: str) -> Hooks:
    cls = registry.load(ref)
    if not (isinstance(cls, type) and issubclass(cls, Hooks)):
        raise TypeError(f"study {name}: {ref} is not a subclass of psrnn.engine.hooks.Hooks")
    lacks = sorted(getattr(cls, "__abstractmethods__", ())) + [
        n for n in ("HISTORY_COLUMNS", "LOSS_COLUMN", "METRIC_KEYS") if not hasattr(cls, n)
    ]
    if lacks:
        raise TypeError(f"study {name}: {ref} lacks {', '.join(sorted(lacks))} (psrnn.engine.hooks.Hooks)")
    missing = [c for c in ENGINE_COLUMNS if c not in cls.HISTORY_COLUMNS]
    if missing:
        raise TypeError(f"study {name}: {ref} lacks {', '.join(missing)} (history.csv)")
    return cls()


def hooks_of(study: registry.Study) -> Hooks:
    """The study's hooks (one instance per study); a hook or history column it lacks is
    named here, not mid-run."""
    return _hooks(study.hooks, study.name)
