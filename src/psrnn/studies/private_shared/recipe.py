"""The training-recipe study on real digits: `python -m psrnn recipe`.

    python -m psrnn recipe --digits ../shared/data/mnist-test            # config/recipe.yaml
    python -m psrnn recipe --digits ../shared/data/mnist-test --only groups1 --jobs 2
    python -m psrnn recipe --digits ../shared/data/mnist-test \
        --study config/recipe-init.yaml --out results/recipe/init

Cuts the digits (`psrnn.studies.private_shared.data.digits`), prepares them as the study says, trains every
experiment x recipe x grid point (config/paper.yaml's experiment + the recipe's keys + the
point, psrnn.engine.fit.fit, so runs resume and a finished run is reused) and writes
`recipe.csv` (one row per run and epoch) and `recipe.md` (validation accuracy after each
epoch, and per recipe each model's best grid point) into --out. Data go to data/recipe/
and runs to <out>/runs/<run name>-<settings digest>/.

A study's `window_scale` multiplies every experiment's window (rounded, at least 1): the
digits are prepared shorter than the paper's 784 steps, and windows scale with the
sequence while anchor counts stay, so the sum over anchors and tasks, whose size is what
a recipe must cope with, is the paper's. The study file, its runs and their settings:
psrnn.studies.private_shared.recipe_plan.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import io
import json
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.errors import UserError
from psrnn.files import read_json, refuse_committed, write_text
from psrnn.studies.private_shared import settings as S
from psrnn.studies.private_shared.recipe_plan import (  # noqa: F401 (re-exports: the study file and its runs)
    OPTIONAL_KEYS,
    RECIPE_META,
    STUDY,
    STUDY_KEYS,
    load_study,
    recipe_configs,
    runs,
    settings,
)

CSV_COLUMNS = (
    "run",
    "experiment",
    "recipe",
    "lr",
    "epoch",
    "train_main_loss",
    "train_aux_loss",
    "train_acc",
    "valid_main_loss",
    "valid_acc",
)


def prepare_digits(study: dict[str, Any], digits: str | Path, data_root: str | Path) -> Path:
    """Cut and prepare the real digits once; returns the prepared folder."""
    from psrnn.studies.private_shared.data.digits import split_digits
    from psrnn.studies.private_shared.data.prepare import prepare

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
    split_digits(digits, root / "raw" / "mnist", d["train"], what="the study's digits.train")
    prepare("mnist", root / "raw" / "mnist", prepared, opts)
    return prepared


def _train_one(args: tuple[str, S.RunConfig, str]) -> tuple[str, list[dict[str, float]]]:
    """Worker: one recipe on one thread; returns (name, history rows)."""
    import torch

    from psrnn.engine.fit import fit as train
    from psrnn.studies.private_shared.epoch import TrainingDiverged

    name, cfg, out = args
    if diverged(out):  # a finished outcome too: training again would diverge again
        return name, finished_epochs(out)
    torch.set_num_threads(1)
    log_path = Path(out) / "train.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cpu = time.process_time()
    with log_path.open("a") as fh:
        try:
            train(
                cfg,
                out,
                {"experiment": name, "config_name": "recipe"},
                log=lambda msg: (fh.write(msg + "\n"), fh.flush()),
            )
        except TrainingDiverged as err:  # a result of the study, not a failure of it
            fh.write(f"stopped: {err}\n")
            write_text(Path(out) / DIVERGED, f"{err}\n")
    # CPU seconds over every session of the run (a resumed run adds to its total)
    spent = Path(out) / "cpu_seconds.txt"
    before = float(spent.read_text()) if spent.is_file() else 0.0
    write_text(spent, f"{before + time.process_time() - cpu:.1f}\n")
    return name, finished_epochs(out)


DIVERGED = "diverged.txt"  # in a run folder: the run stopped at a non-finite loss (the message)


def diverged(out: str | Path) -> str | None:
    """The divergence message of a run folder, None if the run did not diverge: diverged.txt
    (a non-finite loss in the first epoch) or metrics.json's `stopped: non_finite` (later:
    the engine ends the run with its best epoch so far)."""
    path = Path(out) / DIVERGED
    if path.is_file():
        return path.read_text().strip()
    metrics = Path(out) / "metrics.json"
    if metrics.is_file():
        m = read_json(metrics)
        if m.get("stopped") == "non_finite":
            return str((m.get("diverged") or {}).get("non_finite", "non-finite training loss"))
    return None


def cpu_seconds(out: str | Path) -> float:
    """The CPU seconds `_train_one` recorded for a run folder (nan if none)."""
    spent = Path(out) / "cpu_seconds.txt"
    return float(spent.read_text()) if spent.is_file() else float("nan")


def finished_epochs(folder: str | Path) -> list[dict[str, float]]:
    """The history rows a run folder holds so far ([] before its first epoch ends)."""
    path = Path(folder) / "history.csv"
    return read_history(path) if path.is_file() else []


def read_history(path: Path) -> list[dict[str, float]]:
    with path.open() as fh:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def run_dir(out: str | Path, name: str, cfg: S.RunConfig) -> Path:
    """<out>/runs/<experiment>/<digest of its settings>: a finished run is reused only
    while the recipe and paper.yaml give the same settings (an edit trains a new run beside
    it), and runs of equal settings under two names share one folder."""
    digest = hashlib.md5(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
    experiment = name.split("/", 1)[0]
    return Path(out) / "runs" / experiment / digest


def run_study(
    study: dict[str, Any],
    digits: str | Path,
    out: str | Path,
    data_root: str | Path = "data/recipe",
    only: list[str] | None = None,
    jobs: int = 1,
    train: bool = True,
) -> tuple[dict[str, S.RunConfig], dict[str, list[dict[str, float]]]]:
    """Train every run (in `jobs` processes of one thread each); returns
    (run -> the RunConfig it trained with, run -> history), in the study's order.
    train=False: train nothing, read the epochs each run has finished so far."""
    prepared = prepare_digits(study, digits, data_root)
    configs = recipe_configs(study, prepared, only)
    # runs with the same settings (e.g. a plain GRU under both clip scopes) train once
    folders = {name: str(run_dir(out, name, cfg)) for name, cfg in configs.items()}
    first = {folder: name for name, folder in reversed(folders.items())}
    tasks = [(name, configs[name], folder) for folder, name in first.items()]
    # the study's last experiment (its costliest, by the study files' convention) first,
    # then in the study's order
    rank = {e: -i for i, e in enumerate(study["experiments"])}
    tasks.sort(key=lambda t: (rank[t[0].split("/", 1)[0]], list(configs).index(t[0])))
    if not train:
        trained = {name: finished_epochs(folder) for name, _, folder in tasks}
    elif jobs <= 1:
        trained = dict(map(_train_one, tasks))
    else:
        # spawn, not fork: a forked child of a process whose OpenMP threads already ran can hang
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            trained = dict(pool.map(_train_one, tasks))
    return configs, {name: trained[first[folders[name]]] for name in configs}


def init_gradients(cfg: S.RunConfig, count: int = 64) -> dict[str, float]:
    """Gradient norms at initialisation on the first `count` training sequences (the
    model training builds from the run's seed; anchors from the evaluation seed): each
    loss's gradient norm over the classifier path (main GRU, head) and over the decoders,
    the factor one global clip at `clip` scales the whole step by, and the cross-entropy's
    norm after it. Shows why a rule does or does not starve the classifier."""
    import torch
    import torch.nn.functional as F

    from psrnn.engine.books import seed_everything
    from psrnn.studies.private_shared.data import load_split, read_manifest
    from psrnn.studies.private_shared.epoch import EVAL_ANCHOR_SEED, clip_groups, draw_anchors
    from psrnn.studies.private_shared.hooks import init_steps
    from psrnn.studies.private_shared.models import build_model

    manifest = read_manifest(cfg.data_dir)
    train = load_split(cfg.data_dir, "train")
    seed_everything(cfg.seed, torch.device("cpu"))
    model = build_model(
        cfg,
        manifest["input"],
        int(manifest["features"]),
        int(manifest["num_classes"]),
        steps=init_steps(train),
    )
    main, aux = (clip_groups(model, "groups") + [[]])[:2]
    x, lengths, y = train.batch(torch.arange(count))
    anchors = draw_anchors(model, cfg, lengths, torch.Generator().manual_seed(EVAL_ANCHOR_SEED))
    logits, aux_loss = model(x, lengths, anchors)
    ce = F.cross_entropy(logits, y)
    losses = {"ce": ce, "aux": cfg.aux_weight * aux_loss.mean()} if aux_loss is not None else {"ce": ce}

    def norm(loss: torch.Tensor, group: list[torch.Tensor]) -> float:
        if not group:
            return 0.0
        grads = torch.autograd.grad(loss, group, retain_graph=True, allow_unused=True)
        squares = [(g.double() ** 2).sum() for g in grads if g is not None]
        return float(torch.stack(squares).sum().sqrt()) if squares else 0.0

    out = {
        f"{k}_{g}": norm(loss, params)
        for k, loss in losses.items()
        for g, params in (("main", main), ("aux", aux))
    }
    out.update({k: out.get(k, 0.0) for k in ("aux_main", "aux_aux")})  # a plain GRU: no aux loss
    total = norm(sum(losses.values()), main + aux)
    factor = min(1.0, cfg.clip / total) if cfg.clip > 0 else 1.0
    out.update(total=total, global_clip_factor=factor, ce_step=out["ce_main"] * factor)
    out.update(ce_loss=float(ce.detach()), aux_loss=float(losses["aux"].detach()) if "aux" in losses else 0.0)
    return out


def best(rows: list[dict[str, float]]) -> tuple[float, int]:
    """(best validation accuracy, its epoch; the first on ties); (nan, 0) without epochs."""
    if not rows:
        return float("nan"), 0
    top = max(rows, key=lambda r: (r["valid_acc"], -r["epoch"]))
    return top["valid_acc"], int(top["epoch"])


def summary(
    study: dict[str, Any],
    histories: dict[str, list[dict[str, float]]],
    stopped: dict[str, str] | None = None,
) -> list[tuple[str, dict[str, tuple[float, str]], float]]:
    """Per recipe: (recipe, experiment -> (best validation accuracy over its grid points,
    the run that reached it), the worst model's best; nan unless the recipe ran every
    model). A run that diverged before its first epoch counts 0; a cut one with no epoch
    is left out. The study's choice is the recipe whose worst model is best: every model
    must learn, not one win."""
    table = []
    for recipe in study["recipes"]:
        per_model: dict[str, tuple[float, str]] = {}
        for name, (experiment, rec, _) in runs(study).items():
            if rec != recipe or name not in histories:
                continue
            acc = best(histories[name])[0]
            if acc != acc:
                if not (stopped or {}).get(name, "").startswith("non-finite"):
                    continue
                acc = 0.0
            if experiment not in per_model or acc > per_model[experiment][0]:
                per_model[experiment] = (acc, name)
        if per_model:
            every = set(per_model) == set(study["experiments"])
            table.append(
                (recipe, per_model, min(a for a, _ in per_model.values()) if every else float("nan"))
            )
    return table


def _num(value: float, spec: str) -> str:
    """A table cell: the number, or "–" for nan (not measured, or no epoch finished)."""
    return "–" if value != value else format(value, spec)


def render(
    study: dict[str, Any],
    configs: dict[str, S.RunConfig],
    histories: dict[str, list[dict[str, float]]],
    command: str,
    where: str = "CPU, one thread per run",
    cpu: dict[str, float] | None = None,
    init: dict[str, dict[str, float]] | None = None,
    stopped: dict[str, str] | None = None,
) -> tuple[str, str]:
    """(recipe.csv, recipe.md) text from the runs' configs and histories; the same inputs
    give the same bytes."""
    plan = runs(study)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for name, rows in histories.items():
        experiment, recipe, _ = plan[name]
        for row in rows:
            w.writerow(
                [name, experiment, recipe, f"{configs[name].lr:g}", int(row["epoch"])]
                + [f"{row[k]:.4f}" for k in CSV_COLUMNS[5:]]
            )
    epochs = study["epochs"]
    d = study["digits"]
    scale = study.get("window_scale", 1.0)
    scaled = f"; windows x {scale:g} of paper.yaml's (anchors kept)" if scale != 1.0 else ""
    md = [
        "# Training recipe on real digits",
        "",
        f"`{command}`. Where measured: {where}.",
        "",
        f"config/{study['suite']} experiments {', '.join(f'`{e}`' for e in study['experiments'])} "
        f"with each recipe's keys{scaled}; real MNIST digits at {d['downsample']} x {d['downsample']} "
        f"({d['downsample'] ** 2} steps), {d['train'] - d['valid_size']:,} train / "
        f"{d['valid_size']:,} valid, seed {study['seed']}, {epochs} epochs, no early stopping. "
        "Validation accuracy (%) after each epoch; chance is about 10 %.",
        "",
        "| run | settings | "
        + " | ".join(str(e) for e in range(1, epochs + 1))
        + " | best | wall min/epoch | CPU min |",
        "|---|---|" + "---|" * (epochs + 3),
    ]
    for name, rows in histories.items():
        accs = [f"{100 * r['valid_acc']:.1f}" for r in rows] + ["–"] * (epochs - len(rows))
        top, _ = best(rows)
        minutes = sum(r["epoch_time_s"] for r in rows) / len(rows) / 60 if rows else float("nan")
        cpu_min = (cpu or {}).get(name, float("nan")) / 60
        why = (stopped or {}).get(name)
        note = f" ({why.split(';')[0]})" if why else ""
        cells = [_num(100 * top, ".1f"), _num(minutes, ".1f"), _num(cpu_min, ".0f")]
        md.append(f"| {name}{note} | {settings(configs[name])} | " + " | ".join(accs + cells) + " |")
    if init:
        md += [
            "",
            "At initialisation (the first 64 training digits, each model's first run's settings, "
            "decoders teacher-forced): gradient norms of the cross-entropy (CE) and of the summed "
            "auxiliary loss over the classifier path (main GRU and head) and over the decoders, "
            "and what one global clip at 1 leaves of the classifier's step:",
            "",
            "| experiment | CE | aux | CE norm, classifier | aux norm, classifier | aux norm, decoders "
            "| global clip-1 factor | CE step after it |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for experiment, g in init.items():
            md.append(
                f"| {experiment} | {g['ce_loss']:.3f} | {g['aux_loss']:.3f} | {g['ce_main']:.3f} | "
                f"{g['aux_main']:.3f} | {g['aux_aux']:.3f} | {min(1.0, 1.0 / g['total']):.3f} | "
                f"{g['ce_main'] * min(1.0, 1.0 / g['total']):.3f} |"
            )
    table = summary(study, histories, stopped)
    if len(study["experiments"]) > 1 and table:
        experiments = study["experiments"]
        md += [
            "",
            "Per recipe, each model's best validation accuracy (%) over its grid points (the "
            "run that reached it; 0 for a run that diverged); a recipe that ran every model is "
            "judged by its worst model, since every model must learn:",
            "",
            "| recipe | " + " | ".join(experiments) + " | worst |",
            "|---|" + "---|" * (len(experiments) + 1),
        ]
        for recipe, per_model, worst in table:
            cells = [
                f"{100 * per_model[e][0]:.1f} ({per_model[e][1].split('/', 1)[1]})" if e in per_model else "–"
                for e in experiments
            ]
            md.append(f"| {recipe} | " + " | ".join(cells) + f" | {_num(100 * worst, '.1f')} |")
        whole = [t for t in table if t[2] == t[2]]
        if whole:
            choice = max(whole, key=lambda t: t[2])
            md += ["", f"Chosen by this rule: `{choice[0]}` (worst model {100 * choice[2]:.1f} %)."]
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
        "--overwrite", action="store_true", help="remake a table that is a committed result (refused without)"
    )
    p.add_argument(
        "--no-train",
        action="store_true",
        help="train nothing: tabulate the epochs every run has finished so far (unfinished runs are "
        "marked; the same command without it resumes them)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=max(1, min(2, os.cpu_count() or 1)),
        help="recipes trained at once, one thread each (default: up to 2)",
    )


def run(args: argparse.Namespace) -> int:
    # every option is checked before the digits are cut and prepared (minutes)
    if args.jobs < 1:
        raise UserError(f"--jobs {args.jobs}: must be at least 1 (recipes trained at once)")
    if args.only is not None and not [n for n in args.only.split(",") if n.strip()]:
        raise UserError("--only '': names no recipe (leave it out to run them all)")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UserError(f"--out {args.out}: a file, not a folder (the table and runs go there)")
    study = load_study(args.study)
    only = [s.strip() for s in args.only.split(",") if s.strip()] if args.only else None
    unknown = [n for n in only or [] if n not in study["recipes"]]
    if unknown:  # before the digits are cut and prepared
        raise UserError(
            f"--only: unknown recipe(s) {', '.join(unknown)}; known: {', '.join(study['recipes'])}"
        )
    if not args.overwrite:  # the committed tables are made from runs this clone does not have
        refuse_committed([Path(args.out) / "recipe.csv", Path(args.out) / "recipe.md"], "pick another --out")
    if not Path(args.digits).is_dir():
        raise UserError(f"--digits {args.digits}: no such folder")
    configs, histories = run_study(
        study, args.digits, args.out, args.data, only, args.jobs, not args.no_train
    )
    command = "python -m psrnn recipe --digits <mnist-test>"
    if Path(args.study).resolve() != STUDY.resolve():
        command += f" --study {os.path.relpath(Path(args.study).resolve(), C.ROOT)}"
    command += f" --out {args.out}" if args.out != "results/recipe" else ""
    command += f" --only {args.only}" if args.only else ""
    command += " --no-train" if args.no_train else ""
    command += " --overwrite" if args.overwrite else ""
    from psrnn.machine import cpu_name, load_average

    load = load_average()
    where = f"{cpu_name()}, {os.cpu_count()} cores, {args.jobs} run(s) at a time, one thread each" + (
        f"; load average {load[1]:.1f} (5 min) at the end" if load else ""
    )
    cpu = {name: cpu_seconds(run_dir(args.out, name, cfg)) for name, cfg in configs.items()}
    stopped = {n: why for n, cfg in configs.items() if (why := diverged(run_dir(args.out, n, cfg)))}
    for n, cfg in configs.items():  # cut runs say so (--no-train before they finished)
        done = (run_dir(args.out, n, cfg) / "metrics.json").is_file()
        if not done and n not in stopped:
            stopped[n] = f"cut: {len(histories[n])} of {study['epochs']} epochs, not finished when tabulated"
    firsts = {name.split("/", 1)[0]: cfg for name, cfg in reversed(configs.items())}
    init = {
        e: init_gradients(dataclasses.replace(firsts[e], decoder_input="teacher"))
        for e in study["experiments"]
        if e in firsts
    }
    text_csv, text_md = render(study, configs, histories, command, where, cpu, init, stopped)
    write_text(Path(args.out) / "recipe.csv", text_csv)
    write_text(Path(args.out) / "recipe.md", text_md)
    print(text_md, end="")
    return 0
