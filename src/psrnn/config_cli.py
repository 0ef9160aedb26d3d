"""`python -m psrnn config <suite.yaml>`: validate a suite config and list its runs.

python -m psrnn config --list                     # every config: purpose, hardware, cost, results
python -m psrnn config config/paper.yaml          # one line per run
python -m psrnn config config/small.yaml --json   # the expanded plan, for tools
python -m psrnn config config/quick.yaml --dvc-params params.yaml   # what `dvc repro` runs
python -m psrnn config config/paper.yaml --params  # our parameter counts vs the paper's
"""

from __future__ import annotations

import argparse
import json
import logging

from psrnn import config as C
from psrnn import registry
from psrnn.errors import UserError
from psrnn.files import write_text


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", help="suite config (YAML)")
    p.add_argument(
        "--list",
        action="store_true",
        help="every file in config/: each suite config's purpose, hardware, cost and results folder "
        "(config/README.md)",
    )
    p.add_argument("--markdown", action="store_true", help="with --list: as config/README.md")
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
        help="with --dvc-params: the name DVC runs it under, ending in '-dvc' (default: the config's + "
        "'-dvc', so that DVC's runs and experiments never rewrite what Snakemake built under a suite's name)",
    )


def plan(cfg: dict) -> dict:
    """Every job the config implies: search points per experiment, then final runs."""
    out = {
        "name": cfg["name"],
        "datasets": C.enabled_datasets(cfg),
        "dataset_settings": {ds: chosen_settings(cfg, ds) for ds in C.enabled_datasets(cfg)},
        "experiments": {},
    }
    for name in C.enabled_experiments(cfg):
        exp = cfg["experiments"][name]
        out["experiments"][name] = {
            "dataset": exp["dataset"],
            "ref": exp.get("ref"),
            "search": [pid for pid, _ in C.grid_points(exp)] if C.has_grid(cfg, name) else [],
            "seeds": list(cfg["seeds"]),
        }
    return out


def chosen_settings(cfg: dict, dataset: str) -> dict:
    """The study's per-dataset settings (registry.Study.per_dataset) of one dataset: each
    with its value and evidence, or, where the config chose none, the value it falls back to."""
    study = registry.study_of(cfg)
    chosen = C.dataset_choices(cfg, dataset)
    out = {}
    for key in dict.fromkeys((*study.per_dataset, *chosen)):
        if key in chosen:
            out[key] = {"value": chosen[key][0], "evidence": chosen[key][1]}
        else:
            default = cfg.get("defaults", {}).get(key, getattr(study.settings()(), key))
            out[key] = {
                "value": default,
                "evidence": "not chosen for this dataset: the run settings' default",
            }
    return out


def run(args: argparse.Namespace) -> int:
    if args.list or args.markdown:
        if args.path or not args.list:
            raise UserError("--list takes no config file (--markdown goes with --list)")
        from psrnn import catalogue

        suites, others = catalogue.entries()
        print(catalogue.markdown(suites, others) if args.markdown else catalogue.text(suites, others), end="")
        return 0
    if not args.path:
        raise UserError("name a suite config (e.g. config/small.yaml), or --list for every config")
    if args.dvc_params:  # dvc_params loads and validates the config itself
        from psrnn.dvcparams import dvc_params

        write_text(args.dvc_params, dvc_params(args.path, args.dvc_name))
        logging.getLogger("psrnn").info(
            "wrote %s: %s resolved; `dvc repro` runs it", args.dvc_params, args.path
        )
        return 0
    cfg = C.load_suite(args.path)
    if args.params:
        study = registry.study_of(cfg)
        if study.params is None:
            raise UserError(
                f"{args.path}: study {study.name} has no parameter counts of its paper to compare"
            )
        registry.load(study.params)(cfg)
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
    for ds, chosen in p["dataset_settings"].items():
        for key, c in chosen.items():
            print(f"{ds} {key}: {c['value']} ({c['evidence']})")
    print(
        f"{cfg['name']}: {len(p['datasets'])} datasets, {len(p['experiments'])} experiments, "
        f"{n_runs} runs + {n_search} search runs"
    )
    return 0
