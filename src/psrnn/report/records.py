"""The checks of one finished run's record beyond its keys and settings (psrnn.report.collect.
suite_run reads a record through them, for compile and `stale`): per-length results where
the settings name the lengths, the keys a record derives from its own values, and the CPU
kernel variables it was trained under. Each failure is a UserError naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from psrnn.errors import UserError

LENGTH_ACCURACIES = ("seq_acc", "bit_acc")  # fractions in [0, 1], per test length (`test`: bits -> ...)


def check_lengths(path: Path, m: dict[str, Any], run: Any) -> None:
    """A record's per-length results (`test`: length -> seq_acc, bit_acc, count; the second
    study's) where its settings name the lengths (`test_bits`): exactly those lengths, each
    with both accuracies and its count of test numbers, a positive integer: `test_count`, or
    every number of that length where there are fewer (psrnn.studies.relreg.data.numbers_for).
    A length the suite never tests once became a column of Table 4.5, a missing one a cell
    from one seed fewer, a count of -1 a row of table45.csv; each is a UserError naming the
    file."""
    bits = getattr(run, "test_bits", None)
    if bits is None:
        return
    test = m.get("test")
    want = [str(b) for b in bits]
    lengths = f"the suite's test_bits {', '.join(want)}"
    if not isinstance(test, dict):
        raise UserError(
            f"{path}: test = {test!r} holds no results per length of {lengths}; delete its folder"
        )
    if extra := [str(k) for k in test if k not in want]:
        raise UserError(
            f"{path}: test holds length(s) {', '.join(extra)}, not of {lengths}; delete its folder"
        )
    if missing := [k for k in want if k not in test]:
        raise UserError(f"{path}: test has no length(s) {', '.join(missing)} of {lengths}; delete its folder")
    count = getattr(run, "test_count", None)
    for b in bits:
        t = test[str(b)]
        absent = [f for f in (*LENGTH_ACCURACIES, "count") if not isinstance(t, dict) or f not in t]
        if absent:
            raise UserError(f"{path}: test.{b} has no {', '.join(absent)}; delete its folder")
        n, expected = t["count"], None if count is None else min(int(count), 1 << int(b))
        if isinstance(n, bool) or not isinstance(n, int) or n < 1 or (expected is not None and n != expected):
            what = "a positive integer" if expected is None else f"{expected} (test_count {count})"
            raise UserError(f"{path}: test.{b}.count = {n!r}, not {what}; delete its folder")


# keys of a record that training derives from others of it: key -> (per-length field, or the
# keys it is the sum of); psrnn.studies.relreg.hooks.finish, psrnn.studies.private_shared.models.count_params
LENGTH_MEANS = {"test_acc": "seq_acc", "test_bit_acc": "bit_acc"}
PARAM_PARTS = ("params_main", "params_head", "params_aux")


def check_derived(path: Path, m: dict[str, Any], run: Any) -> None:
    """The keys a record derives from its own values, recomputed exactly as training does:
    the second study's test_acc and test_bit_acc (np.mean of the per-length seq_acc and
    bit_acc over `test_bits`), the first study's params (the sum of its parts). A hand edit
    of one (a test_acc of 0.45 beside lengths averaging 0.3693 once changed Table 4.5) is a
    UserError naming the file and both values."""
    bits = getattr(run, "test_bits", None)
    if bits is not None:
        for key, field_ in LENGTH_MEANS.items():
            if key in m:
                want = float(np.mean([m["test"][str(b)][field_] for b in bits]))
                if m[key] != want:
                    raise UserError(
                        f"{path}: {key} = {m[key]!r}, but the mean of its test.<length>.{field_} is "
                        f"{want!r} (edited); delete its folder"
                    )
    if parts := [k for k in PARAM_PARTS if k in m]:  # the first study's: all of them, with params
        if missing := [k for k in ("params", *PARAM_PARTS) if k not in m]:
            # one deleted had switched the sum check off (the confirming pass of stop 62, P-3)
            raise UserError(
                f"{path}: holds {', '.join(parts)} but no {', '.join(missing)} (edited); delete its folder"
            )
        want_n = sum(m[k] for k in PARAM_PARTS)
        if m["params"] != want_n:
            raise UserError(
                f"{path}: params = {m['params']!r}, but {' + '.join(PARAM_PARTS)} = {want_n!r} (edited); "
                "delete its folder"
            )


def check_kernel_env(path: Path, m: dict[str, Any], cfg: dict[str, Any]) -> None:
    """A record's `kernel_env` (the CPU-kernel variables it trained under,
    psrnn.engine.checkpoint.KERNEL_ENV) against the suite's job_env: a run trained outside
    it (a by-hand command that skipped the job_env: battery N-AB2/N-AB3 gave 0.635 where the
    suite's runs give 0.655) is no run of the suite. Every record psrnn writes holds it (all
    7,496 committed ones do): one without it, or with no mapping there, was edited (battery
    J-8: the key deleted had passed the check). Only the variables the suite's job_env sets
    are compared: a suite that sets none leaves them to the machine its jobs run on (a shell
    that exports MKL_CBWR trains every run under it)."""
    from psrnn.engine.checkpoint import KERNEL_ENV

    saved = m.get("kernel_env")
    if not isinstance(saved, dict):
        raise UserError(
            f"{path}: kernel_env = {saved!r}, not the CPU kernel variables its run trained under "
            "(edited); delete its folder"
        )
    env = cfg.get("job_env") or {}
    other = [
        f"{k} {saved.get(k)!r}, job_env {env.get(k)!r}"
        for k in KERNEL_ENV
        if k in env and saved.get(k) != env.get(k)
    ]
    if other:
        raise UserError(
            f"{path}: trained under other CPU kernel variables than the suite's job_env "
            f"({'; '.join(other)}); "
            "`python -m psrnn stale --config <config> --forget` has Snakemake train it again"
        )


def differing_keys(cfg: dict[str, Any], a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The keys two records of one run hold differently (exactly): the study's regression keys,
    then `test`, its per-length accuracies where it has them. What restamp compares a run
    trained again by (psrnn.engine.retrain.differences), and compile a reused record by."""
    from psrnn import registry

    return [k for k in (*registry.study_of(cfg).regression_keys, "test") if a.get(k) != b.get(k)]


def check_reused(path: Path, m: dict[str, Any], cfg: dict[str, Any]) -> None:
    """A final run that took its search run's record as its own (`reused_from`,
    psrnn.engine.checkpoint.adopt_finished) holds that record's numbers (differing_keys, as
    `restamp` compares them). One edited apart from its source (the confirming pass of stop
    62, 1i': a coherent edit of a reused relreg record moved Table 4.5's bit accuracy 35.94
    -> 45.94) is a UserError naming both files. A source that is gone is not compared
    (compile warns of a missing search run)."""
    from psrnn.files import read_json

    source = m.get("reused_from")
    found = Path(str(source)) / "metrics.json" if source else None
    if found is None or not found.is_file():
        return
    theirs = read_json(found)
    if isinstance(theirs, dict) and (differ := differing_keys(cfg, m, theirs)):
        raise UserError(
            f"{path}: took the record of {source} but differs from it in {', '.join(differ)} (edited); "
            "delete its folder"
        )
