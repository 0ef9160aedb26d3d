"""One cell of Table 2 and the runs behind it, for `python -m psrnn explain` (psrnn.explain
prints it).

    python -m psrnn explain --config config/mnist-real.yaml --table table2 --row mnist_gru

A Table 2 row has one compared column, the test accuracy: its value is recomputed from the
runs' metrics.json (tables.accuracy: mean, sample std and the 95 % t-interval cut to
[0, 100]) with REPORT.md's verdict (numbers.row_verdict), and set beside the compiled
table's CSV row.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.explain import Cell, compiled_row, pick
from psrnn.report import fmt
from psrnn.report.collect import Suite, gather, load_reference, load_settings
from psrnn.report.stats import MARGIN_PP
from psrnn.studies.private_shared.results.numbers import row_verdict, rows_run, scale_of
from psrnn.studies.private_shared.results.tables import accuracy

TABLES = {"table2": "Table 2: test accuracy"}
COLUMNS = {"acc": "accuracy"}  # Table 2's one column that is compared with the paper


def explain(
    cfg: dict[str, Any], results_dir: Path, reference_path: Path, table: str, row: str, column: str | None
) -> Cell:
    reference = load_reference(reference_path)
    name = pick("table", table, TABLES, f"config {cfg['name']}")
    exps = C.enabled_experiments(cfg)
    light = Suite(cfg, reference, {}, load_settings(cfg, {e: [] for e in exps}), {})  # no runs read yet
    named = {e: ref["id"] for ref, e in rows_run(light, name)}
    exp = pick("row", row, named, name)
    pick("column", column or "acc", COLUMNS, name)
    s = gather(cfg, reference, results_dir, C.data_root(cfg))
    ref = next(r for r in reference[name] if r["id"] == named[exp])
    runs = s.runs.get(exp, [])
    values = [None if math.isnan(r.value("test_acc")) else 100.0 * r.value("test_acc") for r in runs]
    ours = accuracy(s, exp)  # from these runs, as REPORT.md's line and the verdict take it
    verdict = row_verdict(ref["acc"], ours, scale_of(s))
    lines = [
        f"paper {fmt.num(ref['acc'], 1)} %; equivalence margin ±{MARGIN_PP:g} pp",
        f"ours {fmt.mean_std(ours)}, 95% CI {fmt.ci(ours)} over {ours.n} runs: test accuracy, mean ± sample "
        "std, Student's t-interval cut to [0, 100]",
        f"verdict: {verdict}",
        compiled(results_dir / "tables" / f"{name}.csv", exp, ours),
    ]
    return Cell(
        table=name,
        title=TABLES[name],
        row=f"{exp} ({named[exp]})",
        column=COLUMNS["acc"],
        experiment=exp,
        runs=tuple(runs),
        values=tuple(values),
        unit="%",
        lines=tuple(lines),
    )


def compiled(path: Path, exp: str, ours: Any) -> str:
    """The compiled CSV's numbers of the row, and whether the recomputed ones are they (to the
    CSV's 6 decimals)."""
    row = compiled_row(path, {"experiment": exp})
    if row is None:
        return f"compiled {path}: no row for it (compile again)"
    got = [float(row[k]) if row[k] else math.nan for k in ("acc_mean", "acc_ci_low", "acc_ci_high")]
    mine = [ours.mean, ours.ci_low, ours.ci_high]
    same = all(abs(a - b) < 1e-5 or (math.isnan(a) and math.isnan(b)) for a, b in zip(got, mine))
    shown = "—" if math.isnan(got[0]) else f"{got[0]:.2f} [{got[1]:.2f}, {got[2]:.2f}]"
    return f"compiled {path}: {shown}: " + ("the same" if same else "differs from the runs' (compile again)")
