"""Real digits for development: `python -m psrnn digits`.

    python -m psrnn digits ../shared/data/mnist-test data/recipe/raw/mnist --train 8000

A single pair of IDX files (e.g. the official MNIST test set: t10k-images-idx3-ubyte.gz,
t10k-labels-idx1-ubyte.gz, 10,000 digits) is cut into the four files `prepare mnist`
reads: the first `train` digits become train-*-idx*-ubyte.gz, the rest t10k-*. `prepare`
then moves its `valid_size` of the "train" digits to validation as usual. The recipe study
(`python -m psrnn recipe`), its regression test and the one-GPU check of config/quick.yaml
use it to train on real digits where the full 70,000 cannot be downloaded.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from torchvision.datasets.mnist import read_image_file, read_label_file

from psrnn.errors import UserError
from psrnn.files import write_bytes
from psrnn.studies.private_shared.data.fixtures import gzip_bytes, idx_bytes
from psrnn.studies.private_shared.data.readers import IDX_FILES, _read_idx_file

SOURCE_FILES = IDX_FILES["test"]  # the pair looked for in the source folder


def read_pair(src_dir: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(images uint8 (N, H, W), labels uint8 (N,)) of the source folder's IDX pair."""
    images, labels = (Path(src_dir) / name for name in SOURCE_FILES)
    for path in (images, labels):
        if not path.is_file():
            raise UserError(
                f"{path}: not found (the digits folder holds an IDX pair named "
                f"{SOURCE_FILES[0]} and {SOURCE_FILES[1]})"
            )
    with tempfile.TemporaryDirectory(prefix="psrnn-digits-") as tmp:
        x = _read_idx_file(images, tmp, read_image_file)  # (N, H, W)
        y = _read_idx_file(labels, tmp, read_label_file)  # (N,)
    if len(x) != len(y):
        raise UserError(f"{images}: {len(x)} images but {labels.name} has {len(y)} labels")
    if len(y) and int(y.max()) > 9:
        bad = int((y > 9).nonzero()[0, 0])
        raise UserError(f"{labels}: label {int(y[bad])} at position {bad} is not a digit (0-9)")
    return x, y


def split_digits(
    src_dir: str | Path, out_dir: str | Path, train: int, what: str = "--train"
) -> dict[str, int]:
    """Write the four upstream-named files into out_dir; returns {"train": n, "test": n}.

    Each file is written whole or not at all (files.write_bytes); the order of the digits
    is kept, so the same source and `train` always give the same files (byte-identical:
    gzip_bytes writes no timestamp).
    """
    if Path(out_dir).resolve() == Path(src_dir).resolve():
        raise UserError(f"{out_dir}: the output folder is the source folder; its digits would be overwritten")
    x, y = read_pair(src_dir)
    if not 0 < train < len(y):
        raise UserError(
            f"{what} {train}: must be between 1 and {len(y) - 1} ({src_dir} holds {len(y)} digits)"
        )
    out = Path(out_dir)
    counts = {}
    for split, part in (("train", slice(0, train)), ("test", slice(train, None))):
        images, labels = IDX_FILES[split]
        write_bytes(out / images, gzip_bytes(idx_bytes(x[part].numpy())))
        write_bytes(out / labels, gzip_bytes(idx_bytes(y[part].numpy())))
        counts[split] = len(y[part])
    return counts


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", help=f"folder with {SOURCE_FILES[0]} and {SOURCE_FILES[1]}")
    p.add_argument("out", help="folder to write the four upstream-named files into")
    p.add_argument("--train", type=int, default=8000, help="digits in the 'train' files (default 8000)")


def run(args: argparse.Namespace) -> int:
    counts = split_digits(args.src, args.out, args.train)
    print(f"digits: train {counts['train']}, test {counts['test']} -> {args.out}")
    return 0
