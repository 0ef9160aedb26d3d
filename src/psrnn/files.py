"""Atomic file writes: a reader (or a killed run) never sees a half-written file.

Each writer writes to a temporary file in the target's folder, fsyncs it, then
`os.replace`s it over the target (atomic on POSIX within one file system).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
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


def read_json(path: str | Path) -> Any:
    """The JSON file's value; a file that is not JSON (truncated, say) is a UserError naming it."""
    with open(path) as fh:
        try:
            return json.load(fh)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise UserError(f"{path}: not a JSON file ({err}); delete it to make it again") from None


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
