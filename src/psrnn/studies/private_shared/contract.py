"""The first study's tiny runs, for the contract tests that check every study against the
engine (tests/test_study_contract.py, through Study.contract), and the small prepared
datasets the training tests build on (tests/test_training.py).

    case(folder)      # registry.Case: 3 epochs of an 8-unit GRU with two auxiliary tasks

The data is written straight in the prepared format (psrnn.studies.private_shared.data),
not through the fixtures job's archives and `prepare`: a run costs a second, not the
preparation's."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

from psrnn.registry import Case
from psrnn.studies.private_shared.data.store import seal
from psrnn.studies.private_shared.settings import RunConfig


def write_manifest(d: Path, **kw: Any) -> None:
    """manifest.json of `kw` and splits.sha256 over it and the split files in `d` (loading
    requires both)."""
    (d / "manifest.json").write_text(json.dumps(kw))
    seal(d)


def write_images(
    d: Path,
    sizes: tuple[int, int, int] = (48, 16, 16),
    T: int = 16,
    F: int = 1,
    classes: int = 3,
    seed: int = 0,
    marker: int = 0,
) -> Path:
    """uint8 (N, T, F) sequences of `sizes` (train, valid, test); with marker > 0 the class
    is written in the first `marker` steps and the rest is low noise (a long-range task when
    T is large), else the first feature carries it a little (learnable in a few epochs)."""
    d.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    for split, n in zip(("train", "valid", "test"), sizes):
        y = torch.randint(0, classes, (n,), generator=g)
        if marker:
            x = torch.randint(0, 32, (n, T, F), generator=g)
            x[:, :marker] = (255 * y // (classes - 1))[:, None, None]
        else:
            x = torch.randint(0, 256, (n, T, F), generator=g)
            x[:, :, 0] = (x[:, :, 0] // 2 + 60 * y[:, None]).clamp(max=255)  # learnable a little
        torch.save({"x": x.to(torch.uint8), "y": y}, d / f"{split}.pt")
    write_manifest(d, input="continuous", features=F, num_classes=classes, scale=255)
    return d


def small_cfg(data: Path, **kw: Any) -> RunConfig:
    """An 8-unit private/shared GRU with reconstruction and prediction windows on `data`,
    3 epochs of 3 batches; `kw` overrides any setting."""
    base: dict[str, Any] = dict(
        dataset="mnist",
        data_dir=str(data),
        hidden=8,
        shared=0.5,
        tasks=("rec", "pred"),
        anchors=2,
        window=3,
        batch_size=16,
        max_epochs=3,
        lr=0.1,
        progress="plain",
    )
    return RunConfig(**{**base, **kw})


def case(folder: Path) -> Case:
    """The contract tests' runs, on 16-step image sequences written under `folder`; Adam at
    lr 1e6 (clipped) explodes the loss without reaching inf."""
    run = small_cfg(write_images(folder / "data", T=16), max_epochs=3)
    return Case(
        run,
        dataclasses.replace(run, lr=0.2),
        "lr",
        dataclasses.replace(run, optimizer="adam", lr=1e6, clip=1.0),
        "max_epochs",
    )
