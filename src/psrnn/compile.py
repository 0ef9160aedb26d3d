"""`python -m psrnn compile --config <suite.yaml>`: every table, figure, the summary
metrics and REPORT.md of one suite config, from its finished runs, by its study's results
module (psrnn.registry; the first study's psrnn.studies.private_shared.results.compile, the
second's psrnn.studies.relreg.results). The same runs give byte-identical files, and the
outputs of one compile replace the old ones together (staged_outputs).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn import registry
from psrnn import workflow as W
from psrnn.errors import UserError

STAGING = ".compile-"  # a staging folder's name: this, then mkdtemp's random letters


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="suite config (YAML)")
    p.add_argument(
        "--reference",
        default=None,
        help="reference numbers (default: the file its study names, psrnn.registry.Study.reference)",
    )


def run(args: argparse.Namespace) -> int:
    cfg = C.load_suite(args.config)
    study = registry.study_of(cfg)
    results_dir = C.results_root(cfg)
    check_folder_study(cfg, args.config)
    with staged_outputs(results_dir, study.output_paths(cfg)) as staging:
        try:
            written = study.compile(cfg, staging, args.reference or C.ROOT / study.reference)
        except UserError as err:  # it names the files where the user finds them, not their links
            raise UserError(str(err).replace(str(staging), str(results_dir))) from None
    print(f"compile: {len(written)} files in {results_dir} (study {study.name})")
    for line in missing_lines(cfg):
        print(line, file=sys.stderr)
    return 0


def check_folder_study(cfg: dict[str, Any], source: str | Path) -> None:
    """Refuse a results folder another study's compile wrote: its metrics.json names the
    study (`study`). A config of one study named like another's suite (`name: small` over
    relreg-ci.yaml) compiled into results/small and replaced the first study's committed
    REPORT.md, metrics.json and scores.json (battery N28). A metrics.json without `study`
    is the first study's: its compile never wrote the field (the second study's always
    has), which is how a suite config without `study:` reads too (registry.study_name). A
    folder without one, or one that does not read, is no other study's compile: this one
    writes it."""
    folder = C.results_root(cfg)
    try:
        summary = json.loads((folder / "metrics.json").read_text())
    except (OSError, ValueError):
        return
    if not isinstance(summary, dict) or (was := registry.study_name(summary)) == registry.study_name(cfg):
        return
    raise UserError(
        f"{source}: {folder} holds study {was}'s compiled results (its metrics.json), not study "
        f"{registry.study_name(cfg)}'s: give this config a name of its own; nothing was written"
    )


def missing_lines(cfg: dict) -> list[str]:
    """A warning line for the final runs, and one for the grid search's runs, of the suite
    that have no metrics.json (unfinished, or deleted), naming how many and the first ([]:
    every one is there). A compile by hand with one missing once said only "compile: N
    files", though verdict cells (final runs: battery N06) or the grid tables and figures
    (search runs: N-AB21) had changed; REPORT.md says "339 of 340 finished", this says it
    where the command ran."""
    kinds = [
        ("final runs", W.final_metrics(cfg)),  # what Snakemake's compile job waits for
        ("search runs", [p for e in C.enabled_experiments(cfg) for p in W.search_metrics(cfg, e)]),
    ]
    lines = []
    for kind, paths in kinds:
        missing = [p for p in map(Path, paths) if not p.is_file()]
        if missing:
            counted = (
                "the tables and verdicts count"
                if kind == "final runs"
                else "the search's tables and figures count"
            )
            lines.append(
                f"compile: warning: {len(missing)} of {len(paths)} {kind} not finished (no metrics.json; "
                f"first: {missing[0]}): {counted} the {len(paths) - len(missing)} that are"
            )
    return lines


@contextlib.contextmanager
def staged_outputs(results_dir: Path, outputs: list[Path]) -> Iterator[Path]:
    """A staging folder for one compile: it holds links to everything in `results_dir` but
    the outputs' top-level entries (the runs and notes compile reads), the compile writes
    its outputs into it, and they replace the old ones together when it ends. A compile
    stopped half-way (an error, SIGINT, SIGTERM) changes no output: tables, figures and
    REPORT.md never disagree. The staging folder is removed either way, and one a killed
    compile left (kill -9) by the next compile of the folder (remove_stale_staging)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    produced = {p.relative_to(results_dir).parts[0] for p in outputs}
    with _locked(results_dir):  # no other compile makes or removes a staging folder meanwhile
        remove_stale_staging(results_dir)
        staging = Path(tempfile.mkdtemp(prefix=STAGING, dir=results_dir))
        held = os.open(staging, os.O_RDONLY)
        fcntl.flock(held, fcntl.LOCK_EX)  # ours while this process lives
    try:
        for entry in sorted(results_dir.iterdir()):
            if entry.name not in produced and not entry.name.startswith(STAGING):
                (staging / entry.name).symlink_to(entry.resolve())
        yield staging
        moves = [
            (Path(folder) / name, results_dir / Path(folder).relative_to(staging) / name)
            for folder, dirs, files in os.walk(staging)  # links are not followed into
            for name in files
            if not (Path(folder) / name).is_symlink()
        ]
        for src, dst in moves:
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        os.close(held)


def remove_stale_staging(results_dir: Path) -> None:
    """Remove the staging folders of compiles that were killed before their cleanup (kill -9,
    a lost node): each compile holds an flock on its own staging folder while it lives, and
    the kernel drops it with the process, so a folder nobody holds is stale. A running
    compile's is kept."""
    for folder in results_dir.glob(f"{STAGING}*"):
        if folder.is_symlink() or not folder.is_dir():
            continue
        fd = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a compile at work
        else:
            shutil.rmtree(folder, ignore_errors=True)  # its links are removed, not followed
        finally:
            os.close(fd)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An flock on `folder` itself while the block runs (waits for another holder)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
