"""Datasets: sources, download, preparation, fixtures, and the prepared-data format.

The prepared format (what `prepare` writes and training reads), per dataset folder:

    manifest.json     counts, length statistics, alphabet, class balance, source md5s
    train.pt          torch.save'd dict, see below
    valid.pt
    test.pt
    splits.sha256     sha256 of each split file and of manifest.json, `sha256sum` format
                      (required: a folder of older psrnn, without it or its manifest line, is
                      refused with the `prepare` command that writes it)

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
A truncated or overwritten manifest or split file is a `UserError` naming the file and
the `prepare` command that rewrites it; so is a manifest value training cannot use, a split
not in the format above or not as the manifest describes it (dtype, steps, features,
labels, symbols, lengths, class balance), and a split file that is not the one `prepare`
wrote (its sha256 against splits.sha256): `checks` holds these checks.
"""

from __future__ import annotations

import json
import pickle
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from psrnn.errors import UserError
from psrnn.files import not_a_file
from psrnn.studies.private_shared.data.checks import (
    checksum_problem,
    class_balance_problem,
    manifest_problem,
    split_format_problem,
)

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


# keys training reads from every manifest (see the module docstring)
MANIFEST_KEYS = ("input", "features", "num_classes")
# what torch.load raises on a truncated or overwritten file (most truncations: OSError
# "[Errno 22] Invalid argument" or RuntimeError from the zip reader; an empty file: EOFError)
LOAD_ERRORS = (
    RuntimeError,
    OSError,
    EOFError,
    ValueError,
    KeyError,
    pickle.UnpicklingError,
    zipfile.BadZipFile,
)


def read_manifest(prepared_dir: str | Path) -> dict:
    """manifest.json of a prepared folder; a damaged one is a `UserError` naming it."""
    path = Path(prepared_dir) / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"prepared dataset not found: {path} (run `python -m psrnn prepare <dataset> --config ...` first)"
        )
    try:  # json itself, not files.read_json: the message names the dataset's re-prepare command
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise damaged(path, Path(prepared_dir).name, reason(err)) from None
    if not isinstance(manifest, dict):
        raise damaged(path, Path(prepared_dir).name, "not a JSON object")
    missing = [k for k in MANIFEST_KEYS if k not in manifest]
    if missing:
        raise damaged(path, manifest.get("dataset") or Path(prepared_dir).name, f"no {', '.join(missing)}")
    problem = manifest_problem(manifest)
    if problem:
        raise damaged(path, manifest.get("dataset") or Path(prepared_dir).name, problem)
    return manifest


def load_split(prepared_dir: str | Path, split: str) -> SequenceSplit:
    """Load one split written by `prepare` (see the module docstring for the format)."""
    manifest = read_manifest(prepared_dir)
    dataset = manifest.get("dataset") or Path(prepared_dir).name
    path = Path(prepared_dir) / f"{split}.pt"
    why = not_a_file(path)  # a folder or a device is named as one (never read: /dev/zero is endless)
    if why is not None and not why.startswith("not found"):
        raise UserError(f"prepared split {path} {why}: {rerun(dataset)}")
    if why is not None:
        raise FileNotFoundError(f"prepared split not found: {path}: {rerun(dataset)}")
    try:
        with warnings.catch_warnings():
            # a pickle of another protocol (a file prepare did not write) is refused below
            # in one line; torch's two-line warning about its protocol would come before it
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            d = torch.load(path, map_location="cpu", weights_only=True)
    except LOAD_ERRORS as err:
        raise damaged(path, dataset, reason(err)) from None
    count = manifest.get("counts", {}).get(split)
    problem = split_problem(d, count) or split_format_problem(d, manifest, split)
    if problem:
        raise damaged(path, dataset, problem)
    wrong = checksum_problem(Path(prepared_dir), split)
    if wrong:
        raise UserError(f"{wrong[0]} {wrong[1]}: {rerun(dataset)}")
    problem = class_balance_problem(d["y"], manifest, split)
    if problem:
        raise damaged(path, dataset, problem)
    return SequenceSplit(
        x=d["x"],
        y=d["y"],
        offsets=d.get("offsets"),
        categorical=manifest["input"] == "categorical",
        scale=float(manifest.get("scale", 1.0)),
    )


def split_problem(d: object, count: int | None) -> str | None:
    """What makes `d` not a prepared split (None: nothing); `count`: the manifest's size."""
    if not isinstance(d, dict) or not all(isinstance(d.get(k), torch.Tensor) for k in ("x", "y")):
        return "not a dict with tensors x and y"
    n = len(d["y"])
    if count is not None and n != count:
        return f"{n} sequences but manifest.json counts {count}"
    offsets = d.get("offsets")
    if offsets is not None and (len(offsets) != n + 1 or int(offsets[-1]) != len(d["x"])):
        return f"offsets do not index x ({len(offsets)} offsets, {len(d['x'])} symbols)"
    if offsets is None and len(d["x"]) != n:
        return f"{len(d['x'])} sequences in x but {n} labels"
    return None


def rerun(dataset: str) -> str:
    return f"re-run `python -m psrnn prepare {dataset} --config <suite.yaml>`"


def reason(err: BaseException) -> str:
    """One short line for an exception (torch's and pickle's messages run to paragraphs)."""
    text = str(err).strip().split("\n")[0].split(". ")[0][:120]
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def damaged(path: Path, dataset: str, why: str) -> UserError:
    return UserError(f"{path} is damaged ({why}): {rerun(dataset)}")


def batch_order(
    lengths: torch.Tensor, batch_size: int, bucket: int, generator: torch.Generator
) -> list[torch.Tensor]:
    """One epoch's batches of sequence indices, in a seeded random order.

    bucket 0: a random permutation cut into batches. bucket k > 0 (for text, where every
    batch is padded to its longest sequence): the permutation is cut into pools of k
    batches, each pool is sorted by length (stable) and cut into batches, and the batches
    of all pools are shuffled. A batch then holds sequences of similar length, so little
    of it is padding (IMDB at batch 128, pools of 50: mean padded length ~1.7K instead of
    ~6K steps; tests/test_bench.py), while each pool is still a random draw. Sequences of one
    length (images) have nothing to sort: bucket is then the same as 0. torch's samplers
    have no length-bucketing sampler, hence this one.
    """
    order = torch.randperm(len(lengths), generator=generator)  # (N,)
    if bucket <= 0 or len(lengths) == 0 or bool((lengths == lengths[0]).all()):
        return list(order.split(batch_size))
    batches = []
    for pool in order.split(batch_size * bucket):
        by_length = pool[torch.argsort(lengths[pool], stable=True)]
        batches.extend(by_length.split(batch_size))
    shuffle = torch.randperm(len(batches), generator=generator)
    return [batches[i] for i in shuffle.tolist()]


def micro_batches(lengths: torch.Tensor, max_tokens: int) -> list[torch.Tensor]:
    """Positions into a batch of sequences of `lengths` (B,), as pieces of at most
    `max_tokens` padded steps (sequences x the piece's longest length) each: a memory bound
    for long text. One piece, arange(B), when the batch fits or max_tokens is 0.

    A batch over the budget is sorted by length and cut greedily, so each piece pads
    little; a sequence longer than the budget alone is a piece of its own (a sequence is
    never cut). Training sums the pieces' gradients before one optimizer step, each piece's
    loss weighted by its share of the batch, with the anchors drawn for the whole batch: the
    step's loss and per-sequence losses are those of the whole batch.
    """
    count = len(lengths)
    if max_tokens <= 0 or count == 0 or count * int(lengths.max()) <= max_tokens:
        return [torch.arange(count)]
    ascending = torch.argsort(lengths, stable=True)
    pieces, start = [], 0
    for end, length in enumerate(lengths[ascending].tolist(), start=1):
        # piece [start, end) pads to `length`, its longest (lengths ascend)
        if end - start > 1 and (end - start) * length > max_tokens:
            pieces.append(ascending[start : end - 1])
            start = end - 1
    pieces.append(ascending[start:])
    return pieces
