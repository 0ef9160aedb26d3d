"""A run's resumable state: what ckpt_last.pt holds (model, optimizer, scheduler, every RNG,
the run's progress) and when a checkpoint may be resumed (same settings but the study's
resume-exempt ones, same data, same training code; psrnn.engine.fit uses it after every
epoch, for every study).
"""

from __future__ import annotations

import os
import pickle
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from psrnn import __version__, registry
from psrnn.engine import codehash
from psrnn.engine.settings import RunSettings
from psrnn.errors import UserError
from psrnn.files import STALE_TEMP, read_json, torch_save, write_bytes, write_json

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import nn


# environment variables that select CPU kernels and so change a run's numbers in the last
# bits (a suite's `job_env` sets them; `python -m psrnn train` applies it, psrnn.engine.jobenv):
# a checkpoint records them and resumes only under the same values
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "MKL_CBWR")


def kernel_env() -> dict[str, str | None]:
    return {k: os.environ.get(k) for k in KERNEL_ENV}


def kernel_mismatches(saved: dict[str, Any]) -> dict[str, tuple[Any, str | None]]:
    """Variable -> (saved, now) for each kernel variable this process runs under otherwise
    than `saved` (a checkpoint's or a finished run's record)."""
    return {k: (saved.get(k), v) for k, v in kernel_env().items() if saved.get(k) != v}


class ConfigChanged(UserError):
    """ckpt_last.pt (or a finished run's metrics.json) was written with other run settings
    (or data) than the ones requested; `differences` lists them, one 'key (checkpoint X,
    requested Y)' each."""

    def __init__(self, path: Path, differences: list[str]):
        self.path, self.differences = path, differences
        super().__init__(
            f"{path} was written with a different config: {'; '.join(differences)}; "
            f"delete {path.parent} or pass --restart-on-change to start this run over"
        )


@dataclass
class Generators:
    """Seeded CPU generators the run owns (saved in ckpt_last.pt): its data order and its
    study's own draws (the first study's anchor points)."""

    shuffle: torch.Generator
    draws: torch.Generator

    @classmethod
    def seeded(cls, seed: int) -> Generators:
        return cls(torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1_000_003))


@dataclass
class RunState:
    """What changes as a run goes; everything here is saved in ckpt_last.pt."""

    epoch: int = 0  # completed training epochs
    history: list[dict[str, float]] = field(default_factory=list)
    best_valid_acc: float = -1.0
    # the study's selection score of the best epoch (psrnn.engine.hooks.Hooks.score): a later
    # epoch is the best when its score is greater (its first entry is the accuracy)
    best_score: list[float] = field(default_factory=lambda: [-1.0])
    best_epoch: int = 0
    since_best: int = 0  # epochs without a new best validation accuracy
    stopped: str | None = None  # "early_stopping" | "max_epochs" | "non_finite" once training is over
    best_model: dict[str, torch.Tensor] | None = None  # CPU copy of the best state_dict
    # epoch -> what the study captures then (psrnn.engine.hooks.Hooks.capture)
    captures: dict[int, torch.Tensor] = field(default_factory=dict)
    train_time_s: float = 0.0  # time in training passes (for samples_per_s)
    wall_time_s: float = 0.0  # all sessions together
    peak_memory_mb: float = 0.0  # the largest of all sessions (machine.PeakMemory)


def rng_state(gens: Generators) -> dict[str, Any]:
    state = np.random.get_state()  # the legacy tuple (the default), not the dict
    assert isinstance(state, tuple)
    np_name, np_keys, np_pos, np_gauss, np_cached = state
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": (np_name, torch.from_numpy(np_keys.astype(np.int64)), np_pos, np_gauss, np_cached),
        "python": random.getstate(),
        "shuffle": gens.shuffle.get_state(),
        "draws": gens.draws.get_state(),
    }


def set_rng_state(state: dict[str, Any], gens: Generators) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    name, keys, pos, gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, gauss, cached))
    random.setstate(state["python"])
    gens.shuffle.set_state(state["shuffle"])
    # "anchors": the key before it was "draws", in a checkpoint restamp re-stamped
    gens.draws.set_state(state["draws"] if "draws" in state else state["anchors"])


RUN_FILES = ("ckpt_last.pt", "ckpt_best.pt", "history.csv", "metrics.json")  # one of them: a run folder


def read_metrics(path: Path) -> dict[str, Any]:
    """A finished run's metrics.json; one without its settings is a UserError naming it."""
    done = read_json(path)
    if not isinstance(done, dict) or not isinstance(done.get("config"), dict):
        raise UserError(f"{path}: not a run's metrics.json (no 'config'); delete it to train the run")
    return done


def refuse_foreign(out_dir: Path) -> Path:
    """`train --out`'s folder, if it is new, empty or holds a run; a UserError for a file or
    a folder of other files (one of the user's own: training would write among them)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir}: exists and is not a folder")
    others = [p for p in out_dir.iterdir() if not STALE_TEMP.match(p.name)] if out_dir.is_dir() else []
    if others and not any((out_dir / f).exists() for f in RUN_FILES):
        raise UserError(f"{out_dir}: a folder of other files, not a run folder; give a new or empty one")
    return out_dir


def refuse_other_run(
    path: Path, record: dict[str, Any], run: RunSettings, meta: dict[str, Any] | None
) -> None:
    """A UserError when `record` (a finished run's metrics.json or a ckpt_last.pt) names
    another run than this one (`meta`'s experiment and point, `run`'s seed): a folder of
    another run is neither returned, resumed nor, with --restart-on-change, started over
    (that flag replaced another experiment's finished run: fault battery B N30). A search
    run's seed is not compared (its folder is its point's, and the suite's search seed may
    change); nor is what a record lacks (checkpoints before psrnn recorded the experiment
    and point, runs trained without a name)."""
    if not meta or meta.get("experiment") is None:
        return
    mine = (meta["experiment"], meta.get("point"), run.seed)
    named = record.get("experiment") is not None
    config: dict[str, Any] = record.get("config") or {}  # both records hold their settings
    theirs = (
        record["experiment"] if named else mine[0],
        record.get("point", mine[1]) if named else mine[1],
        config.get("seed", run.seed) if mine[1] is None else run.seed,
    )
    if theirs == mine:
        return

    def who(experiment: Any, point: Any, seed: Any) -> str:
        return f"experiment {experiment!r}" + (f" point {point!r}" if point else "") + f" seed {seed}"

    raise UserError(
        f"{path}: records {who(*theirs)}, not {who(*mine)}: another run's folder, never replaced "
        "(--restart-on-change or not); give --out a new folder"
    )


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint's contents on the CPU (RNG states must be CPU tensors); one that cannot
    be read (truncated, another file) is a UserError naming it."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError) as err:
        why = (str(err).splitlines() or ["empty file" if path.stat().st_size == 0 else "no message"])[0][:120]
        raise UserError(
            f"{path}: not a readable checkpoint ({type(err).__name__}: {why}); "
            "delete it to start the run over"
        ) from None


def save_last(
    path: Path,
    cfg: RunSettings,
    st: RunState,
    model: nn.Module,
    opt,
    sched,
    gens: Generators,
    data: str | None,
    meta: dict[str, Any] | None = None,
) -> None:
    """`meta`: the run's experiment and point, which the checkpoint names (refuse_other_run)."""
    torch_save(
        path,
        {
            "experiment": (meta or {}).get("experiment"),
            "point": (meta or {}).get("point"),
            "config": cfg.to_dict(),
            "data_manifest_md5": data,
            "kernel_env": kernel_env(),
            "torch_threads": torch.get_num_threads(),
            "code": training_code(cfg),
            "psrnn_version": __version__,
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict() if sched is not None else None,
            "rng": rng_state(gens),
            "state": {**vars(st)},
        },
    )


def training_code(run: RunSettings) -> str:
    """The digest of the code that trains `run`'s study (psrnn.engine.codehash: comments and
    docstrings aside): a checkpoint resumes only under the same, so a run Snakemake
    re-trains for a code change starts over instead of finishing the old code's run."""
    return codehash.training_digest(registry.of_settings(run).name)


def config_differences(saved: dict[str, Any], run: RunSettings) -> list[str]:
    """'key (checkpoint X, requested Y)' for every setting of `run` that differs from the
    `saved` ones (its study's resume-exempt settings aside). A setting the checkpoint lacks
    (added to the settings later) counts as its default: the behaviour runs had before it."""
    wanted = run.to_dict()
    saved = {**type(run)().to_dict(), **saved}
    keys = sorted((set(saved) | set(wanted)) - set(registry.of_settings(run).resume_exempt))
    return [
        f"{k} (checkpoint {saved.get(k)!r}, requested {wanted.get(k)!r})"
        for k in keys
        if saved.get(k) != wanted.get(k)
    ]


def data_difference(whose: str, saved: str, now: str | None) -> list[str]:
    """['prepared data (<whose> manifest.json md5 X, now Y)'] when the data a record names
    (`saved`) is not the data now (`now`: the study's data identity, the md5 of a prepared
    dataset's manifest.json), else []."""
    return [] if now == saved else [f"prepared data ({whose} manifest.json md5 {saved}, now {now})"]


def checkpoint_differences(ckpt: dict[str, Any], run: RunSettings, data: str | None) -> list[str]:
    """What makes a loaded ckpt_last.pt another run than `run` on `data` (empty: the same)."""
    diff = config_differences(ckpt["config"], run)
    saved_data = ckpt.get("data_manifest_md5")  # absent in checkpoints of psrnn before it
    if saved_data is not None:
        diff += data_difference("checkpoint's", saved_data, data)
    saved_env = ckpt.get("kernel_env")  # absent in checkpoints of psrnn before it
    if saved_env is not None:
        diff += [
            f"{k} (checkpoint {then!r}, now {now!r}: the suite's job_env)"
            for k, (then, now) in kernel_mismatches(saved_env).items()
        ]
    threads = ckpt.get("torch_threads")  # absent before psrnn recorded it
    if threads is not None and threads != torch.get_num_threads():
        diff.append(
            f"torch threads (checkpoint {threads}, now {torch.get_num_threads()}: a CPU run's numbers depend "
            f"on them; --threads {threads} resumes it)"
        )
    code, now = ckpt.get("code"), training_code(run)  # absent before psrnn recorded it
    if code is not None and code != now:
        diff.append(
            f"training code (checkpoint's digest {code[:12]}, now {now[:12]}: "
            "`python -m psrnn code-digest` lists the modules it covers)"
        )
    unknown = set(ckpt.get("state", {})) - set(RunState.__dataclass_fields__)
    if unknown:
        diff.append(f"run state of an earlier psrnn ({', '.join(sorted(unknown))})")
    return diff


def copy_run_file(source: Path, dest: Path, meta: dict[str, Any] | None) -> None:
    """Copy one file of a run folder into another run's folder; a ckpt_last.pt is written
    naming the adopting run (`meta`'s experiment and point), so that the adopting run
    resumes from it later (refuse_other_run), e.g. after its metrics.json is lost."""
    if source.name != "ckpt_last.pt":
        write_bytes(dest, source.read_bytes())
        return
    ckpt = read_checkpoint(source)
    ckpt.update({k: (meta or {}).get(k) for k in ("experiment", "point")})
    torch_save(dest, ckpt)


def adopt(
    source: Path, out_dir: Path, cfg: RunSettings, data: str | None, meta: dict[str, Any] | None = None
) -> str:
    """Copy `source`'s checkpoints into `out_dir` when they are of the same run (settings,
    seed, data): a final run that is its experiment's search run at the selected point
    resumes from it instead of training again. Returns what was done, for the log."""
    last = source / "ckpt_last.pt"
    if not last.is_file():
        return f"not reusing {source}: no ckpt_last.pt"
    diff = checkpoint_differences(read_checkpoint(last), cfg, data)
    if diff:
        return f"not reusing {source}: {'; '.join(diff)}"
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("ckpt_best.pt", "history.csv", "ckpt_last.pt"):  # the one training reads last
        if (source / name).is_file():
            copy_run_file(source / name, out_dir / name, meta)
    return f"reusing {source}: the same run (settings, seed, data), resumed from its checkpoint"


def adopt_finished(
    source: Path,
    out_dir: Path,
    cfg: RunSettings,
    data: str | None,
    meta: dict[str, Any] | None,
    log: Callable[[str], None],
) -> dict[str, Any] | None:
    """A finished search run that is this run (settings, seed, data), for a run folder that
    holds no checkpoint yet: its folder copied into `out_dir` and its metrics.json as this
    run's, with this run's identity (experiment, config name, point) and settings. The final
    run then neither trains nor evaluates again: its numbers are the search run's, from the
    machine that made them. None (nothing done) when `source` is not that: `adopt` then
    takes what it can and says why."""
    done_path, last = source / "metrics.json", source / "ckpt_last.pt"
    if (out_dir / "ckpt_last.pt").is_file() or not done_path.is_file() or not last.is_file():
        return None
    done = read_json(done_path)
    if config_differences(done.get("config", {}), cfg) or checkpoint_differences(
        read_checkpoint(last), cfg, data
    ):
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.iterdir()):  # checkpoints, history, the study's own files
        if path.is_file() and path.name != "metrics.json":
            copy_run_file(path, out_dir / path.name, meta)
    own = {k: (meta or {}).get(k) for k in ("experiment", "config_name", "point")}
    # reused_from: its time is the search run's (a report counts it there, not twice)
    metrics = {**done, **own, "reused_from": str(source), "config": cfg.to_dict()}
    write_json(out_dir / "metrics.json", metrics)  # last: its presence means complete
    log(
        f"reusing {source}: the same run (settings, seed, data), finished: its files and "
        "metrics, nothing trained or evaluated again"
    )
    return metrics


def load_last(
    path: Path,
    cfg: RunSettings,
    model: nn.Module,
    opt,
    sched,
    gens: Generators,
    data: str | None,
    meta: dict[str, Any] | None = None,
) -> RunState:
    ckpt = read_checkpoint(path)  # load_state_dict moves the tensors to the device
    refuse_other_run(path, ckpt, cfg, meta)
    diff = checkpoint_differences(ckpt, cfg, data)
    if diff:
        raise ConfigChanged(path, diff)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    if sched is not None:
        sched.load_state_dict(ckpt["scheduler"])
    set_rng_state(ckpt["rng"], gens)
    state = dict(ckpt["state"])
    state.setdefault("best_score", [state["best_valid_acc"]])  # written before best_score existed
    st = RunState(**state)
    st.captures = {int(k): v for k, v in st.captures.items()}
    return st
