"""The training-recipe study on real digits: `python -m psrnn recipe`.

    python -m psrnn recipe --digits ../shared/data/mnist-test            # config/recipe.yaml
    python -m psrnn recipe --digits ../shared/data/mnist-test --only paper,shipped --jobs 2

Cuts the digits (`psrnn.data.digits`), prepares them as the study says, trains every recipe
(config/paper.yaml's experiment + the recipe's keys, `training.train`, so runs resume and a
finished run is reused) and writes `recipe.csv` (one row per recipe and epoch) and
`recipe.md` (validation accuracy per recipe after each epoch) into --out. Data go to
data/recipe/ and runs to <out>/runs/<recipe>-<settings digest>/.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.errors import UserError
from psrnn.files import read_json, write_text

STUDY = C.ROOT / "config" / "recipe.yaml"
STUDY_KEYS = {"suite", "experiment", "digits", "epochs", "seed", "recipes"}
CSV_COLUMNS = ("recipe", "epoch", "train_main_loss", "train_acc", "valid_main_loss", "valid_acc")


def load_study(path: str | Path = STUDY) -> dict[str, Any]:
    """The study file, its suite config loaded and validated; unknown keys are an error."""
    path = Path(path)
    study = C.load_yaml(path)
    unknown = sorted(set(study) - STUDY_KEYS)
    missing = sorted(STUDY_KEYS - set(study))
    if unknown or missing:
        raise C.ConfigError(f"{path}: unknown keys {unknown}, missing keys {missing}")
    if not study["recipes"]:
        raise C.ConfigError(f"{path}: recipes: none listed")
    study["suite_config"] = C.load_suite(path.parent / study["suite"])
    return study


def recipe_configs(
    study: dict[str, Any], data_dir: str | Path, only: list[str] | None = None
) -> dict[str, C.RunConfig]:
    """recipe name -> RunConfig: the suite experiment with the recipe's keys on top, run
    for exactly `epochs` epochs (no early stopping) on the CPU from `data_dir`."""
    names = only or list(study["recipes"])
    unknown = [n for n in names if n not in study["recipes"]]
    if unknown:
        raise C.ConfigError(f"unknown recipe(s) {', '.join(unknown)}; known: {', '.join(study['recipes'])}")
    fixed = {
        "max_epochs": study["epochs"],
        "patience": 0,
        "data_dir": str(data_dir),
        "device": "cpu",
        "progress": "plain",
    }
    configs = {}
    for name in names:
        try:
            configs[name] = C.resolve_run(
                study["suite_config"],
                study["experiment"],
                study["seed"],
                overrides={**(study["recipes"][name] or {}), **fixed},
            )
        except (C.ConfigError, TypeError) as err:
            raise C.ConfigError(f"recipes.{name}: {err}") from None
    return configs


def prepare_digits(study: dict[str, Any], digits: str | Path, data_root: str | Path) -> Path:
    """Cut and prepare the real digits once; returns the prepared folder."""
    from psrnn.data.digits import split_digits
    from psrnn.data.prepare import prepare

    root = Path(data_root)
    prepared = root / "prepared" / "mnist"
    d = study["digits"]
    opts = {"downsample": d["downsample"], "valid_size": d["valid_size"]}
    manifest = prepared / "manifest.json"
    if manifest.is_file():  # reuse only data cut and prepared as this study says
        m = read_json(manifest)
        same = all(m["options"].get(k) == v for k, v in opts.items())
        if same and m["counts"]["train"] + m["counts"]["valid"] == d["train"]:
            return prepared
    split_digits(digits, root / "raw" / "mnist", d["train"])
    prepare("mnist", root / "raw" / "mnist", prepared, opts)
    return prepared


def _train_one(args: tuple[str, C.RunConfig, str]) -> tuple[str, list[dict[str, float]]]:
    """Worker: one recipe on one thread; returns (name, history rows)."""
    import torch

    from psrnn.training import train

    name, cfg, out = args
    torch.set_num_threads(1)
    log_path = Path(out) / "train.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a") as fh:
        train(
            cfg,
            out,
            {"experiment": name, "config_name": "recipe"},
            log=lambda msg: (fh.write(msg + "\n"), fh.flush()),
        )
    return name, read_history(Path(out) / "history.csv")


def read_history(path: Path) -> list[dict[str, float]]:
    with path.open() as fh:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def run_dir(out: str | Path, name: str, cfg: C.RunConfig) -> Path:
    """<out>/runs/<recipe>-<digest of its settings>: a finished run is reused only while the
    recipe and paper.yaml give the same settings; an edit trains a new run beside it."""
    digest = hashlib.md5(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
    return Path(out) / "runs" / f"{name}-{digest}"


def run_study(
    study: dict[str, Any],
    digits: str | Path,
    out: str | Path,
    data_root: str | Path = "data/recipe",
    only: list[str] | None = None,
    jobs: int = 1,
) -> tuple[dict[str, C.RunConfig], dict[str, list[dict[str, float]]]]:
    """Train every recipe (in `jobs` processes of one thread each); returns
    (recipe -> the RunConfig it trained with, recipe -> history)."""
    prepared = prepare_digits(study, digits, data_root)
    configs = recipe_configs(study, prepared, only)
    tasks = [(name, cfg, str(run_dir(out, name, cfg))) for name, cfg in configs.items()]
    if jobs <= 1:
        return configs, dict(map(_train_one, tasks))
    # spawn, not fork: a forked child of a process whose OpenMP threads already ran can hang
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return configs, dict(pool.map(_train_one, tasks))


def settings(cfg: C.RunConfig) -> str:
    """A recipe's run settings that matter here, as the table prints them."""
    extra = f", momentum {cfg.momentum:g}" if cfg.optimizer == "sgdr" else ""
    return f"{cfg.optimizer}, lr {cfg.lr:g}{extra}, init {cfg.init}, clip {cfg.clip:g}"


def render(
    study: dict[str, Any],
    configs: dict[str, C.RunConfig],
    histories: dict[str, list[dict[str, float]]],
    command: str,
) -> tuple[str, str]:
    """(recipe.csv, recipe.md) text from the runs' configs and histories; the same inputs
    give the same bytes."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for name, rows in histories.items():
        for row in rows:
            w.writerow([name, int(row["epoch"])] + [f"{row[k]:.4f}" for k in CSV_COLUMNS[2:]])
    epochs = study["epochs"]
    d = study["digits"]
    md = [
        "# Training recipe on real digits",
        "",
        f"`{command}` (config/recipe.yaml). Where measured: CPU, one thread per run.",
        "",
        f"config/{study['suite']} experiment `{study['experiment']}` with each recipe's keys; "
        f"real MNIST digits at {d['downsample']} x {d['downsample']} "
        f"({d['downsample'] ** 2} steps), {d['train'] - d['valid_size']:,} train / "
        f"{d['valid_size']:,} valid, seed {study['seed']}, {epochs} epochs, no early stopping. "
        "Validation accuracy (%) after each epoch; chance is about 10 %.",
        "",
        "| recipe | settings | " + " | ".join(str(e) for e in range(1, epochs + 1)) + " | best |",
        "|---|---|" + "---|" * (epochs + 1),
    ]
    for name, rows in histories.items():
        accs = [f"{100 * r['valid_acc']:.1f}" for r in rows] + ["–"] * (epochs - len(rows))
        best = max((r["valid_acc"] for r in rows), default=float("nan"))
        md.append(f"| {name} | {settings(configs[name])} | " + " | ".join(accs) + f" | {100 * best:.1f} |")
    return buf.getvalue(), "\n".join(md) + "\n"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--digits", required=True, help="folder with a real-digit IDX pair (t10k-images/labels-idx*-ubyte.gz)"
    )
    p.add_argument("--study", default=str(STUDY), help="study file (default config/recipe.yaml)")
    p.add_argument("--out", default="results/recipe", help="table and runs folder")
    p.add_argument("--data", default="data/recipe", help="folder for the cut and prepared digits")
    p.add_argument("--only", help="comma-separated recipe names (default: all)")
    p.add_argument(
        "--jobs",
        type=int,
        default=max(1, min(2, os.cpu_count() or 1)),
        help="recipes trained at once, one thread each (default: up to 2)",
    )


def run(args: argparse.Namespace) -> int:
    study = load_study(args.study)
    only = [s.strip() for s in args.only.split(",")] if args.only else None
    if not Path(args.digits).is_dir():
        raise UserError(f"--digits {args.digits}: no such folder")
    configs, histories = run_study(study, args.digits, args.out, args.data, only, args.jobs)
    command = "python -m psrnn recipe --digits <mnist-test>" + (f" --only {args.only}" if args.only else "")
    text_csv, text_md = render(study, configs, histories, command)
    write_text(Path(args.out) / "recipe.csv", text_csv)
    write_text(Path(args.out) / "recipe.md", text_md)
    print(text_md, end="")
    return 0
