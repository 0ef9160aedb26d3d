"""`python -m psrnn bench`: training speed and memory, data preparation, compute budget.

    python -m psrnn bench                          # everything -> results/bench/<device>.json + .md
    python -m psrnn bench --quick                  # tiny shapes, 80-160 s -> results/bench/quick/
    python -m psrnn bench --only train --shapes mnist --repeats 3
    python -m psrnn bench --only budget --merge    # redo one section, keep the others' numbers
    PYTHONPATH=src python -m psrnn bench --device cuda   # on a GPU machine, no install
    python -m psrnn bench --only budget --config config/quick.yaml \
        --times-from results/bench/cuda-nvidia-h100-80gb-hbm3-quick-budget.json \
        --name cuda-nvidia-h100-80gb-hbm3-quick-budget-search   # a budget from stored GPU times

Sections (`--only`, comma separated):
  train     one training step (forward, backward, clip, SGD step: `epoch.train_epoch`
            itself) at the paper's shapes for the plain GRU (the floor: nn.GRU + linear
            head), full share, private/shared 50 %, and the slow reference
            `psrnn.studies.private_shared.naive.NaivePSRNN`; step time (warm-up, then median/min/max of
            repeats),
            process CPU time, samples/s, peak memory; ratios aux overhead (variant / GRU)
            and vectorised speed-up (naive / ours)
  options   bf16 autocast (torch.autocast on the device, cuda or cpu), torch.compile of
            the decoders (CPU with --compile-cpu), batch size 64 / 256
  prepare   generate a full-size IMDB-like tarball (50K reviews) and MNIST-like IDX files
            (60K + 10K), run the real `prepare` on them: time and disk size
  graphs    the train step at each shape for the GRU and private/shared 50 % (teacher-forced
            and estimate-fed decoders), eager against CUDA graphs (RunConfig.cuda_graphs):
            step times, speed-up, and whether both trained the same parameters (GPU only)
  packing   1, 2 and 4 training jobs (private/shared 50 %) sharing the device at once, each
            with 4 threads: per-job step time, throughput over one job's (`speed`)
  profile   torch.profiler over a few steps of each fast variant: per step device kernels,
            busy time, host-device copies, synchronisations, .item() reads, aten ops;
            the operators with the most self time (`profile`)
  budget    device hours of the whole paper config (experiments x seeds x grid points x
            max_epochs cap) from measured step times at each experiment's shapes (GPU: at
            the full length; CPU: two shorter lengths, extrapolated, batch 32 scaled);
            with --times-from FILE, from the times an earlier result (FILE) measured at
            the same shapes, on this machine without a GPU (`stored`: nothing is measured;
            the output keeps FILE's device and says where and when it measured)
  snakemake wall time of `snakemake -n` on the paper config
  fused     runs per hour of the relreg grid search, one `train` process per run against
            one `train-group` process of a shape's runs, per model kind (`fused`; its
            config: --config, default config/relreg-full.yaml)
Each target of the project is reported as met / not met / not measured; a section that
fails is recorded in the output ("errors") and the others still run.

Memory (see `measure`): on CUDA the allocator's peak growth, on CPU the peak resident set's
growth, in a fresh process per measurement unless --isolate off. Data loading is not timed
apart: the step includes `SequenceSplit.batch` as training does (synthetic data in memory).
On a CPU shared with other jobs use --threads 1 and read the process CPU times.

Modules: `measure` (one measurement and its `Spec`), `speed` (train and options), `budget`
(the compute budget model), `stored` (the budget from a stored result's times),
`pipeline` (prepare and snakemake), `fused` (fused against lone runs), `profile`
(torch.profiler counts), `goals` (the
targets and whether a result meets them), `report` (merge, Markdown); this one runs the
chosen sections and writes the result.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from psrnn import config as C
from psrnn.bench.budget import bench_budget
from psrnn.bench.fused import FULL_FUSED, FUSED_CONFIG, KINDS, QUICK_FUSED, FusedSettings, bench_fused
from psrnn.bench.goals import targets
from psrnn.bench.measure import QUICK_LEN, SHAPES, PeakMemory, Shape
from psrnn.bench.pipeline import bench_prepare, bench_snakemake
from psrnn.bench.profile import bench_profile
from psrnn.bench.report import SCHEMA, SECTIONS, merge, to_markdown
from psrnn.bench.speed import (
    FULL,
    GPU_REPEATS,
    QUICK,
    VARIANTS,
    Settings,
    bench_graphs,
    bench_options,
    bench_packing,
    bench_train,
    ratios,
)
from psrnn.bench.stored import budget_from_file, load_times, when
from psrnn.errors import UserError
from psrnn.files import read_json, refuse_committed, write_json, write_text
from psrnn.machine import bench_environment, device_slug, git_commit, load_average

# --- command line --------------------------------------------------------------------------


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny shapes, 1-2 repeats, small data (CI: checks the output is well formed)",
    )
    p.add_argument("--out", help="output folder (default results/bench, or results/bench/quick with --quick)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="remake output files that are committed results (refused without)",
    )
    p.add_argument("--only", help=f"comma-separated sections: {','.join(SECTIONS)} (default all)")
    p.add_argument("--shapes", help=f"comma-separated shapes for train: {','.join(SHAPES)} (default all)")
    p.add_argument(
        "--config",
        help="suite config for budget and snakemake "
        "(default config/paper.yaml; config/small.yaml with --quick)",
    )
    p.add_argument(
        "--seq-len", type=int, help="train/packing/profile: every shape at this many steps (default its own)"
    )
    p.add_argument(
        "--max-tokens", type=int, help="train/packing/profile: the token budget (RunConfig.max_tokens; 0)"
    )
    p.add_argument("--variants", help="train: comma-separated models of gru,full,ps50,naive (default all)")
    p.add_argument("--warmup", type=int, help="warm-up steps per measurement")
    p.add_argument("--repeats", type=int, help="timed steps per measurement")
    p.add_argument("--batch", type=int, help=f"train/options batch size (default {FULL.batch})")
    p.add_argument(
        "--threads", type=int, help="CPU threads per measurement (default: all cores; 1 with --quick)"
    )
    p.add_argument(
        "--isolate",
        choices=("auto", "on", "off"),
        default="auto",
        help="one fresh process per CPU measurement, for clean peak RSS (auto: on for a full CPU run)",
    )
    p.add_argument(
        "--compile-cpu", action="store_true", help="also time torch.compile on CPU (slow to compile)"
    )
    p.add_argument(
        "--budget-batch",
        type=int,
        help="time budget steps at this batch and scale linearly (default: 32 on CPU)",
    )
    p.add_argument(
        "--times-from",
        metavar="FILE",
        help="budget only, nothing measured: each experiment's step and validation-batch times "
        "from an earlier bench result (its .json) at the same shapes; an experiment it did not "
        "measure is an error. The output keeps FILE's device and names FILE",
    )
    p.add_argument(
        "--name",
        help="output file name without .json/.md (default: the device slug; with --times-from "
        "<device slug>-<config name>-budget-recomputed)",
    )
    p.add_argument(
        "--merge",
        action="store_true",
        help="keep the sections of an existing output that this run does not redo",
    )
    p.add_argument("--kinds", help=f"fused: comma-separated relreg models of {','.join(KINDS)} (default all)")
    p.add_argument(
        "--fused-epochs",
        help="fused: comma-separated epoch counts measured, e.g. 1,6 (default: the config's epochs)",
    )
    p.add_argument(
        "--alone-runs", type=int, help=f"fused: runs timed alone (default {FULL_FUSED.alone_runs})"
    )
    p.add_argument(
        "--fused-runs", type=int, help="fused: runs of the fused process (default the whole shape)"
    )
    p.add_argument("--note", action="append", default=[], help="a line recorded in the output (repeatable)")


def parse_list(text: str | None, known: tuple[str, ...] | list[str], what: str) -> list[str]:
    if not text:
        return list(known)
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in known]
    if bad:
        raise UserError(f"unknown {what} {', '.join(bad)}; known: {', '.join(known)}")
    return items


def command_line(args: argparse.Namespace) -> str:
    """The bench command as typed, rebuilt from the parsed arguments (defaults left out)."""
    parts = ["python -m psrnn bench"]
    for key, value in sorted(vars(args).items()):
        flag = "--" + key.replace("_", "-")
        if key.startswith("_") or key == "command" or value in (None, False, [], "auto"):
            continue
        if value is True:
            parts.append(flag)
        elif isinstance(value, list):
            parts += [f"{flag} {v!r}" for v in value]
        else:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


def settings_for(args: argparse.Namespace, device: torch.device) -> Settings:
    """FULL or QUICK, with more repeats on a GPU and the command line's overrides."""
    s = QUICK if args.quick else FULL
    if device.type == "cuda" and not args.quick:
        s = Settings(**{**vars(s), "warmup": GPU_REPEATS[0], "repeats": GPU_REPEATS[1]})
    given = {
        "warmup": args.warmup,
        "repeats": args.repeats,
        "batch": args.batch,
        "threads": args.threads,
        "max_tokens": args.max_tokens,
        "variants": tuple(parse_list(args.variants, tuple(VARIANTS), "variant")) if args.variants else None,
    }
    s = Settings(**{**vars(s), **{k: v for k, v in given.items() if v is not None}})
    if s.warmup < 1 or s.repeats < 1:
        raise UserError("--warmup and --repeats must be >= 1 (the first step is never timed)")
    for flag, value, least in (
        ("--batch", s.batch, 1),
        ("--threads", s.threads, 1),
        ("--max-tokens", s.max_tokens, 0),
    ):
        if value is not None and value < least:
            raise UserError(f"{flag} {value}: must be >= {least}")
    return s


def fused_settings(args: argparse.Namespace) -> FusedSettings:
    """FULL_FUSED or QUICK_FUSED with the command line's overrides."""
    s = QUICK_FUSED if args.quick else FULL_FUSED
    given: dict[str, Any] = {"alone_runs": args.alone_runs, "fused_runs": args.fused_runs}
    if args.kinds:
        given["kinds"] = tuple(parse_list(args.kinds, tuple(KINDS), "kind"))
    if args.fused_epochs:
        try:
            given["epochs"] = tuple(sorted({int(e) for e in args.fused_epochs.split(",")}))
        except ValueError:
            raise UserError(f"--fused-epochs {args.fused_epochs}: expected whole numbers, e.g. 1,3") from None
    s = FusedSettings(**{**vars(s), **{k: v for k, v in given.items() if v is not None}})
    if any(e < 1 for e in s.epochs) or s.alone_runs < 1 or (s.fused_runs is not None and s.fused_runs < 1):
        raise UserError("--fused-epochs, --alone-runs and --fused-runs must be >= 1")
    return s


def run(args: argparse.Namespace) -> int:
    from psrnn.engine.books import pick_device  # one device rule for training and bench

    config_path = Path(args.config or ("config/small.yaml" if args.quick else "config/paper.yaml"))
    out_dir = Path(args.out or ("results/bench/quick" if args.quick else "results/bench"))
    if args.times_from:
        stored = load_times(Path(args.times_from))["environment"].get("device_slug")
        name = args.name or f"{stored}-{config_path.stem}-budget-recomputed"
        if (out_dir / f"{name}.json").resolve() == Path(args.times_from).resolve():
            raise UserError(f"--times-from {args.times_from}: the output would overwrite it (pick --name)")
        if not args.overwrite:
            refuse_committed(
                [out_dir / f"{name}.json", out_dir / f"{name}.md"], "pick another --name or --out"
            )
        result = recomputed_budget(args, config_path)
    else:
        device = pick_device(args.device)
        sections = parse_list(args.only, SECTIONS, "section")
        shapes = [SHAPES[s] for s in parse_list(args.shapes, tuple(SHAPES), "shape")]
        s = settings_for(args, device)
        if "fused" in sections:
            fused_settings(args)  # a bad value stops here, before any section runs
        if not args.overwrite:  # ... and so does a committed result's name
            slug = args.name or device_slug(device)
            refuse_committed([out_dir / f"{slug}.json", out_dir / f"{slug}.md"], "pick --name or --out")
        threads = torch.get_num_threads()
        try:
            if s.threads:
                torch.set_num_threads(s.threads)
            result = benchmark(args, device, s, sections, shapes, config_path)
        finally:
            torch.set_num_threads(threads)  # in-process callers (tests) get their setting back
        name = args.name or result["environment"]["device_slug"]
    json_path = out_dir / f"{name}.json"
    if args.merge and json_path.is_file():
        result = merge(read_json(json_path), result)
    write_json(json_path, result)
    write_text(json_path.with_suffix(".md"), to_markdown(result))
    for t in result["targets"]:
        print(
            f"target {t['status']:>12s}: {t['target']} {t['threshold']}"
            + ("" if t["measured"] is None else f" (measured {t['measured']:.2f} {t['unit']})")
        )
    print(f"wrote {json_path} and {json_path.with_suffix('.md')} ({result['total_s']:.0f}s)")
    return 0


def now_here() -> dict[str, Any]:
    """When and at which commit of this code a result is made (read back by --times-from)."""
    return {"date": datetime.now(UTC).isoformat(timespec="seconds"), "commit": git_commit()}


def recomputed_budget(args: argparse.Namespace, config_path: Path) -> dict[str, Any]:
    """The budget section of `config_path` from the times stored in --times-from: a result
    like `benchmark`'s, with the stored result's environment (where the times were measured)."""
    if args.only and args.only.strip() != "budget":
        raise UserError("--times-from recomputes the budget section only (--only budget)")
    for flag, given in (
        ("--quick", args.quick),
        ("--merge", args.merge),
        ("--device", args.device != "auto"),
    ):
        if given:
            raise UserError(f"--times-from measures nothing on this machine: leave out {flag}")
    t0 = time.perf_counter()
    path = Path(args.times_from)
    data = load_times(path)
    suite = C.load_suite(config_path)
    b = budget_from_file(suite, path, data)
    env = data["environment"]
    unit = "GPU hours" if env.get("device") == "cuda" else "CPU hours"
    b.update(config=str(config_path), unit=unit, device_name=env.get("device_name"))
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "quick": False,
        "command": command_line(args),
        "sections": ["budget"],
        "environment": env,  # the device the times were measured on, not this machine
        "recomputed": {**now_here(), "from": b["times_from"]["file"]},
        "load_average": {"start": None, "end": None},
        "settings": data.get("settings", {}),
        "memory_method": data.get("memory_method"),
        "notes": list(args.note),
        "budget": b,
        "errors": {},
    }
    if data.get("packing"):  # the same device's jobs-per-GPU speed-ups: the packed hours
        result["packing"] = data["packing"]
        result["sections"] = ["packing", "budget"]
    result["total_s"] = time.perf_counter() - t0
    result["targets"] = targets(result)
    print(
        f"budget {config_path}: {b['total_hours']:.2f} {unit} on {env.get('device_name')}, "
        f"times from {path} ({when(b['times_from'])})",
        flush=True,
    )
    return result


def benchmark(
    args: argparse.Namespace,
    device: torch.device,
    s: Settings,
    sections: list[str],
    shapes: list[Shape],
    config_path: Path,
) -> dict[str, Any]:
    """Run the chosen sections; returns the whole result (what the JSON holds)."""
    quick = args.quick
    isolate = {"on": True, "off": False}.get(args.isolate, device.type == "cpu" and not quick)
    budget_batch = args.budget_batch or (32 if device.type == "cpu" and not quick else None)

    def log(msg: str) -> None:
        print(msg, flush=True)

    env = bench_environment(device)
    seq_len = (lambda sh: min(QUICK_LEN, sh.seq_len)) if quick else (lambda sh: sh.seq_len)
    if args.seq_len:
        seq_len = lambda sh: args.seq_len  # noqa: E731
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "quick": quick,
        "command": command_line(args),
        "sections": sections,
        "environment": env,
        "measured_at": now_here(),
        "load_average": {"start": load_average(), "end": None},
        "settings": {
            **vars(s),
            "tasks": list(s.tasks),
            "batches": list(s.batches),
            "shapes": [sh.dataset for sh in shapes],
            "isolate": isolate,
        },
        "memory_method": PeakMemory(device).method + (" (fresh process per measurement)" if isolate else ""),
        "notes": list(args.note),
    }
    log(
        f"bench on {env['device_name']} ({env['device_slug']}), sections {', '.join(sections)}"
        + (" [quick]" if quick else "")
    )
    suite = C.load_suite(config_path) if {"budget", "snakemake"} & set(sections) else None
    t_all = time.perf_counter()

    def do_train() -> None:
        result["train"] = bench_train(shapes, s, device, isolate, seq_len, log)
        result["ratios"] = ratios(result["train"])

    def do_options() -> None:
        shape = shapes[0]
        result["options"] = bench_options(shape, s, device, isolate, seq_len(shape), args.compile_cpu, log)

    def do_prepare() -> None:
        with tempfile.TemporaryDirectory(prefix="psrnn-bench-") as tmp:
            result["prepare"] = bench_prepare(Path(tmp), quick, log)

    def do_graphs() -> None:
        result["graphs"] = bench_graphs(shapes, s, device, isolate, seq_len, log)

    def do_packing() -> None:
        result["packing"] = bench_packing(shapes, s, device, seq_len, log)

    def do_profile() -> None:
        result["profile"] = bench_profile(shapes, s, device, seq_len, log, isolate or device.type == "cuda")

    def do_budget() -> None:
        assert suite is not None  # loaded above for the budget section
        reps = (1, 1) if quick else ((3, 5) if device.type == "cuda" else (1, 3))
        b = bench_budget(suite, device, quick, budget_batch, reps, log, s.threads)
        unit = "GPU hours" if device.type == "cuda" else "CPU hours"
        b.update(config=str(config_path), unit=unit, device_name=env["device_name"])
        result["budget"] = b
        log(f"budget {config_path}: {b['total_hours']:.1f} {unit} on {env['device_name']}")

    def do_snakemake() -> None:
        sm = bench_snakemake(config_path)
        sm["paper"] = config_path.name == "paper.yaml"
        result["snakemake"] = sm
        log(f"snakemake -n {config_path}: {sm.get('seconds', 0):.1f}s ({sm['status']})")

    def do_fused() -> None:
        path = Path(args.config) if args.config else C.ROOT / FUSED_CONFIG
        f = bench_fused(path, fused_settings(args), log)
        f["config"] = args.config or FUSED_CONFIG
        result["fused"] = f

    steps = {
        "train": do_train,
        "options": do_options,
        "graphs": do_graphs,
        "packing": do_packing,
        "profile": do_profile,
        "prepare": do_prepare,
        "budget": do_budget,
        "snakemake": do_snakemake,
        "fused": do_fused,
    }
    result["errors"] = {}
    for name in sections:
        try:
            steps[name]()
        except Exception as err:  # one broken section (e.g. a missing package) must not lose the others
            result["errors"][name] = f"{type(err).__name__}: {str(err).strip()[:500]}"
            log(f"{name}: failed: {result['errors'][name]}")
    result["load_average"]["end"] = load_average()
    result["total_s"] = time.perf_counter() - t_all
    result["targets"] = targets(result)
    return result
