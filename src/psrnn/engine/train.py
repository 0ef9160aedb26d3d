"""Train one run of any study: `python -m psrnn train` (its command line; the run itself
is psrnn.engine.fit.fit with the study's hooks, psrnn.registry).

    python -m psrnn train --config config/small.yaml --experiment mnist_gru --seed 0
    python -m psrnn train --config config/small.yaml --experiment mnist_ps30_predrec_a4 --point lr-0.01
    python -m psrnn train --config config/small.yaml --experiment mnist_ps30_predrec_a4 --seed 1 \
        --selected results/small/search/mnist_ps30_predrec_a4/selected.json
    python -m psrnn train --config run.yaml --out results/scratch/run1   # a flat RunConfig YAML
    python -m psrnn train --config config/relreg.yaml --experiment proto_both --seed 0 \
        --selected results/relreg/search/proto_both/selected.json

An experiment with a grid trains its final runs (their default folder) only at the point
select chose (--selected); at its defaults it needs --out. A run with --set needs --out
(any experiment, final or search run): the suite's folders hold runs at its settings.

Writes into the run directory (default `results/<name>/runs/<exp>/seed<k>/`, or
`results/<name>/search/<exp>/<point>/` with --point):
    history.csv        one row per epoch (rewritten every epoch)
    ckpt_best.pt       model of the best validation score so far
    ckpt_last.pt       everything needed to resume (model, optimizer, scheduler, RNG and
                       generator states, history, early-stopping state, captured states)
    ...                the study's own files (first study: grad_norms.npz and
                       hidden_states.npz, psrnn.studies.private_shared.hooks; second: loading.npz,
                       psrnn.studies.relreg.hooks)
    metrics.json       written last: its presence means the run is complete

psrnn.engine.fit says how a run resumes, stops and records itself.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.engine import jobenv
from psrnn.engine.checkpoint import refuse_foreign
from psrnn.engine.fit import fit
from psrnn.engine.selection import overrides_for, read_selected, refuse_switched_off
from psrnn.engine.settings import RunSettings
from psrnn.errors import UserError

# --- command line ------------------------------------------------------------------------


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="suite config (with experiments) or a flat run YAML")
    p.add_argument("--experiment", help="experiment name in the suite config")
    p.add_argument("--seed", type=int, help="seed (suite default: its first seed)")
    p.add_argument("--point", help="grid point id (a search run)")
    p.add_argument("--selected", help="selected.json of the experiment's search (final runs)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a run setting (YAML value), e.g. --set lr=0.1; repeatable",
    )
    p.add_argument("--out", help="run directory (default from the suite config's path conventions)")
    p.add_argument(
        "--restart-on-change",
        action="store_true",
        help="start over when the run directory's checkpoint was written with other "
        "settings (default: that is an error); Snakemake's rules pass it",
    )
    p.add_argument(
        "--reuse",
        metavar="RUN_DIR",
        help="start from RUN_DIR's checkpoint when it is of the same run (settings, seed, "
        "data); otherwise train as usual. Default with --selected and the suite's first seed: "
        "the search run of the selected point, which is that run",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="CPU threads of this run (torch.set_num_threads; default: the suite's "
        "resources.train.threads, 1 unless set, as Snakemake's jobs run it: a CPU run's numbers "
        "depend on it)",
    )


def resolve_args(args: argparse.Namespace) -> tuple[RunSettings, Path, dict[str, Any]]:
    """(run config, run directory, metadata for metrics.json) from the command line."""
    raw = C.load_yaml(args.config)
    overrides = C.parse_set(args.set)
    if "seed" in overrides:  # the seed picks the run folder and the search's reuse: one way to set it
        raise UserError(f"--set seed={overrides['seed']}: use --seed {overrides['seed']}")
    if "experiments" not in raw:  # a flat RunConfig YAML
        if not args.out:
            raise UserError(f"{args.config} is a single-run config: --out <dir> is required")
        if args.experiment or args.point or args.selected:
            raise UserError("--experiment/--point/--selected need a suite config")
        values = {**raw, **overrides}
        if args.seed is not None:
            values["seed"] = args.seed
        cfg = C.coerce_run(values)
        stem = Path(args.config).stem
        meta = {"experiment": stem, "config_name": stem, "point": None}
        return cfg, refuse_foreign(Path(args.out)), meta
    suite = C.load_suite(args.config)
    if not args.experiment:
        raise UserError(
            f"{args.config} is a suite config: --experiment is required; known: "
            f"{', '.join(sorted(suite['experiments']))}"
        )
    refuse_switched_off(suite, args.experiment, args.config)
    if args.point and args.selected:
        raise UserError("--point (a search run) and --selected (a final run) exclude each other")
    selected = None
    if args.seed is not None:
        seed = args.seed
    else:  # a search run: the search seed; a final run: the first final seed
        seed = C.search_seed(suite) if args.point else suite["seeds"][0]
    if args.selected:
        sel = read_selected(args.selected, args.experiment)
        point, selected = overrides_for(sel, seed)
        if seed == C.search_seed(suite) and point and args.reuse is None:
            # the search trained the selected point with this seed: the same run (adopt checks)
            args.reuse = str(C.search_dir(suite, args.experiment, point))
    cfg = C.resolve_run(
        suite, args.experiment, seed, point=args.point, selected=selected, overrides=overrides
    )
    if args.out:
        out = refuse_foreign(Path(args.out))
    elif not args.point and not args.selected and C.has_grid(suite, args.experiment):
        # its final runs' folders hold runs at the selected point: one at the defaults there
        # would pass for the suite's (and --restart-on-change would overwrite a finished one)
        raise UserError(
            f"{args.experiment} has a grid: its runs in {C.run_dir(suite, args.experiment, seed).parent} "
            f"train at the point select chose (--selected {C.selection_path(suite, args.experiment)}); "
            "give that, --point ID for a search run, or --out DIR for a run at the defaults"
        )
    else:
        out = (
            C.search_dir(suite, args.experiment, args.point)
            if args.point
            else C.run_dir(suite, args.experiment, seed)
        )
        if overrides:  # the suite's folders hold runs at its settings: this one would pass for the suite's
            raise UserError(
                f"--set {', '.join(overrides)}: {out} holds the suite's run at {args.config}'s settings, "
                "not one with --set; give --out DIR for this run"
            )
    meta = {"experiment": args.experiment, "config_name": suite["name"], "point": args.point}
    return cfg, out, meta


def run(args: argparse.Namespace) -> int:
    cfg, out, meta = resolve_args(args)
    jobenv.set_threads(args.threads, args.config)
    metrics = fit(cfg, out, meta, restart_on_change=args.restart_on_change, reuse=args.reuse)
    print(
        f"test_acc {metrics['test_acc']:.4f} (best valid {metrics['best_valid_acc']:.4f} "
        f"at epoch {metrics['best_epoch']}) -> {out / 'metrics.json'}"
    )
    return 0
