"""Turn downloaded archives into prepared sequence tensors (the format in
`psrnn.studies.private_shared.data`).

    python -m psrnn prepare mnist --config config/paper.yaml   # data/paper/raw/mnist -> .../prepared/mnist
    python -m psrnn prepare imdb --raw /tmp/raw/imdb --out /tmp/prep/imdb --set max_length=400

What the paper's Table 1 describes, with our readings of its open points:
- MNIST, Fashion-MNIST: 784 steps x 1 value; 50K train / 10K valid drawn (seeded) from
  the official 60K training images; the official 10K test images.
- CIFAR-10: 1024 steps x 3 values (one pixel per step, RGB as features), row-major;
  45K train / 5K valid from the official 50K; the official 10K test. Table 1's "45K / 15K"
  is read as 45K train and 5K valid + 10K test = 15K held out.
- IMDB: characters; reviews shorter than `min_chars` = 500 characters (raw length of the
  UTF-8 decoded review, before any other change) removed from train and test alike; a
  seeded 20K train / rest (~2.2K) valid split of the kept training reviews; the kept
  official test reviews. 60 symbols: index 0 = unknown, 1..59 = the 59 most frequent
  characters of the training split (case kept; ties broken by code point).
- DBpedia (thesis only): "<title> <abstract>" lowercased as in Zhang et al. (2015);
  70 symbols (unknown + 69 most frequent training characters); 14K of the official
  560K training rows (seeded) as validation; the official 70K test rows.
Images are stored as raw uint8 (scale 255); texts as ragged uint8 symbol indices.
Text test sets are shuffled with the split seed (the upstream files are sorted by class,
so a first-N `test` cap would otherwise keep a single class).
Every class must have examples in the official train and test sets and in each prepared
split (a cap or the length filter that empties a class stops `prepare`, naming the split).
The whole folder is written under a temporary name and renamed into place at the end, with
splits.sha256 beside manifest.json (data/store.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from psrnn import __version__, files
from psrnn.config import ConfigError
from psrnn.errors import UserError
from psrnn.studies.private_shared.data import SPLITS
from psrnn.studies.private_shared.data.readers import RawData, RawSplit, missing_classes, read_raw
from psrnn.studies.private_shared.data.sources import source
from psrnn.studies.private_shared.data.store import check_target, through, write_prepared
from psrnn.studies.private_shared.datasets import REGISTRY, Dataset

IMAGES = tuple(name for name, ds in REGISTRY.items() if ds.image_side is not None)
TEXTS = tuple(name for name, ds in REGISTRY.items() if ds.image_side is None)
UNKNOWN = "<unk>"  # alphabet[0]: every character outside the alphabet
CAPS = {"train": None, "valid": None, "test": None}  # keep the first N of a split (small configs)


def default_options(ds: Dataset) -> dict[str, Any]:
    """Every prepare option of a dataset with its default (the registry row's for the
    dataset's own ones); config/schema.yaml documents each key."""
    if ds.image_side is not None:
        return {"downsample": None, "valid_size": ds.valid_size, "seed": 0, **CAPS}
    return {
        "min_chars": ds.min_chars,
        "max_length": None,
        "alphabet_size": ds.features,
        "lowercase": ds.lowercase,
        "train_size": ds.train_size,
        "valid_size": ds.valid_size,
        "seed": 0,
        **CAPS,
    }


# the suite config's `datasets.<dataset>.prepare` overrides these
DEFAULTS: dict[str, dict[str, Any]] = {name: default_options(ds) for name, ds in REGISTRY.items()}

NOTES = {
    "mnist": [
        "valid: valid_size images drawn (seeded) from the official 60K training images; "
        "test: the official 10K test images"
    ],
    "cifar10": [
        "Table 1's '45K / 15K' read as 45K train / 5K valid (seeded, from the official "
        "50K training images) + the official 10K test images (5K + 10K = 15K held out)",
        "one pixel per step, row-major, R/G/B as the 3 features",
    ],
    "imdb": [
        "reviews shorter than min_chars characters (raw length after UTF-8 decoding, before "
        "any other change) removed from train and test",
        "train/valid: seeded split of the kept official training reviews (train_size train, "
        "the rest valid; or valid_size valid, the rest train); test: kept official test reviews",
        "alphabet: index 0 = unknown, then the most frequent characters of the train split "
        "(all of it, before a `train` cap; ties by code point); text kept as is (case, "
        "<br /> tags)",
    ],
    "dbpedia": [
        "text: '<title> <abstract>' (both stripped), lowercased when lowercase is true (Zhang et al. 2015)",
        "valid: valid_size rows drawn (seeded) from the official 560K training rows; "
        "test: the official 70K test rows",
        "alphabet: index 0 = unknown, then the most frequent characters of the train split; "
        "the model learns a 100-d embedding over it",
    ],
}
NOTES["fmnist"] = NOTES["mnist"]


# --- options -----------------------------------------------------------------------------


def resolve_options(dataset: str, given: dict[str, Any] | None) -> dict[str, Any]:
    """The dataset's DEFAULTS updated with `given`; an option that does not apply is an error."""
    if dataset not in DEFAULTS:
        raise UserError(f"unknown dataset {dataset!r}; known: {', '.join(DEFAULTS)}")
    given = {k: v for k, v in (given or {}).items()}
    unknown = sorted(set(given) - set(DEFAULTS[dataset]))
    if unknown:
        raise ConfigError(
            f"prepare option(s) {', '.join(unknown)} do not apply to {dataset}; "
            f"known: {', '.join(sorted(DEFAULTS[dataset]))}"
        )
    for key, value in given.items():
        if key == "lowercase":
            if not isinstance(value, bool):
                raise ConfigError(f"prepare.{key}={value!r}: expected true or false")
        elif value is not None and (
            not isinstance(value, int)
            or isinstance(value, bool)
            or value < (0 if key in ("seed", "min_chars") else 1)
        ):
            raise ConfigError(
                f"prepare.{key}={value!r}: expected a "
                f"{'non-negative' if key in ('seed', 'min_chars') else 'positive'} integer"
            )
    if given.get("downsample") is not None and given["downsample"] < 2:
        raise ConfigError(f"prepare.downsample={given['downsample']}: expected >= 2")
    if given.get("alphabet_size") is not None and given["alphabet_size"] < 2:
        raise ConfigError(f"prepare.alphabet_size={given['alphabet_size']}: expected >= 2")
    opts = {**DEFAULTS[dataset], **given}
    if "train_size" in opts:
        if given.get("valid_size") is not None and given.get("train_size") is not None:
            raise ConfigError("prepare: give valid_size or train_size, not both")
        if given.get("valid_size") is not None:
            opts["train_size"] = None  # an explicit valid_size replaces the default train_size
        elif given.get("train_size") is not None:
            opts["valid_size"] = None
    return opts


# --- splitting ---------------------------------------------------------------------------


def split_indices(n: int, n_valid: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, valid) int64 indices of a seeded random split of range(n); valid has n_valid."""
    if not 0 < n_valid < n:
        raise ConfigError(
            f"prepare: cannot move {n_valid} of {n} training samples to validation "
            f"(need 0 < valid < {n}); set valid_size"
        )
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[n_valid:].clone(), perm[:n_valid].clone()


def valid_count(n: int, opts: dict[str, Any]) -> int:
    """How many of the n (kept) training samples go to validation."""
    if opts.get("valid_size") is not None:
        return int(opts["valid_size"])
    n_valid = n - int(opts["train_size"])
    if n_valid < 1:
        raise ConfigError(
            f"prepare: only {n} training samples; train_size={opts['train_size']} "
            f"leaves none for validation (set valid_size)"
        )
    return n_valid


def cap(idx: torch.Tensor, n: int | None) -> torch.Tensor:
    return idx if n is None else idx[:n]


# --- images ------------------------------------------------------------------------------


def image_sequences(images: torch.Tensor, side: int | None = None, chunk: int = 5000) -> torch.Tensor:
    """uint8 (N, H, W, C) -> uint8 (N, T, C): one pixel per step, row-major, T = H * W.

    `side` resizes to side x side first by area averaging (28 -> 14 = mean of 2x2 blocks),
    rounded back to 8 bits.
    """
    if side is not None and side != images.shape[1]:
        parts = []
        for i in range(0, len(images), chunk):
            x = images[i : i + chunk].permute(0, 3, 1, 2).float()  # (B, C, H, W)
            x = F.interpolate(x, size=(side, side), mode="area")  # (B, C, s, s)
            parts.append(x.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1))
        images = torch.cat(parts) if parts else images[:, :side, :side]
    n, h, w, c = images.shape
    return images.reshape(n, h * w, c).contiguous()  # (N, T, C)


# --- text --------------------------------------------------------------------------------


def _codepoints(text: str) -> np.ndarray:
    """uint32 (len(text),): one code point per character."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")


def _chunks(texts: list[str], size: int = 20_000):
    for i in range(0, len(texts), size):
        yield texts[i : i + size]


def build_alphabet(texts: list[str], size: int) -> list[str]:
    """[UNKNOWN, then the size - 1 most frequent characters of `texts`], ties by code point."""
    counts = np.zeros(0x110000, dtype=np.int64)
    for part in _chunks(texts):
        counts += np.bincount(_codepoints("".join(part)), minlength=0x110000)
    seen = np.flatnonzero(counts)
    order = np.lexsort((seen, -counts[seen]))  # by count (descending), then code point
    return [UNKNOWN] + [chr(int(c)) for c in seen[order][: size - 1]]


def encode(texts: list[str], alphabet: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged symbol indices: x uint8 (L,) all texts concatenated, offsets int64 (N + 1,)."""
    if len(alphabet) > 256:
        raise ConfigError(f"alphabet of {len(alphabet)} symbols does not fit in uint8")
    lut = np.zeros(0x110000, dtype=np.uint8)  # code point -> index; 0 = unknown
    for i, ch in enumerate(alphabet[1:], 1):
        lut[ord(ch)] = i
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    x = np.concatenate(
        [lut[_codepoints("".join(p))] for p in _chunks(texts)] or [np.zeros(0, np.uint8)]
    )  # (L,)
    return torch.from_numpy(x), torch.from_numpy(offsets)


def decode(indices: torch.Tensor | list[int], alphabet: list[str], unknown: str = "\ufffd") -> str:
    """Symbol indices -> text; the unknown symbol becomes `unknown`."""
    return "".join(unknown if i == 0 else alphabet[i] for i in map(int, indices))


# --- statistics --------------------------------------------------------------------------


def length_stats(lengths: torch.Tensor) -> dict[str, float | int]:
    if len(lengths) == 0:
        return {"mean": 0.0, "min": 0, "max": 0}
    return {
        "mean": round(float(lengths.double().mean()), 2),
        "min": int(lengths.min()),
        "max": int(lengths.max()),
    }


def class_balance(y: torch.Tensor, num_classes: int) -> list[int]:
    return torch.bincount(y, minlength=num_classes).tolist()


# --- the pipeline ------------------------------------------------------------------------


def prepare_images(raw: RawData, opts: dict[str, Any]) -> tuple[dict[str, dict], dict[str, Any]]:
    """RawData of images -> ({split: {"x", "y"}}, manifest fields)."""
    train_idx, valid_idx = split_indices(len(raw.train), valid_count(len(raw.train), opts), opts["seed"])
    picks = {
        "train": (raw.train, cap(train_idx, opts["train"])),
        "valid": (raw.train, cap(valid_idx, opts["valid"])),
        "test": (raw.test, cap(torch.arange(len(raw.test)), opts["test"])),
    }
    out = {}
    for split, (data, idx) in picks.items():
        out[split] = {
            "x": image_sequences(data.x[idx], opts["downsample"]),  # (N, T, C)
            "y": data.y[idx].clone(),
        }
    t, c = out["train"]["x"].shape[1:]
    side = opts["downsample"] or raw.train.x.shape[1]
    return out, {
        "input": "continuous",
        "features": int(c),
        "scale": 255.0,
        "steps": int(t),
        "image_size": [int(side), int(side)],
        "alphabet": None,
    }


def prepare_texts(raw: RawData, opts: dict[str, Any]) -> tuple[dict[str, dict], dict[str, Any]]:
    """RawData of texts -> ({split: {"x", "offsets", "y"}}, manifest fields)."""

    def keep(split: RawSplit) -> RawSplit:
        kept = [i for i, t in enumerate(split.x) if len(t) >= opts["min_chars"]]
        return RawSplit([split.x[i] for i in kept], split.y[kept], [split.ids[i] for i in kept])

    train, test = keep(raw.train), keep(raw.test)
    filtered = {
        "min_chars": opts["min_chars"],
        "train": {"before": len(raw.train), "kept": len(train)},
        "test": {"before": len(raw.test), "kept": len(test)},
    }
    if len(test) == 0:
        raise ConfigError(f"prepare: no test text has >= {opts['min_chars']} characters")
    train_idx, valid_idx = split_indices(len(train), valid_count(len(train), opts), opts["seed"])
    test_idx = torch.randperm(len(test), generator=torch.Generator().manual_seed(opts["seed"] + 1))

    def texts(split: RawSplit, idx: torch.Tensor) -> list[str]:
        out = [split.x[i] for i in idx.tolist()]
        if opts["lowercase"]:
            out = [t.lower() for t in out]
        if opts["max_length"]:
            out = [t[: opts["max_length"]] for t in out]
        return out

    alphabet = build_alphabet(texts(train, train_idx), opts["alphabet_size"])
    picks = {
        "train": (train, cap(train_idx, opts["train"])),
        "valid": (train, cap(valid_idx, opts["valid"])),
        "test": (test, cap(test_idx, opts["test"])),
    }
    out, unknown = {}, {}
    for split, (data, idx) in picks.items():
        x, offsets = encode(texts(data, idx), alphabet)
        out[split] = {"x": x, "offsets": offsets, "y": data.y[idx].clone()}
        unknown[split] = round(float((x == 0).double().mean()) if len(x) else 0.0, 6)
    return out, {
        "input": "categorical",
        "features": len(alphabet),
        "scale": 1.0,
        "steps": None,
        "alphabet": alphabet,
        "unknown_index": 0,
        "unknown_rate": unknown,
        "filtered": filtered,
    }


# the options that size each prepared split (for the message when one is too small)
SIZE_OPTIONS = {
    "train": ("train_size", "valid_size", "train", "min_chars"),
    "valid": ("valid_size", "train_size", "valid", "min_chars"),
    "test": ("test", "min_chars"),
}


def check_splits(dataset: str, splits: dict[str, dict], classes: list[str], opts: dict[str, Any]) -> None:
    """Each prepared split is non-empty and holds every class: a class that a small cap
    or the length filter removed would make its accuracy mean something else."""
    for split in SPLITS:
        y = splits[split]["y"]
        keys = ", ".join(k for k in SIZE_OPTIONS[split] if opts.get(k))
        options = f" (options {keys})" if keys else ""
        if len(y) == 0:
            raise ConfigError(f"prepare: {dataset} {split} split is empty{options}")
        missing = missing_classes(y, classes)
        if missing:
            raise ConfigError(
                f"prepare: {dataset} {split} split ({len(y)} sequences) has no "
                f"examples of {missing}; make it larger{options}"
            )


def source_md5s(dataset: str, raw_dir: Path) -> dict[str, str]:
    """md5 of each upstream file; must match download.json when the folder has one."""
    from psrnn.studies.private_shared.data.download import MARKER

    record = files.read_json(raw_dir / MARKER) if (raw_dir / MARKER).is_file() else None
    out = {}
    for name in source(dataset).files:
        path = raw_dir / name
        if not path.is_file():
            raise FileNotFoundError(
                f"raw file not found: {path} (run `python -m psrnn download {dataset} ...` first)"
            )
        out[name] = files.md5sum(path)
        known = (record or {}).get("files", {}).get(name, {}).get("md5")
        if known and known != out[name]:
            raise UserError(
                f"{path}: md5 {out[name]} differs from {known} recorded by download "
                f"in {raw_dir / MARKER}; download again"
            )
    return out


def prepare(
    dataset: str,
    raw_dir: str | Path,
    out_dir: str | Path,
    options: dict[str, Any] | None = None,
    stamp: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Read `raw_dir`, split/filter/encode, write `out_dir` atomically; return the manifest.
    `stamp`: extra manifest keys (the workflow's settings digest, psrnn.jobspec.dataset_stamp)."""
    opts = resolve_options(dataset, options)
    raw_dir, out_dir = Path(raw_dir), Path(out_dir)
    check_target(out_dir)  # before the archives are read (minutes for the real ones)
    # one prepare per folder at a time (battery C, N83: three at once had each claimed the
    # folder, and one's cleanup can remove another's temporary folder mid-write)
    target = through(out_dir)
    busy = f"another prepare is writing {target} now: wait for it to end"
    with files.exclusive(target.parent / f".{target.name}.lock", busy):
        return _prepare(dataset, raw_dir, out_dir, opts, stamp)


def _prepare(
    dataset: str, raw_dir: Path, out_dir: Path, opts: dict[str, Any], stamp: dict[str, Any] | None
) -> dict[str, Any]:
    sources = source_md5s(dataset, raw_dir)
    raw = read_raw(dataset, raw_dir)
    build = prepare_images if dataset in IMAGES else prepare_texts
    splits, fields = build(raw, opts)
    check_splits(dataset, splits, raw.classes, opts)
    lengths = {
        s: (d["offsets"][1:] - d["offsets"][:-1])
        if "offsets" in d
        else torch.full((len(d["y"]),), d["x"].shape[1])
        for s, d in splits.items()
    }
    manifest = {
        "dataset": dataset,
        **fields,
        "num_classes": len(raw.classes),
        "classes": raw.classes,
        "counts": {s: len(d["y"]) for s, d in splits.items()},
        "length": {s: length_stats(lengths[s]) for s in SPLITS},
        "class_balance": {s: class_balance(d["y"], len(raw.classes)) for s, d in splits.items()},
        "official": {"train": len(raw.train), "test": len(raw.test)},
        "sources": sources,
        "options": opts,
        "split_seed": opts["seed"],
        "notes": NOTES[dataset],
        "psrnn_version": __version__,
        **(stamp or {}),
    }
    write_prepared(out_dir, splits, manifest)
    return manifest


# --- command line ------------------------------------------------------------------------


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help=", ".join(REGISTRY))
    p.add_argument(
        "--config", help="suite config: folders under data/<name>/ and its datasets.<dataset>.prepare options"
    )
    p.add_argument("--raw", help="folder with the downloaded archives (default: from --config)")
    p.add_argument("--out", help="prepared folder to write (default: from --config)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a prepare option, e.g. --set downsample=14 (repeatable)",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="prepare again into a temporary folder and compare: names the files of --out that are "
        "not what prepare writes (writes nothing there)",
    )


def run(args: argparse.Namespace) -> int:
    from psrnn import config as C
    from psrnn.jobspec import dataset_stamp

    opts: dict[str, Any] = {}
    stamp: dict[str, Any] = {}
    raw = Path(args.raw) if args.raw else None
    out = Path(args.out) if args.out else None
    if args.config:
        cfg, opts = C.dataset_options(args.config, args.dataset, "prepare")
        raw = raw or C.data_root(cfg) / "raw" / args.dataset
        out = out or C.data_root(cfg) / "prepared" / args.dataset
        if not args.set:  # made exactly as the config says
            stamp = dataset_stamp(cfg, args.dataset)
    if raw is None or out is None:
        raise UserError("give --config <suite.yaml>, or both --raw <folder> and --out <folder>")
    opts.update(C.parse_set(args.set))
    if args.verify:  # a swap with the checksums written again passes every check on load (W04)
        from psrnn.studies.private_shared.data.verify import verify

        print(verify(lambda folder: prepare(args.dataset, raw, folder, opts, stamp=stamp), out, raw))
        return 0
    m = prepare(args.dataset, raw, out, opts, stamp=stamp)
    counts = ", ".join(f"{s} {m['counts'][s]}" for s in SPLITS)
    mean = m["length"]["train"]["mean"]
    print(
        f"{args.dataset}: {counts}; {m['num_classes']} classes; mean length {mean:g} "
        f"x {m['features']} -> {out}",
        file=sys.stdout,
    )
    return 0
