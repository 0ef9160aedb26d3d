"""The prepare and snakemake sections: the data pipeline's time and disk, outside training.

    python -m psrnn bench --only prepare,snakemake

prepare: full-size look-alike archives (psrnn.studies.private_shared.data.lookalikes: 50K IMDB reviews,
60K + 10K
MNIST images) through the real `prepare`; its time and the prepared size on disk.
snakemake: wall time of `snakemake -n` on a suite config, in the repository root.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.studies.private_shared.data.lookalikes import write_idx_like, write_imdb_like

# --- section: prepare ----------------------------------------------------------------------


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def bench_prepare(scratch: Path, quick: bool, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Generate full-size look-alike archives and time the real `prepare` on them."""
    from psrnn.studies.private_shared.data.prepare import prepare

    rows = []
    per_split = 500 if quick else 25_000
    raw, out = scratch / "raw" / "imdb", scratch / "prepared" / "imdb"
    t0 = time.perf_counter()
    gen = write_imdb_like(raw / "aclImdb_v1.tar.gz", per_split)
    gen_s = time.perf_counter() - t0
    opts = {"train_size": int(per_split * 0.8)} if quick else {}
    t0 = time.perf_counter()
    m = prepare("imdb", raw, out, opts)
    prep_s = time.perf_counter() - t0
    chars = sum(int(round(m["length"][s]["mean"] * m["counts"][s])) for s in m["counts"])
    max_len = max(m["length"][s]["max"] for s in m["counts"])
    n_seq = sum(m["counts"].values())
    rows.append(
        {
            "dataset": "imdb",
            "source": "generated aclImdb look-alike",
            "items": gen["reviews"],
            "generate_s": gen_s,
            "prepare_s": prep_s,
            "raw_mb": gen["archive_mb"],
            "prepared_mb": folder_mb(out),
            "kept": n_seq,
            "counts": m["counts"],
            "mean_length": m["length"]["train"]["mean"],
            "features": m["features"],
            # what the same splits would take as dense float32 one-hot: ragged, and padded to
            # the longest review (the naive tensor)
            "dense_onehot_gb": chars * m["features"] * 4 / 1e9,
            "dense_padded_onehot_gb": n_seq * max_len * m["features"] * 4 / 1e9,
        }
    )
    log(
        f"prepare imdb: {gen['reviews']} reviews, prepare {prep_s:.1f}s, "
        f"{rows[-1]['prepared_mb']:.1f} MB (dense one-hot {rows[-1]['dense_onehot_gb']:.1f} GB)"
    )

    n_train, n_test = (600, 100) if quick else (60_000, 10_000)
    raw, out = scratch / "raw" / "mnist", scratch / "prepared" / "mnist"
    t0 = time.perf_counter()
    gen = write_idx_like(raw, n_train, n_test)
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    m = prepare("mnist", raw, out, {"valid_size": 100} if quick else {})
    prep_s = time.perf_counter() - t0
    rows.append(
        {
            "dataset": "mnist",
            "source": "generated IDX look-alike",
            "items": gen["images"],
            "generate_s": gen_s,
            "prepare_s": prep_s,
            "raw_mb": gen["archive_mb"],
            "prepared_mb": folder_mb(out),
            "kept": sum(m["counts"].values()),
            "counts": m["counts"],
            "mean_length": m["length"]["train"]["mean"],
            "features": m["features"],
            "dense_onehot_gb": None,
            "dense_padded_onehot_gb": None,
        }
    )
    log(f"prepare mnist: {gen['images']} images, prepare {prep_s:.1f}s, {rows[-1]['prepared_mb']:.1f} MB")
    return rows


# --- section: snakemake --------------------------------------------------------------------


def bench_snakemake(config_path: Path, timeout: float = 300.0) -> dict[str, Any]:
    """Wall time of `snakemake -n --configfile <config>` in the repository root."""
    exe = shutil.which("snakemake") or str(Path(sys.executable).with_name("snakemake"))
    cmd = [exe, "-n", "--cores", "1", "--configfile", str(config_path)]
    shown = ["snakemake", *cmd[1:]]
    if not Path(exe).exists() or not (C.ROOT / "Snakefile").is_file():
        return {"command": " ".join(shown), "status": "not measured: snakemake or Snakefile missing"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=C.ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {
            "command": " ".join(shown),
            "status": f"error: timed out after {timeout:.0f}s",
            "seconds": timeout,
        }
    seconds = time.perf_counter() - t0
    jobs = None
    m = re.search(r"^total\s+(\d+)", proc.stdout + proc.stderr, re.MULTILINE)
    if m:
        jobs = int(m.group(1))
    status = (
        "ok"
        if proc.returncode == 0
        else f"error: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
    )
    return {"command": " ".join(shown), "seconds": seconds, "jobs": jobs, "status": status}
