"""`python -m psrnn prepare <dataset> --config <suite.yaml> --verify`: prepare again from the
archives, into a temporary folder beside the prepared one, and compare. The checks on load
(manifest.json against each split, splits.sha256 against the files) find damage and
careless edits; a deliberate swap of two splits of equal size with the checksums written
again (fault battery C, W04) passes them, since every file is then consistent with the
others. Only the archives tell: prepare is deterministic (the same archives and options
give the same bytes), so a folder that is not what prepare writes is named here, file by
file. Nothing in the prepared folder is written; the temporary folder is removed however
the command ends.

manifest.json is compared as JSON without `psrnn_version` (which psrnn wrote it, not what
the data is) and without the workflow's stamp (`workflow_spec`: the config that asked for
it, which a `--set` leaves out; battery C of stop 62, V07: a `--set` repeating the config's
own value called a sound folder "edited or swapped"); splits.sha256 follows from the files
compared. The temporary folder is made in the system's temporary folder where the prepared
one's parent cannot be written (a read-only data mount: V05).
"""

from __future__ import annotations

import errno
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psrnn.errors import UserError
from psrnn.jobspec import SPEC_KEY
from psrnn.studies.private_shared.data.checks import CHECKSUMS
from psrnn.studies.private_shared.data.store import WRITES

COMPARED = tuple(name for name in WRITES if name != CHECKSUMS)  # the split files, then manifest.json


def _manifest(path: Path) -> Any:
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return {k: v for k, v in m.items() if k not in ("psrnn_version", SPEC_KEY)} if isinstance(m, dict) else m


def differences(prepared: Path, again: Path) -> list[str]:
    """The files of `prepared` that are not those of `again` (what prepare wrote now)."""
    out = []
    for name in COMPARED:
        mine = prepared / name
        if not mine.is_file():
            out.append(f"{name} (missing)")
        elif name == "manifest.json":
            if _manifest(mine) != _manifest(again / name):
                out.append(name)
        elif mine.read_bytes() != (again / name).read_bytes():
            out.append(name)
    return out


def verify(prepare: Callable[[Path], Any], prepared: Path, raw: Path) -> str:
    """Run `prepare(folder)` into a temporary folder beside `prepared` and compare; the line
    to print when they agree, a UserError naming the files that differ when not."""
    if not (prepared / "manifest.json").is_file():
        raise UserError(f"{prepared}: no prepared dataset to verify (no manifest.json); prepare it first")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".verify-{prepared.name}-", dir=prepared.parent))
    except OSError as err:
        if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        tmp = Path(tempfile.mkdtemp(prefix=f"psrnn-verify-{prepared.name}-"))  # the data is read only here
    try:
        prepare(tmp / prepared.name)
        wrong = differences(prepared, tmp / prepared.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if wrong:
        raise UserError(
            f"{prepared}: {', '.join(wrong)} not what prepare writes from {raw} with these options "
            "(edited or swapped): prepare it again (without --verify)"
        )
    return f"verified: {prepared} is what prepare writes from {raw} ({', '.join(COMPARED)})"
