"""Archives byte for byte: gzip, tar.gz and IDX files with fixed metadata, so the same
content always gives the same bytes (and the same MD5SUMS).

    python -m psrnn fixtures data/fixtures     # the test archives, written with these

Used by the fixtures (`fixtures`), the benchmark's full-size look-alikes (`lookalikes`)
and the real-digits set (`digits`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import struct
import tarfile

import numpy as np

TAR_MTIME = 1_262_304_000  # 2010-01-01, a fixed date for every tar member


def gzip_bytes(data: bytes, level: int = 9) -> bytes:
    buf = io.BytesIO()
    # mtime=0 and no file name in the header: the same input gives the same bytes
    with gzip.GzipFile(filename="", fileobj=buf, mode="wb", compresslevel=level, mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def tar_gz_bytes(members: dict[str, bytes], level: int = 9) -> bytes:
    """A .tar.gz holding `members` (path -> bytes) and their parent folders, fixed metadata."""
    dirs = sorted({"/".join(p.split("/")[:i]) for p in members for i in range(1, p.count("/") + 1)})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for d in dirs:
            tar.addfile(_tarinfo(d + "/", tarfile.DIRTYPE, 0o755, 0))
        for path, data in members.items():
            tar.addfile(_tarinfo(path, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    return gzip_bytes(buf.getvalue(), level)


def _tarinfo(name: str, kind: bytes, mode: int, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.mtime = kind, mode, size, TAR_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def idx_bytes(array: np.ndarray) -> bytes:
    """IDX (LeCun's MNIST format) of a uint8 array: magic 0x0000 08 <ndim>, big-endian dims."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def md5sums(blobs: dict[str, bytes]) -> str:
    return "".join(f"{hashlib.md5(b).hexdigest()}  {n}\n" for n, b in sorted(blobs.items()))


def idx_files(prefix: str, images: np.ndarray, labels: np.ndarray, level: int = 9) -> dict[str, bytes]:
    """MNIST's two gzipped IDX files of one split ("train" or "t10k")."""
    return {
        f"{prefix}-images-idx3-ubyte.gz": gzip_bytes(idx_bytes(images), level),
        f"{prefix}-labels-idx1-ubyte.gz": gzip_bytes(idx_bytes(labels), level),
    }
