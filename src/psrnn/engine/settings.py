"""What the engine may read of a study's run settings: `RunSettings`, and nothing more.

    python -m pytest tests/test_run_settings.py    # each study's settings hold it; the engine reads no other

A study's run settings are its own frozen dataclass (psrnn.registry.Study.run_config); the
engine (fit, train, group, checkpoint) reads only these members of it, so a study may name
the rest of its fields as it likes: a fused group's batch size or model family is its
study's Batched's to read (psrnn.engine.hooks.Batched). tests/test_run_settings.py checks
both sides: every registered study's settings satisfy the protocol, and the engine's
modules read no other attribute of a run's settings.

The engine's own functions that take a run's settings are typed with it (fit, group,
checkpoint, groups, restamp, train). The study hooks (psrnn.engine.hooks.Hooks) keep `Any`:
each study's hook takes its own settings class, which a RunSettings parameter in the base
would make an incompatible override.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class RunSettings(Protocol):
    seed: int  # the run's seed: data order, initialisation, every generator
    lr: float  # the learning rate (the engine's log lines and the grid's usual knob)
    device: str  # "auto", "cpu", "cuda", "cuda:1", ...: where the run trains
    progress: str  # how it shows progress within an epoch: "auto", "bar" or "plain"
    dataset: str  # the dataset the run trains on (its data folder, the log header)

    def to_dict(self) -> dict[str, Any]: ...
