"""Datasets: sources, download, preparation, fixtures, and the prepared-data format.

The prepared format (what `prepare` writes and training reads), per dataset folder:

    manifest.json     counts, length statistics, alphabet, class balance, source md5s
    train.pt          torch.save'd dict, see below
    valid.pt
    test.pt

Each split file is a dict of tensors:
    images (mnist, fmnist, cifar10):  x uint8 (N, T, F) raw 8-bit values, y int64 (N,)
    text   (imdb, dbpedia):           x uint8 (L,) all sequences' symbol indices concatenated,
                                      offsets int64 (N + 1,) so sequence i is x[offsets[i]:offsets[i+1]],
                                      y int64 (N,)
Text is stored ragged and as indices, never as dense one-hot (50K IMDB reviews: ~65 MB
instead of ~17 GB of float one-hot); the model expands indices on the fly.

`manifest.json` keys used by training: "input" ("continuous" | "categorical"),
"features" (values per step, or alphabet size for categorical), "num_classes",
"scale" (continuous: x / scale gives the model's input, 255 for 8-bit images).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from psrnn.files import read_json

SPLITS = ("train", "valid", "test")


@dataclass
class SequenceSplit:
    """One prepared split, in memory; `batch` pads and scales on the fly."""

    x: torch.Tensor  # uint8 (N, T, F) or (L,) ragged
    y: torch.Tensor  # int64 (N,)
    offsets: torch.Tensor | None  # int64 (N + 1,) for ragged text, else None
    categorical: bool
    scale: float = 1.0

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def lengths(self) -> torch.Tensor:
        """int64 (N,): steps per sequence."""
        if self.offsets is None:
            return torch.full((len(self),), self.x.shape[1], dtype=torch.int64)
        return self.offsets[1:] - self.offsets[:-1]

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(x, lengths, y) for the sequences `idx`.

        x: float32 (B, T, F) scaled to [0, 1] for continuous data; int64 (B, T) symbol
        indices for categorical data, padded with 0 after each sequence's length.
        """
        y = self.y[idx]
        if self.offsets is None:
            x = self.x[idx].float() / self.scale
            return x, torch.full((len(idx),), x.shape[1], dtype=torch.int64), y
        starts, ends = self.offsets[idx], self.offsets[idx + 1]
        lengths = ends - starts
        t = int(lengths.max()) if len(idx) else 0
        steps = torch.arange(t)
        mask = steps[None, :] < lengths[:, None]  # (B, T)
        pos = (starts[:, None] + steps[None, :]).clamp(max=max(len(self.x) - 1, 0))
        x = torch.where(mask, self.x[pos].long(), torch.zeros((), dtype=torch.long))
        return x, lengths, y


def read_manifest(prepared_dir: str | Path) -> dict:
    path = Path(prepared_dir) / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(f"prepared dataset not found: {path} "
                                f"(run `python -m psrnn prepare <dataset> --config ...` first)")
    return read_json(path)


def load_split(prepared_dir: str | Path, split: str) -> SequenceSplit:
    """Load one split written by `prepare` (see the module docstring for the format)."""
    manifest = read_manifest(prepared_dir)
    path = Path(prepared_dir) / f"{split}.pt"
    if not path.is_file():
        raise FileNotFoundError(f"prepared split not found: {path}")
    d = torch.load(path, map_location="cpu", weights_only=True)
    return SequenceSplit(
        x=d["x"], y=d["y"], offsets=d.get("offsets"),
        categorical=manifest["input"] == "categorical",
        scale=float(manifest.get("scale", 1.0)),
    )
