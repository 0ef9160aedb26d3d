"""Finished runs whose records are of other settings than the suite now gives them.

    python -m psrnn stale --config params.yaml            # list them
    python -m psrnn stale --config params.yaml --forget   # and have Snakemake train them again

Snakemake decides whether a training job runs again from its own records in `.snakemake/`
(the job's params when it last ran). When run folders come from elsewhere (`dvc exp apply`
or `dvc checkout` of another experiment's runs, a copy), those records can disagree with
the files: Snakemake then keeps runs of other settings, and compile refuses them. --forget
removes each such run's metrics.json (the mark of a finished run; its checkpoints stay,
and its next training starts over, as `--restart-on-change` does) and the marker of the
search group it belongs to, so Snakemake trains exactly those runs again. Nothing else is
touched. dvc.yaml's training stages call it before Snakemake.

    python -m psrnn stale --config config/small.yaml --code [--forget]

lists (and forgets) instead the runs of the suite's settings that other training code
trained. Snakemake re-trains those itself where its records say which code made them; a
run trained by hand (`python -m psrnn train --out results/<name>/runs/...`), copied in or
committed has no such record. Not part of DVC's stages: it would re-train committed runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from psrnn import config as C
from psrnn import registry
from psrnn.engine import codehash, groups
from psrnn.errors import UserError


def stale_runs(cfg: dict, code: bool = False) -> list[tuple[Path, Path | None, str]]:
    """(metrics.json, its search group's marker or None, why) of every finished run of the
    suite whose record is not a run of the suite's settings (results.collect.suite_run);
    with `code`, instead: the runs of the suite's settings trained by other training code
    (metrics.json's `training_code`, absent before psrnn recorded it, is not the digest
    of the code now: psrnn.engine.codehash)."""
    from psrnn.engine.selection import overrides_for
    from psrnn.report.collect import read_selection, suite_run

    now = codehash.training_digest(registry.study_name(cfg))
    found: list[tuple[Path, Path | None, str]] = []
    for exp in C.enabled_experiments(cfg):
        sel = read_selection(cfg, C.results_root(cfg), exp)  # a final run: the point selection gave its seed
        runs: list[tuple[Path, int, str | None, Path | None]] = [
            (Path(C.run_dir(cfg, exp, seed)), seed, overrides_for(sel, seed)[0] if sel else None, None)
            for seed in cfg["seeds"]
        ]
        if C.has_grid(cfg, exp):
            marker_of = {}
            if groups.fused_search(cfg):
                marker_of = {p: g for g, ps in groups.search_groups(cfg, exp).items() for p in ps}
            for pid, _ in C.grid_points(cfg["experiments"][exp]):
                group = marker_of.get(pid)
                marker = groups.group_marker(cfg, exp, group) if group else None
                runs.append((Path(C.search_dir(cfg, exp, pid)), C.search_seed(cfg), pid, marker))
        for folder, seed, point, marker in runs:
            path = folder / "metrics.json"
            if path.is_file():
                try:
                    record = suite_run(cfg, path, exp, seed, point=point)
                except UserError as err:
                    if not code:
                        found.append((path, marker, str(err).removeprefix(f"{path}: ")))
                    continue
                then = record.get("training_code")
                if code and then is not None and then != now:
                    found.append(
                        (path, marker, f"trained by other code (digest {then[:12]}, now {now[:12]})")
                    )
    return found


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="suite config (YAML)")
    p.add_argument(
        "--forget",
        action="store_true",
        help="remove each stale run's metrics.json (and its search group's marker) so that "
        "Snakemake trains it again",
    )
    p.add_argument(
        "--code",
        action="store_true",
        help="instead: the runs of the suite's settings that other training code trained "
        "(Snakemake re-trains those only where its records say so; runs made by hand or copied in)",
    )


def run(args: argparse.Namespace) -> int:
    cfg = C.load_suite(args.config)
    from psrnn.engine import proofs

    # --forget deletes records: never while a restamp re-trains and stamps them (it had
    # ended on a bare "No such file" for the record it was proving: battery N-AB13)
    held = proofs.lock(cfg) if args.forget and C.results_root(cfg).is_dir() else None
    try:
        return _run(args, cfg)
    finally:
        if held is not None:
            held.close()


def _run(args: argparse.Namespace, cfg: dict) -> int:
    from psrnn.engine import proofs

    found = stale_runs(cfg, code=args.code)
    for path, marker, why in found:
        print(f"{path}: {why}")
        if args.forget:
            path.unlink()
            if marker is not None:
                marker.unlink(missing_ok=True)
    done = " (forgotten: the next Snakemake run trains them again)" if args.forget and found else ""
    what = "trained by other training code" if args.code else "of other settings"
    print(f"stale {cfg['name']}: {len(found)} finished run(s) {what}{done}")
    if args.code:  # runs a restamp stamped whose proof is gone look current: name them
        new = codehash.training_digest(registry.study_name(cfg))
        lost = proofs.lost(cfg, proofs.earlier_proofs(proofs.proof_path(cfg)), new)
        for path in lost:
            print(f"{path}: re-stamped by a restamp that {proofs.proof_path(cfg)} does not name")
        if lost:
            print(f"stale {cfg['name']}: {proofs.lost_line(cfg, lost, args.config)}")
    return 0
