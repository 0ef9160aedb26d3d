"""Atomic file writes: a reader (or a killed run) never sees a half-written file.

Each writer writes to a temporary file in the target's folder, fsyncs it, then
`os.replace`s it over the target (atomic on POSIX within one file system).

Why by hand: no installed library writes atomically (filelock, installed with DVC, only
locks); the one lock here (`exclusive`) is a bare flock(2) held for a process's lifetime,
which filelock's lock files (left behind, or a thread-local re-entrant counter) would
make neither simpler nor safer. (This module is in no code digest: psrnn.engine.codehash
follows the engine and each study's own folder, so an edit here re-trains nothing.)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from psrnn.errors import UserError


def current_umask() -> int:
    """The process umask (reading it means setting it, so set it straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `target`; on success it replaces `target`."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    # mkstemp creates 0600; give the final file the usual umask-based mode.
    os.chmod(tmp_path, 0o666 & ~current_umask())
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, target)
    except OSError as err:  # a full disk names no file: the error names the one being written
        if err.filename is None and err.errno is not None:
            raise OSError(err.errno, err.strerror, str(target)) from err
        raise
    finally:
        tmp_path.unlink(missing_ok=True)


def write_bytes(target: str | Path, data: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


def write_text(target: str | Path, text: str) -> None:
    write_bytes(target, text.encode("utf-8"))


def write_json(target: str | Path, obj: Any) -> None:
    """Stable JSON: sorted keys, 2-space indent, trailing newline."""
    write_text(target, json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n")


def read_json(path: str | Path, remedy: str = "delete it to make it again") -> Any:
    """The JSON file's value; a file that is not JSON (truncated, say) is a UserError naming it,
    and so is one with a key twice in one object: json keeps the last, a reader of the file
    sees the first (a hand edit; psrnn never writes one). `remedy` ends the line: what to do
    (a file that holds what cannot be made again says "restore it from git")."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise UserError(f"{path}: key {key!r} appears twice in one object (edited); {remedy}")
            out[key] = value
        return out

    with open(path) as fh:
        try:
            return json.load(fh, object_pairs_hook=unique)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise UserError(f"{path}: not a JSON file ({err}); {remedy}") from None


def torch_save(target: str | Path, obj: Any) -> None:
    """torch.save, atomically and byte-stable: saving to a path records that (random
    temporary) name inside the zip archive, so serialise in memory first."""
    import io

    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    write_bytes(target, buf.getvalue())


def md5sum(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.md5()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


# what atomic_path (mkstemp) and psrnn.studies.private_shared.data.prepare (mkdtemp) leave when killed
# mid-write:
# ".<target name>.<8 random characters>.tmp" (or ".old", a prepared folder moved aside)
STALE_TEMP = re.compile(r"^\..+\.[a-z0-9_]{8}\.(tmp|old)$")


def tracked(path: str | Path) -> bool:
    """Whether git tracks the file (a committed result): False outside a git checkout."""
    import subprocess

    p = Path(path)
    if not p.is_file():
        return False
    try:
        done = subprocess.run(
            ["git", "ls-files", "--error-unmatch", "--", p.name], cwd=p.parent, capture_output=True
        )
    except OSError:
        return False
    return done.returncode == 0


def refuse_committed(paths: list[Path], elsewhere: str) -> None:
    """A command that would rewrite committed results (`paths` git tracks) refuses before it
    does any work, in one line naming them, how to write elsewhere, and --overwrite, which
    allows it: no command the docs show changes a committed file unasked."""
    found = [str(p) for p in paths if tracked(p)]
    if found:
        raise UserError(
            f"{', '.join(found)}: committed result(s) this command would rewrite; {elsewhere}, or pass "
            "--overwrite to remake them"
        )


def remove_stale_temps(folder: Path, name: str | None = None) -> None:
    """Remove the temporary files and folders a killed writer left in `folder` (only those
    of target `name` when given); call it only where no other writer can be at work."""
    for p in folder.glob(f".{name}.*" if name else ".*"):
        if STALE_TEMP.match(p.name):
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)


@contextlib.contextmanager
def sole_writer(out_dir: Path) -> Iterator[None]:
    """Hold the run folder for this process (an advisory lock on the folder itself, so no
    file is left in it): a second process that trains the same folder at the same time is
    refused; the lock goes with the process, however it ends. Folders made here and left
    empty (the run stopped before writing anything: bad data, say) are removed again."""
    made = [p for p in (out_dir, *out_dir.parents) if not p.exists()]  # innermost first
    out_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(out_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(
                f"{out_dir}: another process is training this run now; wait for it to finish or stop it"
            ) from None
        remove_stale_temps(out_dir)  # ours, from a writer killed mid-write: it held this lock
        yield
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):  # not empty (another run's folder beside it): kept
            for folder in made:
                folder.rmdir()


@contextlib.contextmanager
def exclusive(lock: Path, busy: str) -> Iterator[None]:
    """Hold the file `lock` (an flock on it, made for the block and removed after it, with
    the folders made for it: a refused or failed command leaves nothing behind) for the
    block; while another process holds it, the UserError `busy`. The kernel drops the lock
    with the process, however it ends (a killed holder leaves the empty file, which the
    next holder takes over). Removing the file while others may open it is safe because a
    lock is only held once the file it was taken on is still the one at `lock`."""
    made = [p for p in (lock.parent, *lock.parent.parents) if not p.exists()]  # innermost first
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        while True:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise UserError(busy) from None
            try:
                if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                    break  # held, on the file at `lock`
            except FileNotFoundError:
                pass
            os.close(fd)  # the holder before removed it meanwhile: lock the new one
        try:
            yield
        finally:
            os.unlink(lock)  # while held: a waiting opener of this file then tries again
            os.close(fd)
    finally:
        with contextlib.suppress(OSError):
            for folder in made:
                folder.rmdir()


def not_a_file(path: str | Path) -> str | None:
    """Why `path` is no regular file to read, in a few words ("not found", "is a folder",
    "is not a regular file (a device, FIFO or socket)"), or None: a path that exists is
    never called "not found" (fault battery B N26, C N86), and a FIFO is never opened."""
    path = Path(path)
    if path.is_file():
        return None
    if not path.exists():
        return "not found" + (" (a link to nothing)" if path.is_symlink() else "")
    if path.is_dir():
        return "is a folder, not a file"
    return "is not a regular file (a device, FIFO or socket)"


_SHA256_LINE = re.compile(r"([0-9a-fA-F]{64}) [ *](\S+)")  # sha256sum -c reads either case


def read_sha256sums(path: str | Path) -> dict[str, str] | None:
    """{file name: sha256 in lower case} of a `sha256sum` file; None when there is none;
    ValueError for a file that is not in its format, names a file twice (`sha256sum -c`
    checks every line; here no line may be passed over), or is no regular file (a folder,
    a device: never read). An upper-case digest and the binary marker `*` are read as
    `sha256sum -c` reads them. Torch-free, so the Snakefile's planning reads a prepared
    folder's splits.sha256 with the rules its training reads it by (tests/test_data_splits.py
    holds both readers to the same answers)."""
    why = not_a_file(path)
    if why == "not found":
        return None
    if why is not None:
        raise ValueError(why)
    out: dict[str, str] = {}
    for number, line in enumerate(Path(path).read_text(encoding="ascii", errors="replace").splitlines(), 1):
        match = _SHA256_LINE.fullmatch(line)
        if not match:
            raise ValueError(f"line {number} is not '<sha256>  <file>'")
        if match.group(2) in out:
            raise ValueError(f"line {number} names {match.group(2)} again")
        out[match.group(2)] = match.group(1).lower()
    return out


def unwritable(folder: str | Path) -> str | None:
    """Why the jobs could not write into `folder` (made where missing), or None: the first
    part of its path that exists is a file, or a folder this user may not write into (a
    read-only file system, or its permissions). Snakemake's planning checks the results and
    data folders with it, so a user reads one line naming the folder instead of each job's
    (or Snakemake's own) stack."""
    path = Path(folder).absolute()
    while not path.exists() and not path.is_symlink():
        path = path.parent
    if not path.is_dir():
        return f"{path}: a file where a folder of {folder} should be: move it away"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path}: not writable (a read-only file system, or its permissions): {folder} cannot be made"
    return None
