"""restamp's proof file, `results/<name>/restamp.json`, and what it covers (psrnn.engine.restamp).

Every restamp appends a record to it before it stamps anything: the digests it moved from
and to, the runs it re-trained (`retrained`) and the runs it stamps (`restamped`; a final
run that took a re-trained search run's record is among them), the selections, the
machine, the command, and `complete` (false until every stamp, checkpoint and Snakemake
record is done; an interrupted restamp's record is finished by the next one). Each stamped
metrics.json keeps the digest it had before (`restamped_from`), so a run that a restamp
stamped is told from one that today's code trained even when the proof file is gone: such
a run in no proof is "unproven" (`stale --code` names it, `restamp --verify` re-trains it),
and the fix is to restore restamp.json from git. Runs stamped before restamp recorded
`restamped_from` (the committed results') carry none: for them a deleted proof file cannot
be told from training by today's code, and only git's copy of restamp.json holds their proof.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.errors import UserError
from psrnn.files import read_json


def finals(cfg: dict[str, Any], exp: str) -> list[Path]:
    """The records of the experiment's final runs, by seed."""
    return [Path(C.run_dir(cfg, exp, s)) / "metrics.json" for s in cfg["seeds"]]


def searches(cfg: dict[str, Any], exp: str, points: list[str] | None = None) -> list[Path]:
    """The records of the experiment's search runs (of `points`; default: its grid's), in
    grid order."""
    if points is None:
        points = [pid for pid, _ in C.grid_points(cfg["experiments"][exp])] if C.has_grid(cfg, exp) else []
    return [Path(C.search_dir(cfg, exp, pid)) / "metrics.json" for pid in points]


def proof_path(cfg: dict[str, Any]) -> Path:
    return C.results_root(cfg) / "restamp.json"


LOCK_NAME = ".restamp.lock"  # beside restamp.json; ignored by git (.gitignore)


def lock(cfg: dict[str, Any]) -> Any:
    """An exclusive lock on the suite's results folder for this process' life (released when
    it ends, however): a second restamp of it is a UserError. restamp takes it before it reads
    restamp.json and holds it through every write, so proofs are read, merged and written by
    one restamp at a time. The lock file is `results/<name>/.restamp.lock`, a path of the
    folder alone: it once lived in the temp folder, and two restamps under different TMPDIR
    (two cluster jobs) both ran, restamp.json keeping one proof of the two. Not the folder
    itself: compile flocks that (psrnn.compile), and would wait for a whole restamp."""
    import fcntl

    root = C.results_root(cfg)
    root.mkdir(parents=True, exist_ok=True)
    fh = open(root / LOCK_NAME, "a")  # noqa: SIM115 (held)
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise UserError(f"another restamp of {C.results_root(cfg)} is running: wait for it to end") from None
    return fh


def earlier_proofs(path: Path) -> list[dict[str, Any]]:
    """restamp.json's proofs so far ([] without the file); a damaged one is a UserError before
    anything trains (its proofs would be lost by writing a new file)."""
    if not path.exists():
        return []
    if not path.is_file():
        raise UserError(f"{path}: not a file (restamp writes its proof there): move it away and run again")
    restore = f"restore it from git (git checkout -- {path}) and run again"
    found = read_json(path, remedy=restore)  # truncated: deleting it would lose its proofs
    if not isinstance(found, dict) or not isinstance(found.get("restamps"), list):
        raise UserError(f"{path}: no 'restamps' list; {restore}")
    for i, proof in enumerate(found["restamps"]):
        if problem := damaged(proof):
            raise UserError(f"{path}: restamps[{i}]{problem}; {restore}")
    return found["restamps"]


PROOF_FIELDS: dict[
    str, type
] = {  # what a proof record's fields hold, where it has them (older ones lack some)
    **dict.fromkeys(("from", "retrained", "restamped", "verified", "restamped_selections"), list),
    **dict.fromkeys(("to", "machine", "command"), str),
    **dict.fromkeys(("restamped_runs", "left_stale", "left_unproven"), int),
    "complete": bool,
}


def damaged(proof: Any) -> str | None:
    """What is wrong with one proof record (None: nothing): the fields restamp reads, typed."""
    if not isinstance(proof, dict):
        return f" is {type(proof).__name__} {proof!r:.40}, not a proof record"
    for key, kind in PROOF_FIELDS.items():
        value = proof.get(key)
        if value is None:
            continue
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            return f".{key} is {value!r:.40}, not a count"
        if not isinstance(value, kind) or (
            isinstance(value, list) and not all(isinstance(v, str) for v in value)
        ):
            return f".{key} is {value!r:.40}, not {'a list of paths' if kind is list else kind.__name__}"
    return None


def unproven(cfg: dict[str, Any], earlier: list[dict[str, Any]], new: str) -> list[Path]:
    """The finished runs that record today's digest `new` though no proof in restamp.json
    names them (re-trained, stamped or verified), in experiment, final-then-search order: a
    run stamped by a restamp (`restamped_from`) whose proof is gone, and, where a proof from
    before restamp named what it stamped reached `new`, any such run (an earlier restamp
    stamped it from a sample). A final run that took a named run's record is covered by it.
    Only a proof to `new` names a run for it: a run stamped by hand to today's digest, or
    whose proof to it was deleted, had passed as named by an older proof (the confirming pass
    of stop 62, 3i/3j)."""
    named = {
        r
        for p in earlier
        if p.get("to") == new
        for k in ("retrained", "verified", "restamped")
        for r in p.get(k, [])
    }
    # a restamp's record from before they named what they stamped (a sample's stamps unproven)
    sampled = any(p.get("to") == new and "restamped_runs" in p and "restamped" not in p for p in earlier)
    out = []
    for exp in C.enabled_experiments(cfg):
        for path in finals(cfg, exp) + searches(cfg, exp):
            if not path.is_file() or str(path) in named:
                continue
            record = read_json(path)
            source = record.get("reused_from")
            if record.get("training_code") != new or (source and str(Path(source) / "metrics.json") in named):
                continue
            if sampled or record.get("restamped_from"):
                out.append(path)
    return out


def lost(cfg: dict[str, Any], earlier: list[dict[str, Any]], new: str) -> list[Path]:
    """The runs that record a restamp (`restamped_from`) to `new` that restamp.json does not
    name: its record deleted or the file replaced."""
    return [p for p in unproven(cfg, earlier, new) if read_json(p).get("restamped_from")]


def lost_line(cfg: dict[str, Any], runs: list[Path], config: str) -> str:
    path = proof_path(cfg)
    return (
        f"{len(runs)} run(s) were re-stamped by a restamp that {path} does not name (first: {runs[0]}): "
        f"restore it from git (git checkout -- {path}), or re-train and prove them with "
        f"python -m psrnn restamp --config {config} --verify"
    )
