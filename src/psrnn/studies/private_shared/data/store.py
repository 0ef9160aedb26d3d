"""Writing a prepared folder (the format in `psrnn.studies.private_shared.data`): the split
files, splits.sha256 (their sha256, which loading checks) and manifest.json, written under
a temporary name and renamed into place, so a killed `prepare` leaves the old folder."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from psrnn import files
from psrnn.errors import UserError
from psrnn.studies.private_shared.data import MANIFEST_KEYS, SPLITS
from psrnn.studies.private_shared.data.checks import CHECKSUMS, checksums_text, sha256_bytes

WRITES = (*(f"{split}.pt" for split in SPLITS), CHECKSUMS, "manifest.json")  # all a prepared folder holds


def through(out_dir: Path) -> Path:
    """The folder `out_dir` names: a link's target, where prepare writes."""
    if not out_dir.is_symlink():
        return out_dir
    try:
        return out_dir.resolve(strict=False)
    except RuntimeError:  # Python 3.11's Path.resolve on a loop of links (battery C, D-loop)
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(out_dir)) from None


def check_target(out_dir: Path) -> None:
    """Refuse an `out_dir` that prepare would destroy more than its own earlier output in:
    a file, or a folder holding anything prepare does not write (the raw archives with
    `--out` = `--raw` or its parent, a user's own files). Replacing the folder removes it all.
    A link is judged by the folder it names, which prepare writes into."""
    out_dir = through(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(
            f"{out_dir}: exists and is not a folder; prepare writes a folder there (name another --out)"
        )
    if out_dir.is_dir():
        found = sorted(out_dir.iterdir())
        foreign = [p.name for p in found if p.name not in WRITES or not p.is_file()]
        names = [p.name for p in found]
        if not foreign and set(names) - {CHECKSUMS} and not prepared_manifest(out_dir / "manifest.json"):
            # the names alone are not enough: a user's own manifest.json or train.pt had been
            # deleted (confirming pass of stop 60, P06); prepare writes its folders whole, so
            # one of its own holds its manifest (or splits.sha256 alone: Snakemake deletes a
            # job's declared outputs, the split files and manifest, before it runs prepare)
            foreign = names
        if not foreign and CHECKSUMS in names and not prepared_checksums(out_dir / CHECKSUMS):
            # a user's own checksum list of that name alone had been replaced (stop 62, P06c)
            foreign = [CHECKSUMS]
        if foreign:
            raise UserError(
                f"{out_dir}: holds {foreign[0]!r}"
                + (f" and {len(foreign) - 1} more" if len(foreign) > 1 else "")
                + ", which prepare did not write, and replaces the whole folder: name an empty or "
                "prepared folder as --out"
            )


def prepared_manifest(path: Path) -> bool:
    """True when `path` is a manifest.json that prepare wrote (a JSON object with its keys)."""
    try:
        found = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(found, dict) and {"dataset", "counts", *MANIFEST_KEYS} <= set(found)


def prepared_checksums(path: Path) -> bool:
    """True when `path` is a splits.sha256 that prepare could have written: `sha256sum` lines
    (psrnn.files.read_sha256sums) naming only the files of a prepared folder."""
    try:
        named = files.read_sha256sums(path) or {}
    except (OSError, ValueError):
        return False
    return bool(named) and set(named) <= set(WRITES) - {CHECKSUMS}


def seal(folder: Path) -> None:
    """Write splits.sha256 for the split files and manifest.json already in `folder`, as
    `prepare` does: for folders written straight in the prepared format (the contract's and
    the tests' tiny datasets, a test that edits a split and its checksums alike)."""
    present = [name for name in WRITES if name != CHECKSUMS and (folder / name).is_file()]
    digests = {name: sha256_bytes((folder / name).read_bytes()) for name in present}
    files.write_text(folder / CHECKSUMS, checksums_text(digests))


def write_prepared(
    out_dir: Path, splits: dict[str, dict[str, torch.Tensor]], manifest: dict[str, Any]
) -> None:
    """Write the split files, splits.sha256 and manifest.json into a temporary folder, then
    rename it to `out_dir` (check_target first). An `out_dir` that is a link is written
    through, into the folder it names (the rename had replaced the link: battery C, N60)."""
    out_dir = through(out_dir)
    check_target(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    files.remove_stale_temps(out_dir.parent, out_dir.name)  # a killed prepare's, of this dataset
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    tmp.chmod(0o777 & ~files.current_umask())  # mkdtemp makes it private; the final folder follows the umask
    digests: dict[str, str] = {}
    try:
        for split in SPLITS:
            # saved through a buffer: torch.save names the archive's root folder after the
            # file it writes to (here a random temporary name), so this keeps the bytes stable
            buf = io.BytesIO()
            torch.save(splits[split], buf)
            files.write_bytes(tmp / f"{split}.pt", buf.getvalue())
            digests[f"{split}.pt"] = sha256_bytes(buf.getvalue())
        files.write_json(tmp / "manifest.json", manifest)
        digests["manifest.json"] = sha256_bytes((tmp / "manifest.json").read_bytes())
        files.write_text(tmp / CHECKSUMS, checksums_text(digests))  # never in manifest.json (data identity)
        old = None
        if out_dir.exists():
            # a folder cannot be replaced in one rename: move the old one aside first
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".old", dir=out_dir.parent))
            out_dir.rename(old / out_dir.name)
        tmp.rename(out_dir)
        if old is not None:
            shutil.rmtree(old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
