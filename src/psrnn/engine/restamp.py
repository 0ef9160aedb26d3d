"""Re-stamp finished runs with the digest of today's training code, once the same runs
re-trained by today's code give their recorded numbers: `python -m psrnn restamp`.

    python -m psrnn restamp --config config/relreg.yaml                     # every stale run
    python -m psrnn restamp --config config/relreg.yaml --per-experiment 3  # a sample: only it
    python -m psrnn restamp --config config/relreg.yaml --dry-run           # re-train and compare only

A run records the digest of the code that trained it (metrics.json's `training_code`,
psrnn.engine.codehash), and a selection the digest its search was made with (its
selected.json stamp, psrnn.jobspec.selection_stamp). When the code that trains changes,
Snakemake re-trains every such run. A change that moves no number (a refactor, a moved
module that changes a module's local names, an error message) need not: restamp proves it
instead, run by run. It re-trains every run the code change left stale (with
`--per-experiment N`, the first N of each experiment: final runs first, then search runs;
each from its recorded settings, with the recorded CPU threads and kernel variables, in a
scratch folder) and compares each with its record, key by key (the study's regression keys:
accuracies, epochs and counts exactly, and the per-length accuracies where a study has
them; a member of a fused group is trained again with its group, as a batched model's
numbers are its members' together; a final run that took its search run's record is proven
by that search run). A re-stamp proves what it stamps: only the runs re-trained (and those
final runs) get today's digest, and a selection only once every search run of its
experiment records it; a sample leaves the rest stale, for `stale --code` to list and the
next restamp or Snakemake to do. Any difference is one line naming the run and the key, and
nothing is written: re-train then (`psrnn stale --config ... --code --forget`, then
Snakemake).

Writing: one restamp per results folder at a time (a lock; a second one is refused);
`restamp.json` is read before anything trains (a damaged one stops it), and the proof (the
digests, the runs re-trained, the machine, the command; every restamp's, oldest first) is
written before any stamp, so a stamp never exists without its proof; a run whose stamp was
not written (an interrupted restamp, a full disk: one line) stays stale and is re-trained
next time, which also finishes the interrupted one (its proof's `complete` is false until
then). Each stamp keeps the run's old digest (`restamped_from`): a run that a restamp
stamped is told from one trained by today's code, so a deleted proof is named (by `stale
--code`; restamp refuses) instead of passing unseen: restore restamp.json from git, or
`--verify` re-trains them. Stamps from before `restamped_from` carry none (psrnn.engine.proofs).

Why not trust a digest of the code alone: a refactor changes the code, so only its numbers
can show it changed nothing; and a sample proves only the code paths its runs take (a run
with noise 0 never takes a changed noise branch), so it stamps only itself.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn import registry
from psrnn.engine import codehash
from psrnn.engine.groups import fused_finals, fused_search, group_key, group_marker, search_groups
from psrnn.engine.proofs import earlier_proofs, finals, lock, lost, lost_line, searches, unproven
from psrnn.engine.settings import RunSettings
from psrnn.errors import UserError
from psrnn.files import read_json, write_json
from psrnn.jobspec import SPEC_KEY, selection_stamp


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="suite config (YAML)")
    p.add_argument(
        "--per-experiment",
        type=int,
        default=None,
        metavar="N",
        help="re-train (and re-stamp) only the first N stale runs of each experiment (default: all)",
    )
    p.add_argument("--dry-run", action="store_true", help="re-train and compare, write nothing")
    p.add_argument(
        "--verify",
        action="store_true",
        help="re-train the runs an earlier restamp stamped without re-training them, compare, stamp nothing",
    )


def sample(cfg: dict[str, Any], stale: list[Path], per_experiment: int | None) -> list[Path]:
    """The first `per_experiment` stale runs of every experiment (None: all of them): final
    runs (by seed), then search runs (by grid order)."""
    out = []
    for exp in C.enabled_experiments(cfg):
        out += [p for p in finals(cfg, exp) + searches(cfg, exp) if p in stale][:per_experiment]
    return out


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
    """'key: recorded X, re-trained Y' for every regression key that differs (exactly)."""
    out = []
    for key in registry.study_of(cfg).regression_keys:
        if record.get(key) != got.get(key):
            out.append(f"{key}: recorded {record.get(key)!r}, re-trained {got.get(key)!r}")
    if record.get("test") != got.get("test"):  # a study's per-length accuracies, where it has them
        out.append("test: the per-length accuracies differ")
    return out


def retrain(cfg: dict[str, Any], paths: list[Path], scratch: Path) -> dict[Path, list[str]]:
    """Train the runs `paths` record again, together as they trained, in `scratch`: each
    record's differences from its run trained again."""
    import torch

    from psrnn.engine.checkpoint import kernel_mismatches
    from psrnn.engine.fit import fit
    from psrnn.engine.group import Job, fit_group

    records = [read_json(p) for p in paths]
    for path, record in zip(paths, records, strict=True):
        if not str(record.get("device", "cpu")).startswith("cpu"):
            raise UserError(
                f"{path}: trained on {record['device']}; restamp re-trains on the CPU and cannot compare"
            )
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
            C.coerce_run(r["config"], registry.study_name(cfg)),
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


def stale_selections(
    cfg: dict[str, Any], old: set[str], skip: frozenset[str] | set[str] = frozenset()
) -> dict[str, Path]:
    """Experiment -> its selected.json stamped with a digest of `old`, but those of the
    experiments `skip` (search runs still stale)."""
    found = {}
    for exp in C.enabled_experiments(cfg):
        path = C.selection_path(cfg, exp)
        if not C.has_grid(cfg, exp) or not path.is_file() or exp in skip:
            continue
        recorded = read_json(path).get(SPEC_KEY)
        if any(recorded == selection_stamp(cfg, exp, digest=d)[SPEC_KEY] for d in old):
            found[exp] = path
    return found


def stamp(path: Path, update: dict[str, Any]) -> None:
    """Rewrite the JSON file with `update` merged in, keeping its modification time: the run
    is the same, so nothing downstream (compile, Snakemake's mtime rule) sees it as new."""
    st = path.stat()
    write_json(path, {**read_json(path), **update})
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def stamp_checkpoint(run_dir: Path, old: set[str], new: str) -> bool:
    """The run's ckpt_last.pt, where it records a digest of `old`, re-stamped with `new` (its
    time kept): a checkpoint resumes only under its own digest, so a proven run whose
    metrics.json is lost resumes instead of starting over. False where there is none."""
    last = run_dir / "ckpt_last.pt"
    if not last.is_file():
        return False
    from psrnn.engine.checkpoint import read_checkpoint
    from psrnn.files import torch_save

    ckpt = read_checkpoint(last)
    if ckpt.get("code") not in old:
        return False
    st = last.stat()
    torch_save(last, {**ckpt, "code": new})
    os.utime(last, ns=(st.st_atime_ns, st.st_mtime_ns))
    return True


def write_stamps(
    cfg: dict[str, Any],
    proof_path: Path,
    records: dict[Path, dict[str, Any]],
    selections: dict[str, Path],
    new: str,
) -> int:
    """Stamp the proven runs `records` (each its checkpoint, then its metrics.json, which
    keeps the digest it had as `restamped_from`), then the `selections`: the number of
    checkpoints stamped. A run whose metrics.json was not stamped (a write failed) stays
    stale, for `stale --code` to list and the next restamp to prove; the failure is one line."""
    old = {str(r["training_code"]) for r in records.values()}
    done = checkpoints = 0
    try:
        for path, record in records.items():
            checkpoints += stamp_checkpoint(path.parent, old, new)
            stamp(path, {"training_code": new, "restamped_from": record["training_code"]})
            done += 1
        for exp, path in selections.items():
            stamp(path, selection_stamp(cfg, exp, digest=new))
    except OSError as err:
        raise UserError(
            f"{err.filename or 'a file'}: {err.strerror or err}; re-stamped {done} of {len(records)} run(s), "
            f"each named in {proof_path}; the rest stay stale: run the same command again to finish"
        ) from None
    return checkpoints


def current(path: Path, new: str) -> bool:
    return path.is_file() and read_json(path).get("training_code") == new


def finish(
    cfg: dict[str, Any], config: str, proof_path: Path, earlier: list[dict[str, Any]], new: str
) -> None:
    """Finish what an interrupted restamp to `new` left undone (its proof's `complete` is
    false): the selections it names whose search runs all record `new`, and Snakemake's
    records of the runs it stamped. Its runs left unstamped are stale: this restamp proves them."""

    for record in earlier:
        if record.get("complete", True) or record.get("to") != new:
            continue
        stamped = [p for p in map(Path, record.get("restamped", [])) if current(p, new)]
        named = set(record.get("restamped_selections", []))
        selections = {
            exp: path
            for exp, path in stale_selections(cfg, set(record.get("from", []))).items()
            if str(path) in named and all(current(s, new) for s in searches(cfg, exp))
        }
        write_stamps(cfg, proof_path, {}, selections, new)
        forget_params(cfg, config, [*stamped, *proven_markers(cfg, stamped), *selections.values()])
        record["complete"] = True
        write_json(proof_path, {"restamps": earlier})
        print(f"finished the interrupted restamp to {new[:12]}: {len(selections)} selection(s) re-stamped")


def forget_params(cfg: dict[str, Any], config: str, outputs: list[Path]) -> int:
    """Snakemake's records of the jobs that made `outputs` dropped (`--cleanup-metadata`):
    their params carry the old digest, so Snakemake would re-run them ("Params have changed")
    though restamp proved them. Without a record Snakemake judges them by time alone. Only
    where this folder has Snakemake's metadata; the number of files asked for."""
    import subprocess
    import sys

    if not outputs or not Path(".snakemake", "metadata").is_dir():
        return 0
    base = [sys.executable, "-m", "snakemake", "-s", str(C.ROOT / "Snakefile"), "--configfile", config]
    for i in range(0, len(outputs), 1000):
        done = subprocess.run(
            [*base, "--cores", "1", "--cleanup-metadata", *map(str, outputs[i : i + 1000])],
            capture_output=True,
            text=True,
        )
        # a file no job made on its own (a member of a fused group: the group's marker is the
        # job's output) has no record; Snakemake names those and exits 1, the rest are dropped
        if done.returncode != 0 and "because the metadata was not present" not in done.stderr:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise UserError(
                f"re-stamped, but snakemake --cleanup-metadata failed ({last}): Snakemake will re-run the "
                "re-stamped jobs; run it by hand with the files restamp.json lists"
            )
    return len(outputs)


def proven_markers(cfg: dict[str, Any], proven: list[Path]) -> list[Path]:
    """The search groups' markers (Snakemake's outputs of their jobs) whose every member is proven."""
    done = set(proven)
    out = []
    for exp in C.enabled_experiments(cfg):
        if C.has_grid(cfg, exp) and fused_search(cfg):
            for group, points in search_groups(cfg, exp).items():
                if all(p in done for p in searches(cfg, exp, points)):
                    out.append(group_marker(cfg, exp, group))
    return out


def prove(
    cfg: dict[str, Any], targets: list[Path], records: dict[Path, dict[str, Any]], config: str
) -> tuple[list[Path], list[Path]]:
    """Re-train `targets` (each with its group; a reused final run through its search run)
    and compare: (the runs re-trained, the runs of `records` proven: re-trained, or reused
    from a re-trained one with its numbers). `records`: the runs in question and what each
    metrics.json holds. Any difference is a UserError naming the run and the key."""
    retrained: list[Path] = []
    done: set[Path] = set()
    with tempfile.TemporaryDirectory(prefix="psrnn-restamp-") as tmp:
        for i, path in enumerate(targets):
            source = reused_source(cfg, path, records[path]) or path
            if source in done:  # trained again with an earlier one's group
                continue
            together = trained_with(cfg, source)
            for member, diff in retrain(cfg, together, Path(tmp) / str(i)).items():
                if diff:
                    raise UserError(
                        f"{member}: re-trained by today's code, {diff[0]}: the code change moves numbers; "
                        f"re-train instead (python -m psrnn stale --config {config} --code --forget)"
                    )
            retrained += together
            done.update(together)
            print(
                f"same numbers: {source}"
                + (f" and the {len(together) - 1} run(s) of its group" if len(together) > 1 else "")
            )
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


def verify(
    cfg: dict[str, Any], args: argparse.Namespace, earlier: list[dict[str, Any]], proof_path: Path, new: str
) -> int:
    """`restamp --verify`: re-train what earlier sampled restamps stamped unproven and add
    the proof (`verified`), experiment by experiment: the proof is written after each, so an
    interrupted verify keeps what it proved and the same command goes on from there. Any
    difference is a UserError naming the run, and that experiment's runs are not added."""
    from psrnn.machine import cpu_name

    todo = unproven(cfg, earlier, new)
    if not todo:
        print(f"restamp --verify {cfg['name']}: every run stamped by a restamp was re-trained by one")
        return 0
    record: dict[str, Any] = {
        "to": new,
        "verified": [],
        "retrained": [],
        "left_unproven": len(todo),
        "machine": f"{cpu_name()}, torch threads as each run recorded",
        "command": f"python -m psrnn restamp --config {args.config} --verify"
        + (f" --per-experiment {args.per_experiment}" if args.per_experiment else ""),
    }
    records = {p: read_json(p) for p in todo}
    for exp in C.enabled_experiments(cfg):
        mine = {p: r for p, r in records.items() if r.get("experiment") == exp}
        if not mine:
            continue
        retrained, proven = prove(cfg, sample(cfg, list(mine), args.per_experiment), mine, args.config)
        record["verified"] += [str(p) for p in proven]
        record["retrained"] += [str(p) for p in retrained]
        record["left_unproven"] -= len(proven)
        if not args.dry_run:  # after each experiment: an interrupted verify keeps its proof
            write_json(proof_path, {"restamps": [*earlier, record]})
    print(
        f"restamp --verify {cfg['name']}: {len(record['retrained'])} run(s) re-trained gave their recorded "
        f"numbers; {len(record['verified'])} of the {len(todo)} run(s) stamped by a sample are proven"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    from psrnn.engine.stale import stale_runs
    from psrnn.machine import cpu_name

    if args.per_experiment is not None and args.per_experiment < 1:
        raise UserError(f"--per-experiment {args.per_experiment}: must be at least 1 (the proof)")
    cfg = C.load_suite(args.config)
    held = lock(cfg)  # noqa: F841 (held until the process ends)
    proof_path = C.results_root(cfg) / "restamp.json"  # every restamp's proof, oldest first
    earlier = earlier_proofs(proof_path)
    new = codehash.training_digest(registry.study_name(cfg))
    if args.verify:
        return verify(cfg, args, earlier, proof_path, new)
    if missing := lost(cfg, earlier, new):  # a proof deleted: its runs are not today's code's
        raise UserError(lost_line(cfg, missing, args.config))
    if not args.dry_run:
        finish(cfg, args.config, proof_path, earlier, new)
    stale = [path for path, _, _ in stale_runs(cfg, code=True)]
    if not stale:
        print(f"restamp {cfg['name']}: every finished run records today's training code ({new[:12]})")
        return 0
    records = {p: read_json(p) for p in stale}
    retrained, proven = prove(cfg, sample(cfg, stale, args.per_experiment), records, args.config)
    left = [p for p in stale if p not in set(proven)]
    # a selection's search is proven once no search run of its experiment stays stale
    unproven_search = {records[p]["experiment"] for p in left if records[p].get("point")}
    old = {str(r["training_code"]) for r in records.values()}
    moved_from = sorted({str(records[p]["training_code"]) for p in proven})
    selections = stale_selections(cfg, old, skip=unproven_search)
    if not args.dry_run:
        command = f"python -m psrnn restamp --config {args.config}"
        record = {
            "from": moved_from,
            "to": new,
            "retrained": [str(p) for p in retrained],
            "restamped": [str(p) for p in proven],
            "restamped_runs": len(proven),
            "left_stale": len(left),
            "restamped_selections": [str(p) for p in selections.values()],
            "machine": f"{cpu_name()}, torch threads as each run recorded",
            "command": command + (f" --per-experiment {args.per_experiment}" if args.per_experiment else ""),
            "complete": False,  # until every stamp and Snakemake record is done
        }
        proofs = [*earlier, record]
        write_json(proof_path, {"restamps": proofs})  # the proof first: no stamp without it
        checkpoints = write_stamps(cfg, proof_path, {p: records[p] for p in proven}, selections, new)
        forgot = forget_params(
            cfg, args.config, [*proven, *proven_markers(cfg, proven), *selections.values()]
        )
        record["complete"] = True
        write_json(proof_path, {"restamps": proofs})
        print(f"re-stamped {checkpoints} checkpoint(s); Snakemake's records of {forgot} output(s) dropped")
    what = "would re-stamp" if args.dry_run else "re-stamped"
    print(
        f"restamp {cfg['name']}: {len(retrained)} run(s) re-trained gave their recorded numbers; {what} "
        f"{len(proven)} run(s) and {len(selections)} selection(s) from "
        f"{', '.join(d[:12] for d in moved_from)} to {new[:12]}"
        + (
            f"; {len(left)} stale run(s) not re-trained stay stale (python -m psrnn stale --config "
            f"{args.config} --code lists them; restamp again without --per-experiment, or re-train)"
            if left
            else ""
        )
    )
    return 0
