"""Train finished runs again with today's code and compare them with their records, for
`python -m psrnn restamp` (psrnn.engine.restamp, which decides what to re-train and writes the
stamps and the proof).

Each run is trained again from its recorded settings, with the recorded CPU threads and kernel
variables, in a scratch folder, and compared key by key (the study's regression keys:
accuracies, epochs and counts exactly, and the per-length accuracies where a study has them).
A member of a fused group is trained again with its group, as a batched model's numbers are its
members' together; a final run that took its search run's record is proven by that search run.
`jobs` re-trainings run at a time, each in a fresh process, as Snakemake runs each job.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn import registry
from psrnn.engine.groups import fused_finals, fused_search, group_key, search_groups
from psrnn.engine.proofs import finals, searches
from psrnn.engine.settings import RunSettings
from psrnn.errors import UserError
from psrnn.files import read_json


def reused_source(cfg: dict[str, Any], path: Path, record: dict[str, Any]) -> Path | None:
    """The search run's record a final run took as its own (checkpoint.adopt_finished), or None."""
    source = record.get("reused_from")
    if not source:
        return None
    found = Path(source) / "metrics.json"
    if not found.is_file():
        raise UserError(f"{path}: took the record of {source}, which is gone: re-train it instead")
    return found


def fused(cfg: dict[str, Any], record: dict[str, Any], run: RunSettings) -> bool:
    """Whether the run trained as a member of a fused group (the suite fuses its kind)."""
    if group_key(run) is None:
        return False
    return fused_search(cfg) if record.get("point") else fused_finals(cfg)


def trained_with(cfg: dict[str, Any], path: Path) -> list[Path]:
    """The records of the runs that trained together with the run `path` records, itself
    among them: its fused group as Snakemake trains it (the search group of its grid point;
    every final seed of its experiment but those that took their search run's record), or
    itself alone. A batched model's numbers are those of its members together."""
    record = read_json(path)
    if not fused(cfg, record, C.coerce_run(record["config"], registry.study_name(cfg))):
        return [path]
    exp = record["experiment"]
    if record.get("point"):
        return searches(
            cfg, exp, next(ps for ps in search_groups(cfg, exp).values() if record["point"] in ps)
        )
    return [p for p in finals(cfg, exp) if p.is_file() and not read_json(p).get("reused_from")]


def differences(cfg: dict[str, Any], record: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """'key: recorded X, re-trained Y' for every key that differs (psrnn.report.records.
    differing_keys: the regression keys, then the per-length accuracies)."""
    from psrnn.report.records import differing_keys

    return [
        "test: the per-length accuracies differ"
        if key == "test"
        else f"{key}: recorded {record.get(key)!r}, re-trained {got.get(key)!r}"
        for key in differing_keys(cfg, record, got)
    ]


def device_for(path: Path, record: dict[str, Any]) -> str:
    """The device a run is trained again on: the kind it trained on, whatever its `device:`
    says (`auto` on a GPU host would move a CPU run to the GPU, and its numbers with it). A
    GPU run only on the GPU model and torch it recorded (another gives other numbers)."""
    import torch

    if str(record.get("device") or "cpu").startswith("cpu"):
        return "cpu"
    then = f"{record.get('device_name') or record.get('device')} under torch {record.get('torch_version')}"
    here = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    if f"{here} under torch {torch.__version__}" != then:
        raise UserError(
            f"{path}: trained on {then}, this machine has {here or 'no GPU'} under torch "
            f"{torch.__version__}: a GPU run is trained again on its GPU model and torch only "
            "(or re-run it there)"
        )
    return "cuda"


def retrain(cfg: dict[str, Any], paths: list[Path], scratch: Path) -> dict[Path, list[str]]:
    """Train the runs `paths` record again, together as they trained, in `scratch`: each
    record's differences from its run trained again."""
    import torch

    from psrnn.engine.checkpoint import kernel_mismatches
    from psrnn.engine.fit import fit
    from psrnn.engine.group import Job, fit_group

    records = [read_json(p) for p in paths]
    [device, *_] = [device_for(path, record) for path, record in zip(paths, records, strict=True)]
    for path, record in zip(paths, records, strict=True):
        mismatches = kernel_mismatches(record.get("kernel_env") or {})
        if mismatches:
            k, (then, now) = next(iter(mismatches.items()))
            raise UserError(
                f"{path}: trained under {k}={then!r}, this process runs under {now!r}: run restamp under "
                "the suite's job_env (python -m psrnn restamp applies it)"
            )
    torch.set_num_threads(int(records[0].get("torch_threads") or 1))
    jobs = [
        Job(
            C.coerce_run({**r["config"], "device": device}, registry.study_name(cfg)),
            scratch / str(i),
            {"experiment": r["experiment"], "config_name": r["config_name"], "point": r.get("point")},
        )
        for i, r in enumerate(records)
    ]
    quiet = lambda _: None  # noqa: E731
    if len(jobs) == 1 and not fused(cfg, records[0], jobs[0].run):
        got: list[dict[str, Any] | None] = [fit(jobs[0].run, jobs[0].out_dir, jobs[0].meta, log=quiet)]
    else:
        got = fit_group(jobs, log=quiet, save_every_s=3600.0)
    return {p: differences(cfg, r, g or {}) for p, r, g in zip(paths, records, got, strict=True)}


def units(
    cfg: dict[str, Any], targets: list[Path], records: dict[Path, dict[str, Any]]
) -> list[tuple[Path, list[Path]]]:
    """What to train for `targets`, in their order: (the run, the runs it trained together with:
    its fused group in the group's order, or itself; a reused final run: its search run's), a
    group once."""
    out: list[tuple[Path, list[Path]]] = []
    planned: set[Path] = set()
    for path in targets:
        source = reused_source(cfg, path, records[path]) or path
        if source in planned:  # trained again with an earlier one's group
            continue
        together = trained_with(cfg, source)
        planned.update(together)
        out.append((source, together))
    return out


def retrain_all(
    cfg: dict[str, Any], todo: list[list[Path]], scratch: Path, jobs: int
) -> Iterator[dict[Path, list[str]]]:
    """retrain() each of `todo`, in order: in this process (jobs 1), or `jobs` at a time, each in a
    fresh process (as Snakemake runs each job), yielded in `todo`'s order as each is done. A
    process pool rather than threads: each re-training sets its own torch threads and seeds."""
    if jobs == 1:
        for i, together in enumerate(todo):
            yield retrain(cfg, together, scratch / str(i))
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=die_with_parent) as pool:
        futures = [pool.submit(retrain, cfg, together, scratch / str(i)) for i, together in enumerate(todo)]
        try:
            for future in futures:
                yield future.result()
        finally:  # a difference or an error: the rest are not started
            for future in futures:
                future.cancel()


def die_with_parent() -> None:
    """A worker ends with restamp (kill -9 included) instead of training on for minutes,
    re-parented to init: Linux's parent-death signal (elsewhere, it ends after its run)."""
    import ctypes
    import signal
    import sys

    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def prove(
    cfg: dict[str, Any],
    targets: list[Path],
    records: dict[Path, dict[str, Any]],
    config: str,
    jobs: int = 1,
) -> tuple[list[Path], list[Path]]:
    """Re-train `targets` (each with its group; a reused final run through its search run;
    `jobs` at a time) and compare: (the runs re-trained, the runs of `records` proven:
    re-trained, or reused from a re-trained one with its numbers). `records`: the runs in
    question and what each metrics.json holds. Any difference is a UserError naming the run
    and the key."""
    retrained: list[Path] = []
    todo = units(cfg, targets, records)
    groups = [together for _, together in todo]
    for member in (m for together in groups for m in together):  # a GPU run elsewhere: before any work
        device_for(member, records.get(member) or read_json(member))
    with tempfile.TemporaryDirectory(prefix="psrnn-restamp-") as tmp:
        for (source, together), diffs in zip(todo, retrain_all(cfg, groups, Path(tmp), jobs), strict=False):
            for member, diff in diffs.items():
                if diff:
                    raise UserError(
                        f"{member}: re-trained by today's code, {diff[0]}: the code change moves numbers; "
                        f"re-train instead (python -m psrnn stale --config {config} --code --forget)"
                    )
            retrained += together
            print(
                f"same numbers: {source}"
                + (f" and the {len(together) - 1} run(s) of its group" if len(together) > 1 else ""),
                flush=True,
            )
    done = set(retrained)
    proven = set(done)
    for path, record in records.items():  # a final run that took a proven search run's record
        from_search = reused_source(cfg, path, record)
        if from_search is not None and from_search in done:
            if diff := differences(cfg, record, read_json(from_search)):
                raise UserError(
                    f"{path}: took the record of {from_search.parent} but differs from it, {diff[0]}"
                )
            proven.add(path)
    return retrained, [p for p in records if p in proven]
