"""Re-stamp finished runs with the digest of today's training code, once the same runs
re-trained by today's code give their recorded numbers: `python -m psrnn restamp`.

    python -m psrnn restamp --config config/relreg.yaml                     # every stale run
    python -m psrnn restamp --config config/relreg.yaml --per-experiment 3  # a sample: only it
    python -m psrnn restamp --config config/relreg.yaml --dry-run           # re-train and compare only
    python -m psrnn restamp --config config/relreg.yaml --jobs 2            # two re-trainings at a time

A run records the digest of the code that trained it (metrics.json's `training_code`,
psrnn.engine.codehash), and a selection the digest its search was made with (its
selected.json stamp, psrnn.jobspec.selection_stamp). When the code that trains changes,
Snakemake re-trains every such run. A change that moves no number (a refactor, a moved
module that changes a module's local names, an error message) need not: restamp proves it
instead, run by run. It re-trains every run the code change left stale (with
`--per-experiment N`, the first N of each experiment: final runs first, then search runs; each from
its recorded settings, with the recorded CPU threads and kernel variables, in a scratch
folder; psrnn.engine.retrain; `--jobs N`: N at a time, each in its own process) and compares
each with its record, key by key (the study's regression keys: accuracies, epochs and counts
exactly, and the per-length accuracies where a study has them; a member of a fused group is
trained again with its group, as a batched model's numbers are its members' together; a
final run that took its search run's record is proven by that search run). A re-stamp proves
what it stamps: only the runs re-trained (and those final runs) get today's digest, and a
selection only once every search run of its experiment records it; a sample leaves the rest
stale, for `stale --code` to list and the next restamp or Snakemake to do. Any difference is
one line naming the run and the key, and nothing is written: re-train then (`psrnn stale
--config ... --code --forget`, then Snakemake).

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
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn import registry
from psrnn.engine import codehash
from psrnn.engine.groups import fused_search, group_marker, search_groups
from psrnn.engine.proofs import earlier_proofs, finals, lock, lost, lost_line, searches, unproven
from psrnn.engine.retrain import prove
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
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="re-train N runs (or fused groups) at a time, each in its own process with the threads "
        "it recorded (default: 1)",
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


def options(args: argparse.Namespace) -> str:
    """The options of the command line a proof records, beside --config and --verify."""
    return (f" --per-experiment {args.per_experiment}" if args.per_experiment else "") + (
        f" --jobs {args.jobs}" if args.jobs != 1 else ""
    )


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
        "command": f"python -m psrnn restamp --config {args.config} --verify{options(args)}",
    }
    records = {p: read_json(p) for p in todo}
    for exp in C.enabled_experiments(cfg):
        mine = {p: r for p, r in records.items() if r.get("experiment") == exp}
        if not mine:
            continue
        retrained, proven = prove(
            cfg, sample(cfg, list(mine), args.per_experiment), mine, args.config, args.jobs
        )
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
    if args.jobs < 1:
        raise UserError(f"--jobs {args.jobs}: must be at least 1")
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
    retrained, proven = prove(cfg, sample(cfg, stale, args.per_experiment), records, args.config, args.jobs)
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
            "command": command + options(args),
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
