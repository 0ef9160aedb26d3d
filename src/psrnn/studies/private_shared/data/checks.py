"""What a prepared folder must hold beyond readable files (fault battery C, cases C76-C85):
the manifest's values that training uses are sane, each split is in the prepared format
and agrees with the manifest, and each split file is the one `prepare` wrote.

    manifest_problem(manifest)                     # None, or what is wrong, in a few words
    split_format_problem(d, manifest, split)       # the same for one loaded split
    checksum_problem(folder, split)                # (file at fault, what is wrong) or None

`splits.sha256` (written by `prepare` beside manifest.json, `sha256sum` format: one
"<sha256>  <file>" line per split file and one for manifest.json, so `sha256sum -c
splits.sha256` in the folder checks it too) ties the split files and the manifest they were
written with together (a hand edit of the manifest's scale, classes or alphabet is refused).
It is a file of its own: the data identity of a run is the md5 of manifest.json, whose bytes
stay what they were. Loading requires it, with the manifest's line: a folder without one
(an older psrnn's, or one whose checksums were deleted, which would switch every file check
off: fault battery C, N48/N50) is refused with the `prepare` command that writes it again;
prepare writes the same manifest.json from the same archives, so finished runs stay current.
Each file is hashed once per process (IMDB's 64 MB of splits: ~50 ms, as long as torch.load
takes to read them).

Only the standard library, torch and psrnn.files: the package's __init__ imports this module.
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path
from typing import Any

import torch

from psrnn.files import not_a_file

CHECKSUMS = "splits.sha256"
MANIFEST = "manifest.json"
SPLIT_NAMES = ("train", "valid", "test")
IMAGE_DTYPE = torch.uint8  # images: raw 8-bit values (N, T, F)
TEXT_DTYPE = torch.uint8  # text: symbol indices (L,), ragged by offsets
INDEX_DTYPE = torch.int64  # labels y (N,) and text offsets (N + 1,)
_LINE = re.compile(r"([0-9a-fA-F]{64}) [ *](\S+)")  # sha256sum -c reads either case


# --- the manifest ------------------------------------------------------------------------


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def manifest_problem(m: dict[str, Any]) -> str | None:
    """What makes the manifest's training values unusable (None: nothing)."""
    if m["input"] not in ("continuous", "categorical"):
        return f"input {m['input']!r}: expected 'continuous' or 'categorical'"
    least = 2 if m["input"] == "categorical" else 1
    if not _count(m["features"]) or m["features"] < least:
        return f"features {m['features']!r}: expected an integer >= {least}"
    if not _count(m["num_classes"]) or m["num_classes"] < 2:
        return f"num_classes {m['num_classes']!r}: expected an integer >= 2"
    scale = m.get("scale", 1.0)
    number = isinstance(scale, (int, float)) and not isinstance(scale, bool)
    if not number or not math.isfinite(scale) or scale <= 0:
        return f"scale {scale!r}: expected a finite number > 0"
    if m.get("steps") is not None and (not _count(m["steps"]) or m["steps"] < 1):
        return f"steps {m['steps']!r}: expected an integer >= 1"
    classes = m.get("classes")
    if isinstance(classes, list) and len(classes) != m["num_classes"]:
        return f"num_classes {m['num_classes']} but {len(classes)} class names"
    alphabet = m.get("alphabet")
    if m["input"] == "categorical" and isinstance(alphabet, list) and len(alphabet) != m["features"]:
        return f"features {m['features']} but an alphabet of {len(alphabet)} symbols"
    counts = m.get("counts")
    if counts is not None and (
        not isinstance(counts, dict) or not all(_count(v) and v >= 0 for v in counts.values())
    ):
        return "counts: expected a count per split"
    return sizes_problem(m)


def _capped(n: int, cap: Any) -> tuple[int, str]:
    return (n, "") if cap is None else (min(n, cap), f", at most {cap}")


def _drawn_from(m: dict[str, Any], split: str) -> int | None:
    """How many samples prepare drew `split` from: the official split's; for text, those of
    min_chars characters or more (manifest's `filtered`)."""

    def get(d: Any, key: str) -> Any:
        return d.get(key) if isinstance(d, dict) else None

    if m.get("input") == "categorical":
        n = get(get(m.get("filtered"), split), "kept")
    else:
        n = get(m.get("official"), split)
    return n if _count(n) else None


def sizes_problem(m: dict[str, Any]) -> str | None:
    """The counts against the options that size each split, as prepare applies them
    (prepare_images, prepare_texts): validation is valid_size of the (kept) training
    samples, or what train_size leaves of them; training the rest; test all (kept) test
    samples; each capped by its option `train`, `valid` or `test`. A manifest whose counts
    were swapped with its split files (fault battery C, W02) is refused here. A value a
    manifest lacks, or holds in another form, checks nothing."""
    counts, opts = m.get("counts"), m.get("options")
    if not isinstance(counts, dict) or not isinstance(opts, dict):
        return None
    if not all(opts.get(k) is None or _count(opts[k]) for k in ("valid_size", "train_size", *SPLIT_NAMES)):
        return None
    pool = {split: n for split in ("train", "test") if (n := _drawn_from(m, split)) is not None}
    kept = " kept" if m.get("input") == "categorical" else ""  # of min_chars characters or more
    if opts.get("valid_size") is not None:
        n_valid, basis = opts["valid_size"], f"valid_size {opts['valid_size']}"
    elif opts.get("train_size") is not None and "train" in pool:
        n_valid = pool["train"] - opts["train_size"]
        basis = f"what train_size {opts['train_size']} leaves of {pool['train']}{kept} training samples"
    else:
        return None
    want: dict[str, tuple[int, str]] = {}
    n, cap = _capped(n_valid, opts.get("valid"))
    want["valid"] = n, basis + cap
    if "train" in pool:
        n, cap = _capped(pool["train"] - n_valid, opts.get("train"))
        want["train"] = n, f"{pool['train']}{kept} training samples less {n_valid} for validation{cap}"
    if "test" in pool:
        n, cap = _capped(pool["test"], opts.get("test"))
        want["test"] = n, f"{pool['test']}{kept} test samples{cap}"
    for split, (n, why) in want.items():
        if _count(counts.get(split)) and counts[split] != n:
            return f"counts.{split} {counts[split]} but prepare's options give {n} ({why})"
    return None


# --- one split ---------------------------------------------------------------------------


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def split_format_problem(d: dict[str, torch.Tensor], m: dict[str, Any], split: str) -> str | None:
    """What makes split `d` (a dict of tensors, its sizes already consistent) not the
    prepared format of manifest `m` (None: nothing)."""
    x, y, offsets = d["x"], d["y"], d.get("offsets")
    if y.dtype != INDEX_DTYPE or y.dim() != 1:
        return f"y is {_name(y.dtype)} of shape {tuple(y.shape)}, not the prepared 1-d {_name(INDEX_DTYPE)}"
    if len(y) and (int(y.min()) < 0 or int(y.max()) >= m["num_classes"]):
        return (
            f"labels {int(y.min())}..{int(y.max())} outside 0..{m['num_classes'] - 1} "
            f"(manifest.json's num_classes {m['num_classes']})"
        )
    if m["input"] == "categorical":
        return _text_problem(x, offsets, m, split)
    return _image_problem(x, offsets, m)


def _image_problem(x: torch.Tensor, offsets: torch.Tensor | None, m: dict[str, Any]) -> str | None:
    if offsets is not None:
        return "offsets in a split of continuous (image) input"
    if x.dtype != IMAGE_DTYPE:
        return f"x is {_name(x.dtype)}, not the prepared {_name(IMAGE_DTYPE)}"
    if x.dim() != 3:
        return f"x has shape {tuple(x.shape)}, not (sequences, steps, features)"
    steps = m.get("steps")
    if steps is not None and x.shape[1] != steps:
        return f"x has {x.shape[1]} steps but manifest.json says {steps}"
    if x.shape[2] != m["features"]:
        return f"x has {x.shape[2]} features per step but manifest.json says {m['features']}"
    return None


def _text_problem(x: torch.Tensor, offsets: torch.Tensor | None, m: dict[str, Any], split: str) -> str | None:
    if offsets is None:
        return "no offsets in a split of categorical (text) input"
    if x.dtype != TEXT_DTYPE or x.dim() != 1:
        return f"x is {_name(x.dtype)} of shape {tuple(x.shape)}, not the prepared 1-d {_name(TEXT_DTYPE)}"
    if offsets.dtype != INDEX_DTYPE or offsets.dim() != 1:
        return f"offsets are {_name(offsets.dtype)}, not the prepared 1-d {_name(INDEX_DTYPE)}"
    lengths = offsets[1:] - offsets[:-1]
    if int(offsets[0]) != 0 or (len(lengths) and int(lengths.min()) < 0):
        return "offsets do not rise from 0"
    if len(x) and int(x.max()) >= m["features"]:
        return (
            f"symbol {int(x.max())} outside manifest.json's alphabet of {m['features']} "
            f"(0..{m['features'] - 1})"
        )
    stats = (m.get("length") or {}).get(split)
    if len(lengths) and isinstance(stats, dict) and _count(stats.get("min")) and _count(stats.get("max")):
        low, high = int(lengths.min()), int(lengths.max())
        if low < stats["min"] or high > stats["max"]:
            return (
                f"sequences of {low}..{high} steps but manifest.json's lengths run "
                f"{stats['min']}..{stats['max']}"
            )
    return None


def class_balance_problem(y: torch.Tensor, m: dict[str, Any], split: str) -> str | None:
    """The split's labels counted per class against manifest.json's class_balance (when it
    has one): another split's rows of the same size count otherwise."""
    recorded = (m.get("class_balance") or {}).get(split)
    if not isinstance(recorded, list):
        return None
    if len(recorded) != m["num_classes"]:
        return (
            f"manifest.json's class_balance lists {len(recorded)} classes but num_classes says "
            f"{m['num_classes']}"
        )
    found = torch.bincount(y, minlength=m["num_classes"]).tolist()
    if found != recorded:
        return f"labels per class {found} but manifest.json's class_balance says {recorded}"
    return None


# --- checksums ---------------------------------------------------------------------------


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def checksums_text(digests: dict[str, str]) -> str:
    """splits.sha256's content: {file name: sha256} as `sha256sum` writes it."""
    return "".join(f"{digest}  {name}\n" for name, digest in digests.items())


def read_checksums(folder: Path) -> dict[str, str] | None:
    """{file name: sha256 in lower case} of the folder's splits.sha256; None without one;
    ValueError for a file that is not in its format, names a file twice (`sha256sum -c`
    checks every line; here no line may be passed over), or is no regular file (a folder,
    a device: never read). An upper-case digest is read as `sha256sum -c` reads it."""
    path = folder / CHECKSUMS
    why = not_a_file(path)
    if why == "not found":
        return None
    if why is not None:
        raise ValueError(why)
    out = {}
    for number, line in enumerate(path.read_text(encoding="ascii", errors="replace").splitlines(), 1):
        match = _LINE.fullmatch(line)
        if not match:
            raise ValueError(f"line {number} is not '<sha256>  <file>'")
        if match.group(2) in out:
            raise ValueError(f"line {number} names {match.group(2)} again")
        out[match.group(2)] = match.group(1).lower()
    return out


_VERIFIED: set[tuple[Any, ...]] = set()  # files whose sha256 matched, by path, size, inode and mtime


def checksum_problem(folder: Path, split: str) -> tuple[Path, str] | None:
    """(the file at fault, what is wrong with it) when `<split>.pt` or manifest.json is not
    the file that `prepare` wrote beside splits.sha256, or splits.sha256 is missing or lacks
    their lines; None when all agree. Hashed once per process and file. A splits.sha256 that
    is there but no file (a folder, a link to /dev/zero: fault battery C, S15/S16) is named
    as what it is, never "missing", and never read."""
    why = not_a_file(folder / CHECKSUMS)
    if why is not None and why != "not found":
        return folder / CHECKSUMS, why
    try:
        recorded = read_checksums(folder)
    except (OSError, ValueError) as err:
        return folder / CHECKSUMS, f"is damaged ({err})"
    if recorded is None:
        return folder / CHECKSUMS, (
            "is missing (an older psrnn's folder, or deleted; loading checks each file against it, "
            "and prepare writes it beside the same manifest.json, so finished runs stay current)"
        )
    name = f"{split}.pt"
    for each in (name, MANIFEST):
        if each not in recorded:
            older = " (an older psrnn's: prepare writes it with that line)" if each == MANIFEST else ""
            return folder / CHECKSUMS, f"is damaged (no line for {each}){older}"
    for each in (name, MANIFEST):
        path = folder / each
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_ino, st.st_mtime_ns, recorded[each])
        if key in _VERIFIED:
            continue
        with open(path, "rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
        if digest != recorded[each]:
            return path, f"is not the file prepare wrote (sha256 differs from {CHECKSUMS})"
        _VERIFIED.add(key)
    return None
