"""The first study's parameter counts beside the paper's #Param (`python -m psrnn config
config/paper.yaml --params`; psrnn.registry names print_params for the first study).
"""

from __future__ import annotations

from typing import Any

from psrnn import config as C
from psrnn.studies.private_shared.datasets import REGISTRY


def print_params(cfg: dict) -> None:
    """Our parameter counts beside the paper's (param_table; meta device)."""

    reference = C.load_yaml(C.ROOT / "config" / "reference.yaml")
    print(f"{'experiment':28s} {'ref':34s} {'hidden':>6s} {'ours':>11s} {'paper':>11s} ratio")
    for r in param_table(cfg, reference):
        paper, ratio = (f"{r['paper']:11,d}", f"{r['ratio']:.3f}") if r["paper"] else (f"{'—':>11s}", "—")
        print(
            f"{r['experiment']:28s} {r['ref'] or '—':34s} {r['hidden']:6d} {r['ours']:11,d} {paper} {ratio}"
        )


def param_table(cfg: dict[str, Any], reference: dict[str, Any]) -> list[dict[str, Any]]:
    """[{experiment, ref, hidden, ours, paper, ratio}] for every enabled experiment, counted
    on the meta device (no data); ref, paper and ratio are None for an experiment without a
    paper count (no `ref:`, or a row without #Param: Table 2 and Table 4 rows have one)."""
    from psrnn.studies.private_shared.models import param_counts

    paper = {
        row["id"]: row.get("params") for table in ("table2", "table4") for row in reference.get(table, [])
    }
    rows = []
    for name in C.enabled_experiments(cfg):
        ref = cfg["experiments"][name].get("ref")
        run = C.resolve_run(cfg, name, cfg["seeds"][0])
        ds = REGISTRY[run.dataset]  # the input's shape; a text alphabet may be set by the config
        features = ds.input_features(cfg["datasets"][run.dataset].get("prepare"))
        ours = param_counts(run, ds.input, features, ds.classes)["params"]
        rows.append(
            {
                "experiment": name,
                "ref": ref,
                "hidden": run.hidden,
                "ours": ours,
                "paper": paper.get(ref),
                "ratio": ours / paper[ref] if paper.get(ref) else None,
            }
        )
    return rows
