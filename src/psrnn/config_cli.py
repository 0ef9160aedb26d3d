"""`python -m psrnn config <suite.yaml>`: validate a suite config and list its runs.

python -m psrnn config config/paper.yaml          # one line per run
python -m psrnn config config/small.yaml --json   # the expanded plan, for tools
python -m psrnn config config/quick.yaml --dvc-params params.yaml   # what `dvc repro` runs
python -m psrnn config config/paper.yaml --params  # our parameter counts vs the paper's
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from psrnn import config as C
from psrnn.datasets import REGISTRY
from psrnn.files import write_text


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="suite config (YAML)")
    p.add_argument("--json", action="store_true", help="print the expanded plan as JSON")
    p.add_argument(
        "--params",
        action="store_true",
        help="print each experiment's parameter count beside the paper's #Param (— without one)",
    )
    p.add_argument(
        "--dvc-params",
        metavar="FILE",
        help="write the config resolved (extends: merged) to FILE for DVC (params.yaml)",
    )
    p.add_argument(
        "--dvc-name",
        metavar="NAME",
        help="with --dvc-params: the name DVC runs it under (default: the config's + '-dvc', so "
        "that DVC's runs and experiments never rewrite what Snakemake built under the config's name)",
    )


def plan(cfg: dict) -> dict:
    """Every job the config implies: search points per experiment, then final runs."""
    out = {"name": cfg["name"], "datasets": C.enabled_datasets(cfg), "experiments": {}}
    for name in C.enabled_experiments(cfg):
        exp = cfg["experiments"][name]
        out["experiments"][name] = {
            "dataset": exp["dataset"],
            "ref": exp.get("ref"),
            "search": [pid for pid, _ in C.grid_points(exp)] if C.has_grid(cfg, name) else [],
            "seeds": list(cfg["seeds"]),
        }
    return out


def run(args: argparse.Namespace) -> int:
    if args.dvc_params:  # dvc_params loads and validates the config itself
        from psrnn.dvcparams import dvc_params

        write_text(args.dvc_params, dvc_params(args.path, args.dvc_name))
        print(f"wrote {args.dvc_params}: {args.path} resolved; `dvc repro` runs it")
        return 0
    cfg = C.load_suite(args.path)
    if args.params:
        print_params(cfg)
        return 0
    p = plan(cfg)
    if args.json:
        print(json.dumps(p, indent=2, sort_keys=True))
        return 0
    n_runs = n_search = 0
    for name, e in p["experiments"].items():
        n_runs += len(e["seeds"])
        n_search += len(e["search"])
        grid = f", grid {len(e['search'])} points" if e["search"] else ""
        print(f"{name:28s} {e['dataset']:8s} seeds {e['seeds']}{grid}")
    print(
        f"{cfg['name']}: {len(p['datasets'])} datasets, {len(p['experiments'])} experiments, "
        f"{n_runs} runs + {n_search} search runs"
    )
    return 0


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
    from psrnn.models import param_counts

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
