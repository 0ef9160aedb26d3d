"""Readers of the upstream archive formats: raw folder -> labelled images or texts.

    python -m psrnn prepare cifar10 --config config/paper.yaml   # calls these

Each reader returns a `RawData` (official train and test sets, class names) and raises
`UserError` naming the archive (and the member or line) when a file is missing,
truncated or not in the expected format. `read_raw` runs one and then checks, for every
dataset alike, that each class has examples in both official sets: an archive that lost
a folder or a batch must not prepare into a one-class split. Archives are read under the
bounds of `limits.py` (decompressed sizes, regular members only, pickle lengths), so a
damaged or hostile one stops with one line too. Nothing here splits, filters or encodes;
that is `prepare.py`.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import pickle
import re
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from torchvision.datasets import FashionMNIST
from torchvision.datasets.mnist import read_image_file, read_label_file

from psrnn.errors import UserError
from psrnn.studies.private_shared.data.limits import (
    CSV_FIELD_CHARS,
    NOT_OFFICIAL,
    TarArchive,
    check_pickle,
    gunzip,
)

# What a damaged gzip / tar archive raises while it is being read.
ARCHIVE_ERRORS = (
    tarfile.TarError,
    EOFError,
    zlib.error,
    gzip.BadGzipFile,
    OSError,
    pickle.UnpicklingError,
    UnicodeDecodeError,
    ValueError,
    KeyError,
    TypeError,
    AssertionError,
    RuntimeError,
)


@dataclass
class RawSplit:
    """An official split in upstream order (images) or a canonical order (texts)."""

    x: Any  # images: uint8 tensor (N, H, W, C); texts: list[str]
    y: torch.Tensor  # int64 (N,)
    ids: list[str] | None = None  # texts: where each came from (archive member / csv line)
    source: str = ""  # the file (and members) it was read from, for messages

    def __len__(self) -> int:
        return int(self.y.shape[0])


@dataclass
class RawData:
    train: RawSplit
    test: RawSplit
    classes: list[str]


def need(path: Path) -> Path:
    if not path.is_file():
        raise FileNotFoundError(
            f"raw file not found: {path} (run `python -m psrnn download <dataset> ...` first)"
        )
    return path


def damaged(path: Path, err: BaseException, what: str = "") -> UserError:
    where = f"{path}: {what}: " if what else f"{path}: "
    return UserError(f"{where}corrupt or truncated archive ({type(err).__name__}: {err})")


# --- MNIST, Fashion-MNIST: four gzipped IDX files ----------------------------------------

IDX_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


IDX_SIZE = (28, 28)  # MNIST and Fashion-MNIST alike: 784 steps, as the manifest records


def read_idx(raw_dir: str | Path, classes: list[str]) -> RawData:
    """The four IDX files -> images uint8 (N, 28, 28, 1), labels int64 (N,).

    Images of another size are refused: both official sets are 28 x 28, and a split read at
    another size would prepare into other step counts than the manifest's one."""
    raw_dir = Path(raw_dir)
    paths = {name: need(raw_dir / name) for pair in IDX_FILES.values() for name in pair}
    splits = {}
    # torchvision's IDX readers take an uncompressed path: gunzip (bounded, limits.py)
    # into a scratch folder
    with tempfile.TemporaryDirectory(prefix="psrnn-idx-") as tmp:
        for split, (images, labels) in IDX_FILES.items():
            x = _read_idx_file(paths[images], tmp, read_image_file)  # (N, H, W)
            if tuple(x.shape[1:]) != IDX_SIZE:
                raise UserError(
                    f"{paths[images]}: images of {' x '.join(map(str, x.shape[1:]))} pixels; "
                    f"MNIST and Fashion-MNIST images are 28 x 28; {NOT_OFFICIAL}"
                )
            y = _read_idx_file(paths[labels], tmp, read_label_file)  # (N,)
            if len(x) != len(y):
                raise UserError(
                    f"{paths[images]}: {len(x)} images but {paths[labels].name} has {len(y)} labels"
                )
            if len(y) and (int(y.min()) < 0 or int(y.max()) >= len(classes)):
                raise UserError(f"{paths[labels]}: labels outside 0..{len(classes) - 1}")
            splits[split] = RawSplit(
                x.unsqueeze(-1).contiguous(),
                y.long(),  # (N, H, W, 1)
                source=str(paths[labels]),
            )
    return RawData(splits["train"], splits["test"], classes)


def _read_idx_file(path: Path, tmp: str, reader: Callable[[str], torch.Tensor]) -> torch.Tensor:
    try:
        plain = gunzip(path, Path(tmp) / path.name.removesuffix(".gz"), "idx")
        with open(plain, "rb") as fh:
            head = fh.read(8)  # magic (4 bytes), then the item count (big-endian)
        if len(head) == 8 and int.from_bytes(head[4:], "big") == 0:
            # torchvision's reader fails on it with numpy's buffer offset message (battery C, N20)
            raise UserError(f"{path}: its IDX header counts 0 items; {NOT_OFFICIAL}")
        return reader(str(plain))
    except ARCHIVE_ERRORS as err:
        raise damaged(path, err) from None


MNIST_CLASSES = [str(d) for d in range(10)]
FMNIST_CLASSES = list(FashionMNIST.classes)


# --- CIFAR-10: the python tarball of pickled batches -------------------------------------

CIFAR_DIR = "cifar-10-batches-py"
CIFAR_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]


class RefusedPickle(pickle.UnpicklingError):
    """A pickled member asks for something a CIFAR-10 batch never holds."""


class BatchUnpickler(pickle.Unpickler):
    """Unpickles what the CIFAR-10 batches hold, nothing else: dicts, lists, bytes, strings,
    numbers and numpy arrays. A pickle can call any importable function while it loads
    (os.system, say), so every global outside ALLOWED is refused, before it is imported.

    The allowed ones: numpy's array reconstruction (`numpy.core` in the official Python 2
    pickles, `numpy._core` in numpy 2's), the array and dtype types, and `_codecs.encode`,
    which protocol-2 pickles written by Python 3 use for bytes. pickle has no allow-list of
    its own (its docs point to overriding find_class, as here). `_reconstruct` allocates the
    shape it is given: an array of more than `most` bytes (the pickle's own size) is refused."""

    ALLOWED = frozenset(
        {
            ("numpy.core.multiarray", "_reconstruct"),
            ("numpy._core.multiarray", "_reconstruct"),
            ("numpy", "ndarray"),
            ("numpy", "dtype"),
            ("_codecs", "encode"),
        }
    )

    def __init__(self, file: IO[bytes], most: int, **kwargs: Any):
        super().__init__(file, **kwargs)
        self.most = most

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise RefusedPickle(f"{module}.{name}")
        found = super().find_class(module, name)
        return _bounded(found, self.most) if name == "_reconstruct" else found


def _bounded(reconstruct: Callable[..., Any], most: int) -> Callable[..., Any]:
    def call(subtype: Any, shape: tuple[int, ...], dtype: Any) -> Any:
        size = math.prod(int(s) for s in shape) * np.dtype(dtype).itemsize
        if size > most:
            raise RefusedPickle(f"an array of {size:,} bytes (shape {tuple(shape)}) from {most:,} bytes")
        return reconstruct(subtype, shape, dtype)

    return call


def read_cifar10(raw_dir: str | Path, archive: str = "cifar-10-python.tar.gz") -> RawData:
    """cifar-10-python.tar.gz -> images uint8 (N, 32, 32, 3) RGB, labels int64 (N,).

    The batches are read straight from the tarball (no 180 MB of extracted files).
    torchvision's CIFAR10 class is not used: it re-checks each extracted batch against the
    upstream md5s, which rules out the fixture archives and re-packed mirrors.
    Each batch must hold pixels (B, 3072) that are integers 0..255 (uint8 upstream) and B
    integer labels within batches.meta's label_names, a list of names: anything else is one
    line naming the member, never a cast (which would wrap 256 to 0 or cut 6.9 to 6).
    """
    path = need(Path(raw_dir) / archive)
    wanted = {f"{CIFAR_DIR}/{n}" for n in [*CIFAR_TRAIN, "test_batch", "batches.meta"]}
    members: dict[str, dict] = {}
    try:
        with TarArchive(path, "cifar10") as tar:
            for m in tar.members():
                if m.name in wanted:
                    members[m.name.split("/")[-1]] = _str_keys(
                        path, m.name, _unpickle(path, m.name, tar.read(m))
                    )
    except ARCHIVE_ERRORS as err:
        raise damaged(path, err) from None
    missing = sorted(n.split("/")[-1] for n in wanted if n.split("/")[-1] not in members)
    if missing:
        raise UserError(f"{path}: missing {', '.join(f'{CIFAR_DIR}/{n}' for n in missing)}")
    classes = _cifar_classes(path, members["batches.meta"])

    def batches(names: list[str]) -> RawSplit:
        xs, ys = [], []
        for n in names:
            try:
                batch = members[n]
                data = np.asarray(batch["data"])  # (B, 3072): R, G, B planes
                labels = np.asarray(batch["labels"])
                if (
                    data.ndim != 2
                    or data.shape[1] != 3 * 32 * 32
                    or labels.ndim != 1
                    or len(labels) != len(data)
                ):
                    raise ValueError(f"data {data.shape}, labels {labels.shape}")
                data = _integers(data, 255, "pixel").astype(np.uint8, copy=False)
                labels = _integers(labels, len(classes) - 1, "label").astype(np.int64, copy=False)
            except (KeyError, ValueError, TypeError) as err:
                raise UserError(f"{path}: {CIFAR_DIR}/{n}: not a CIFAR-10 batch ({err})") from None
            xs.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))  # (B, 32, 32, 3)
            ys.append(labels)
        y = torch.from_numpy(np.concatenate(ys))
        where = names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"
        return RawSplit(
            torch.from_numpy(np.ascontiguousarray(np.concatenate(xs))),
            y,
            source=f"{path}: {CIFAR_DIR}/{where}",
        )

    return RawData(batches(CIFAR_TRAIN), batches(["test_batch"]), classes)


def _cifar_classes(path: Path, meta: dict) -> list[str]:
    """batches.meta's label_names (a list of bytes in the official pickle) as strings."""
    names = meta.get("label_names")
    if not isinstance(names, list) or not names or not all(isinstance(c, (bytes, str)) for c in names):
        got = f"{type(names).__name__} {names!r:.40}" if "label_names" in meta else "missing"
        raise UserError(
            f"{path}: {CIFAR_DIR}/batches.meta: label_names is {got}, not a list of class names; "
            f"{NOT_OFFICIAL}"
        )
    try:
        return [c.decode() if isinstance(c, bytes) else c for c in names]
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: {CIFAR_DIR}/batches.meta: label_names: {err}; {NOT_OFFICIAL}") from None


def _integers(values: np.ndarray, most: int, what: str) -> np.ndarray:
    """`values` when every one is an integer in 0..most (uint8 pixels pass as they are);
    otherwise a ValueError naming the first that is not. Nothing is cast before it is
    checked: a cast would wrap 256 to 0, cut 6.9 to 6 and clip -100."""
    if values.dtype == np.uint8 and most >= 255:
        return values
    if values.dtype.kind in "iu":
        bad = np.flatnonzero((values < 0) | (values > most))
        if not len(bad):
            return values
        first = bad[0]
    elif values.dtype.kind == "O":  # Python ints too large for int64, or mixed types

        def ok(v: Any) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and bool(0 <= v <= most)

        first = next((i for i, v in enumerate(values.ravel()) if not ok(v)), None)
        if first is None:
            return values.astype(np.int64)
    else:
        raise ValueError(f"{what}s of type {values.dtype}, not integers 0..{most}")
    index = tuple(int(i) for i in np.unravel_index(first, values.shape))
    at = index[0] if len(index) == 1 else index
    value = values.ravel()[first]
    value = value.item() if isinstance(value, np.generic) else value
    raise ValueError(f"{what} {value!r:.40} at index {at} is not an integer in 0..{most}")


def _unpickle(path: Path, member: str, data: bytes) -> Any:
    """One pickled member (the upstream format), its lengths checked first (check_pickle),
    then read with an allow-list (BatchUnpickler)."""
    check_pickle(f"{path}: {member}", data)
    try:
        return BatchUnpickler(io.BytesIO(data), len(data), encoding="bytes").load()
    except RefusedPickle as err:
        raise UserError(
            f"{path}: {member}: refused to unpickle {err} (a CIFAR-10 batch holds only "
            "arrays, lists, dicts, bytes and numbers; this archive is not the official one)"
        ) from None
    except MemoryError:
        raise UserError(f"{path}: {member}: unpickling it ran out of memory; {NOT_OFFICIAL}") from None


def _str_keys(path: Path, member: str, d: Any) -> dict:
    if not isinstance(d, dict):
        raise UserError(
            f"{path}: {member}: not a CIFAR-10 batch (a {type(d).__name__}, not a dict); {NOT_OFFICIAL}"
        )
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in d.items()}


# --- IMDB: aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt ------------------------------

IMDB_CLASSES = ["neg", "pos"]
IMDB_REVIEW = re.compile(r"^aclImdb/(train|test)/(neg|pos)/(\d+)_(\d+)\.txt$")


def read_imdb(raw_dir: str | Path, archive: str = "aclImdb_v1.tar.gz") -> RawData:
    """aclImdb_v1.tar.gz -> reviews (UTF-8 decoded text, unchanged), labels neg=0, pos=1.

    Streams the tarball (100K small members; extracting them would cost more than reading).
    Reviews are ordered by (label, id) so the result does not depend on the tar order.
    `train/unsup` is skipped: the paper's classifier uses labelled reviews only.
    """
    path = need(Path(raw_dir) / archive)
    found: dict[str, list[tuple[int, int, str, str]]] = {"train": [], "test": []}
    try:
        with TarArchive(path, "imdb") as tar:
            for m in tar.members():
                match = IMDB_REVIEW.match(m.name)
                if not match:
                    continue
                split, label, rid = match[1], IMDB_CLASSES.index(match[2]), int(match[3])
                # a few upstream reviews hold stray bytes; they become U+FFFD (unknown symbol)
                text = tar.read(m, "imdb review").decode("utf-8", errors="replace")
                if not text.strip():
                    raise UserError(f"{path}: {m.name}: empty review")
                found[split].append((label, rid, m.name, text))
    except UserError:
        raise
    except ARCHIVE_ERRORS as err:
        raise damaged(path, err) from None
    return RawData(
        _text_split(path, found["train"], "aclImdb/train/{neg,pos}/*.txt"),
        _text_split(path, found["test"], "aclImdb/test/{neg,pos}/*.txt"),
        IMDB_CLASSES,
    )


def _text_split(path: Path, rows: list[tuple[int, int, str, str]], pattern: str) -> RawSplit:
    if not rows:
        raise UserError(f"{path}: no reviews matching {pattern}")
    rows.sort()
    return RawSplit(
        [r[3] for r in rows],
        torch.tensor([r[0] for r in rows], dtype=torch.int64),
        [r[2] for r in rows],
        source=f"{path}: {pattern}",
    )


# --- DBpedia: dbpedia_csv/{train,test}.csv, classes.txt ----------------------------------

DBPEDIA_DIR = "dbpedia_csv"


def read_dbpedia(raw_dir: str | Path, archive: str = "dbpedia_csv.tar.gz") -> RawData:
    """dbpedia_csv.tar.gz -> "<title> <abstract>" texts, labels 0..13 (csv class index - 1).

    Text = title, one space, abstract (both stripped), as Zhang et al. (2015) and
    torchtext join them; no other change here (lowercasing is a `prepare` option).
    """
    path = need(Path(raw_dir) / archive)
    data: dict[str, Any] = {}
    try:
        with TarArchive(path, "dbpedia") as tar, _csv_field_limit(CSV_FIELD_CHARS):
            for m in tar.members():
                name = m.name.removeprefix(f"{DBPEDIA_DIR}/")
                if m.name.startswith(f"{DBPEDIA_DIR}/") and name in ("train.csv", "test.csv", "classes.txt"):
                    text = io.TextIOWrapper(tar.open(m), encoding="utf-8", newline="")
                    data[name] = (
                        text.read().split() if name == "classes.txt" else list(_csv_rows(path, m.name, text))
                    )
    except UserError:
        raise
    except ARCHIVE_ERRORS as err:
        raise damaged(path, err) from None
    missing = [n for n in ("classes.txt", "train.csv", "test.csv") if n not in data]
    if missing:
        raise UserError(f"{path}: missing {', '.join(f'{DBPEDIA_DIR}/{n}' for n in missing)}")
    classes = data["classes.txt"]
    splits = {}
    for split in ("train", "test"):
        rows = data[f"{split}.csv"]
        if not rows:
            raise UserError(f"{path}: {DBPEDIA_DIR}/{split}.csv has no rows")
        bad = [r for r in rows if not 0 <= r[0] < len(classes)]
        if bad:
            raise UserError(f"{path}: {bad[0][2]}: class {bad[0][0] + 1} outside 1..{len(classes)}")
        splits[split] = RawSplit(
            [r[1] for r in rows],
            torch.tensor([r[0] for r in rows], dtype=torch.int64),
            [r[2] for r in rows],
            source=f"{path}: {DBPEDIA_DIR}/{split}.csv",
        )
    return RawData(splits["train"], splits["test"], classes)


def _csv_rows(path: Path, member: str, fh: io.TextIOBase) -> Iterator[tuple[int, str, str]]:
    reader = csv.reader(fh)
    try:
        for row in reader:
            where = f"{member}:{reader.line_num}"
            if len(row) != 3 or not row[0].strip().isdigit():
                raise UserError(f"{path}: {where}: expected 'class,title,abstract', got {row!r:.80}")
            text = f"{row[1].strip()} {row[2].strip()}".strip()
            if not text:
                raise UserError(f"{path}: {where}: empty title and abstract")
            yield int(row[0]) - 1, text, where
    except csv.Error as err:
        what = f"a field longer than {CSV_FIELD_CHARS:,} characters" if "field limit" in str(err) else err
        raise UserError(f"{path}: {member}:{reader.line_num}: {what}; {NOT_OFFICIAL}") from None


@contextmanager
def _csv_field_limit(chars: int) -> Iterator[None]:
    """csv.field_size_limit is one setting of the whole process: set it, then put it back."""
    old = csv.field_size_limit(chars)
    try:
        yield
    finally:
        csv.field_size_limit(old)


READERS: dict[str, Callable[[Path], RawData]] = {
    "mnist": lambda d: read_idx(d, MNIST_CLASSES),
    "fmnist": lambda d: read_idx(d, FMNIST_CLASSES),
    "cifar10": read_cifar10,
    "imdb": read_imdb,
    "dbpedia": read_dbpedia,
}


def read_raw(dataset: str, raw_dir: str | Path) -> RawData:
    """READERS[dataset], then `check_classes`: what `prepare` reads."""
    raw = READERS[dataset](Path(raw_dir))
    check_classes(dataset, raw)
    return raw


def check_classes(dataset: str, raw: RawData) -> None:
    """Every class has at least one example in the official train and in the test set."""
    for split, data in (("train", raw.train), ("test", raw.test)):
        missing = missing_classes(data.y, raw.classes)
        if missing:
            raise UserError(f"{dataset}: {data.source} has no {split} examples of {missing}")


def missing_classes(y: torch.Tensor, classes: list[str]) -> str:
    """'class 1 (pos)' / 'classes 3 (cat), 5 (dog)' for the classes without a label in y; '' if none."""
    counts = torch.bincount(y, minlength=len(classes))
    absent = [
        str(c) if name == str(c) else f"{c} ({name})" for c, name in enumerate(classes) if counts[c] == 0
    ]
    return f"class{'es' if len(absent) > 1 else ''} {', '.join(absent)}" if absent else ""
