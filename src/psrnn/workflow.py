"""What Snakemake builds for a suite config: target files, job inputs and job parameters.

    snakemake -n                                           # no --configfile: the small config
    snakemake --cores 2 --configfile config/small.yaml     # the small config, end to end
    python -m psrnn config config/paper.yaml --params      # our parameter counts vs the paper's

The Snakefile stays declarative; every path list and parameter it needs comes from these
functions. They take the validated suite config (a dict) and return paths relative to
the working directory, following the conventions of `psrnn.config`, so they are tested
without Snakemake (tests/test_workflow.py).

Which suite config a Snakemake run uses: `suite_path` picks one file (the last
`--configfile`, else config/small.yaml; the Snakefile has no `configfile:`, which Snakemake
would merge with the user's), loads and validates it, and hands it to every command.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn import registry
from psrnn.apptainer import (  # noqa: F401 (re-exports: the Snakefile's --use-singularity)
    IMAGE_BUILD,
    apptainer_args,
    check_image,
    container,
    source_folders,
    uses_apptainer,
)
from psrnn.errors import UserError
from psrnn.files import read_sha256sums
from psrnn.gpus import JOBS_PER_GPU_ENV, host_gpus
from psrnn.jobspec import (  # noqa: F401 (re-exports: the Snakefile's params and threads)
    SPEC_KEY,
    TRAIN_SETTINGS,
    dataset_spec,
    dataset_stamp,
    experiment_spec,
    jobs_per_gpu,
    selection_stamp,
    spec_digest,
    train_config,
    train_threads,
)

SPLIT_FILES = ("train.pt", "valid.pt", "test.pt", "manifest.json")
CHECKSUMS = "splits.sha256"  # prepare's sha256sum lines of SPLIT_FILES, beside them
# Scheduler hints of one training job unless the suite config's `resources.train` says
# otherwise: one GPU, host memory for the prepared split tensors, minutes of wall time.
TRAIN_RESOURCES = {"gpu": 1, "mem_mb": 16000, "runtime": 24 * 60}
# Re-submissions of a failed training job: one killed at its walltime (SLURM) or by a
# crash resumes from ckpt_last.pt, so each attempt continues the run.
TRAIN_RETRIES = 2


# --- which config --------------------------------------------------------------------------


def suite_path(
    cli_configfiles: list[str | Path], default: str | Path, cli_config: dict[str, Any] | None = None
) -> Path:
    """The suite config file of this Snakemake run: the last `--configfile`, else `default`.

    `--config key=value` is refused: the `python -m psrnn` commands read the file, so a
    value set only on Snakemake's command line would not reach them. Put the change in a
    config file instead (see config/paper-dbpedia.yaml for one that extends another).
    """
    if cli_config:
        keys = ", ".join(sorted(cli_config))
        raise C.ConfigError(
            f"snakemake --config {keys}: not supported; the jobs read the suite config file, "
            f"so write the change into a config file (it may `extends:` another) and pass "
            f"it with --configfile"
        )
    return Path(cli_configfiles[-1] if cli_configfiles else default)


def shown(path: str | Path) -> str:
    """`path` relative to the working directory when it lies inside it (readable logs and
    jobs that do not depend on where the clone lives), else absolute."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# --- files ---------------------------------------------------------------------------------


def fixture_files(cfg: dict[str, Any]) -> list[str]:
    """What `python -m psrnn fixtures <dir>` writes that the DAG tracks (one MD5SUMS per
    dataset; the archives sit beside it); [] for configs without `fixtures:`."""
    folder = cfg.get("fixtures")
    return [f"{folder}/{ds}/MD5SUMS" for ds in cfg["datasets"]] if folder else []


def download_marker(cfg: dict[str, Any], dataset: str) -> str:
    return f"{C.data_root(cfg)}/raw/{dataset}/download.json"


def prepared_files(cfg: dict[str, Any], dataset: str) -> list[str]:
    return [f"{C.data_root(cfg)}/prepared/{dataset}/{name}" for name in SPLIT_FILES]


def manifest(cfg: dict[str, Any], dataset: str) -> str:
    return f"{C.data_root(cfg)}/prepared/{dataset}/manifest.json"


def search_metrics(cfg: dict[str, Any], experiment: str) -> list[str]:
    """metrics.json of every grid point of `experiment` ([] without a grid)."""
    if not C.has_grid(cfg, experiment):
        return []
    return [
        f"{C.search_dir(cfg, experiment, pid)}/metrics.json"
        for pid, _ in C.grid_points(cfg["experiments"][experiment])
    ]


def selection(cfg: dict[str, Any], experiment: str) -> str:
    return str(C.selection_path(cfg, experiment))


def run_metrics(cfg: dict[str, Any], experiment: str, seed: int) -> str:
    return f"{C.run_dir(cfg, experiment, seed)}/metrics.json"


def final_metrics(cfg: dict[str, Any]) -> list[str]:
    """metrics.json of every final run: enabled experiments x seeds."""
    return [run_metrics(cfg, exp, seed) for exp in C.enabled_experiments(cfg) for seed in cfg["seeds"]]


def compile_outputs(cfg: dict[str, Any]) -> list[str]:
    """What `python -m psrnn compile` writes: tables (csv, md, tex), figures (pdf, png,
    svg), REPORT.md and the summary metrics.json that DVC shows (the study's results module lists
    them: psrnn.registry)."""

    return [str(p) for p in registry.study_of(cfg).output_paths(cfg)]


def reference_file(cfg: dict[str, Any]) -> str:
    """The study's reference numbers (compile reads them), relative to the project root:
    the Snakefile resolves it with workflow.source_path."""
    return registry.study_of(cfg).reference


def compile_report(cfg: dict[str, Any]) -> str:
    return f"{C.results_root(cfg)}/REPORT.md"


def compile_metrics(cfg: dict[str, Any]) -> str:
    return f"{C.results_root(cfg)}/metrics.json"


def paper_status(cfg: dict[str, Any]) -> str:
    """build.json of the paper job (whether the PDF was built, or why not)."""
    return f"{C.results_root(cfg)}/paper/build.json"


def run_targets(cfg: dict[str, Any]) -> list[str]:
    """Every training run's metrics.json and every selection: search points, then final runs."""
    files = []
    for exp in C.enabled_experiments(cfg):
        if C.has_grid(cfg, exp):
            files += [*search_metrics(cfg, exp), selection(cfg, exp)]
    return files + final_metrics(cfg)


def targets(cfg: dict[str, Any]) -> list[str]:
    """`rule all`: every run, the compiled artefacts and the paper.

    The runs are listed although compile already needs them: Snakemake 9 does not redo a
    job whose output went missing while everything downstream is up to date, so only a
    run that is itself a target is redone (with what depends on it) after its
    metrics.json is deleted. Data files are deliberately not targets: deleting the
    prepared data once training is done frees disk space and re-runs nothing.
    """
    paper = [paper_status(cfg)] if registry.study_of(cfg).paper else []
    return [*run_targets(cfg), *compile_outputs(cfg), *paper]


def all_jobs_outputs(cfg: dict[str, Any]) -> list[str]:
    """Every file a job of the DAG declares, upstream first (tests compare this with
    Snakemake's own view and with dvc.yaml)."""
    from psrnn.engine import groups  # under `fused_search`, a search group's marker, not its points' files

    files = list(fixture_files(cfg))
    for ds in data_job_datasets(cfg):
        files += [download_marker(cfg, ds), *prepared_files(cfg, ds)]
    return files + groups.targets(cfg, targets(cfg))


def data_job_datasets(cfg: dict[str, Any]) -> list[str]:
    """The enabled datasets that download and prepare jobs make (none for a study whose
    runs generate their data, psrnn.registry)."""
    return C.enabled_datasets(cfg) if registry.study_of(cfg).data_jobs else []


def manifests(cfg: dict[str, Any]) -> list[str]:
    """The prepared datasets' manifests (compile's Table 1 reads them)."""
    return [manifest(cfg, ds) for ds in data_job_datasets(cfg)]


# --- Snakemake's HTML report (`snakemake --report`) ----------------------------------------

# The one format of each compiled output that the report shows: figures as PNG, tables as
# CSV, and REPORT.md (the PDF/SVG and .md/.tex twins sit beside them).
REPORT_CATEGORIES = {".png": "Figures", ".csv": "Tables", ".md": "Report"}


def report_captions(cfg: dict[str, Any]) -> dict[str, str]:
    """Output stem -> what it shows, for the config's study: its captions function
    (psrnn.registry.Study.captions, e.g. psrnn.studies.relreg.captions:report_captions);
    {} for a study without one."""
    ref = registry.study_of(cfg).captions
    captions = dict(registry.load(ref)(cfg)) if ref else {}
    found = verdicts(C.results_root(cfg) / "REPORT.md")
    if found and "REPORT" in captions:
        captions["REPORT"] += f"; its verdicts: {found}"
    return captions


# the opening section of a compiled REPORT.md that sums up its verdicts (first study, second)
SUMMARY_HEADINGS = ("## Findings", "## Verdicts")


def verdicts(report: Path) -> str | None:
    """The verdict summary a compiled REPORT.md opens with, for the report's caption: each
    bullet of its Findings (or Verdicts) section as "<what>: <counts>" ("Table 2 accuracies:
    5 reproduced, 17 inconclusive; ..."); None before it is compiled or when it has none
    (a small config)."""
    if not report.is_file():
        return None
    lines = report.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() in SUMMARY_HEADINGS), None)
    if start is None:
        return None
    found = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        m = re.match(r"^- \*\*([^*]+)\*\*(?: \([^)]*\))?: ([^.;]+)", line)
        if m:
            found.append(f"{m[1]}: {m[2].strip()}")
    return "; ".join(found) or None


def report_item(path: str, captions: dict[str, str]) -> tuple[str, dict[str, str]] | None:
    """(category, labels) of a compiled file shown in Snakemake's HTML report, the labels
    naming the file and what it shows (`captions`, by stem); None for the other formats."""
    p = Path(path)
    category = REPORT_CATEGORIES.get(p.suffix)
    if category is None or (p.suffix == ".md" and p.stem != "REPORT") or p.parent.name == "curves":
        return None  # another format of a shown file, or curve data for DVC (the figures show it)
    if p.stem not in captions:  # a new output without its caption (tests/test_workflow.py)
        raise ValueError(f"{p.name}: no caption in the study's report_captions")
    return category, {"file": p.name, "shows": captions[p.stem]}


def report_items(cfg: dict[str, Any]) -> dict[str, tuple[str, dict[str, str]]]:
    """Compiled file -> (category, labels) of every one the Snakefile marks for the report."""
    captions = report_captions(cfg)  # none: the study shows none of its files there
    items = {path: report_item(path, captions) for path in compile_outputs(cfg) if captions}
    return {path: item for path, item in items.items() if item is not None}


# --- job inputs and parameters -------------------------------------------------------------


def download_inputs(cfg: dict[str, Any], dataset: str) -> list[str]:
    """The fixture archives when the config builds them (the download reads them through
    the dataset's mirrors), else nothing: the official archives come from the network."""
    folder = cfg.get("fixtures")
    return [f"{folder}/{dataset}/MD5SUMS"] if folder else []


def experiment_dataset(cfg: dict[str, Any], experiment: str) -> str:
    return cfg["experiments"][experiment]["dataset"]


def train_inputs(cfg: dict[str, Any], experiment: str) -> dict[str, str]:
    """A final run needs its prepared dataset, and its grid search's choice if it has one.
    The split tensors are inputs beside the manifest so that a deleted or lost one is
    prepared again instead of failing the run."""
    dataset = experiment_dataset(cfg, experiment)
    inputs = {}
    if registry.study_of(cfg).data_jobs:
        inputs["data"] = manifest(cfg, dataset)
        inputs.update({Path(f).stem: f for f in prepared_files(cfg, dataset) if f.endswith(".pt")})
    if C.has_grid(cfg, experiment):
        inputs["selected"] = selection(cfg, experiment)
    return inputs


# --- which inputs may be ancient(): the stamps (psrnn.jobspec) that the config matches -----


def train_input_stamps(cfg: dict[str, Any], experiment: str) -> dict[str, dict[str, str]]:
    """The stamp each of train_inputs' files carries while it matches the config."""
    stamps = {}
    if registry.study_of(cfg).data_jobs:
        stamps["data"] = dataset_stamp(cfg, experiment_dataset(cfg, experiment))
    if C.has_grid(cfg, experiment):
        stamps["selected"] = selection_stamp(cfg, experiment)
    return stamps


# The keys prepare writes in manifest.json and select in selected.json: one without them
# (`{}`, a hand edit) is damaged, not stale (its missing stamp read as settings changed)
MANIFEST_KEYS: tuple[str, ...] = (SPEC_KEY, "dataset", "counts", "num_classes")
SELECTION_KEYS: tuple[str, ...] = (SPEC_KEY, "experiment", "point", "overrides", "best_valid_acc")


def damaged_stamped_files(cfg: dict[str, Any]) -> list[str]:
    """The suite's manifest.json and selected.json that exist but are no JSON object with
    their job's keys: the Snakefile stops on them (a cut manifest, or `{}`, re-ran and
    deleted every run on its data)."""
    paths = [(manifest(cfg, d), MANIFEST_KEYS) for d in data_job_datasets(cfg)]
    chosen = (*SELECTION_KEYS[:-1], registry.study_of(cfg).selection[0])  # its metric (engine.choose)
    grids = {selection(cfg, e): e for e in C.enabled_experiments(cfg) if C.has_grid(cfg, e)}
    paths += [(p, chosen) for p in grids]
    found = {p: _json_or_none(Path(p)) for p, _ in paths if Path(p).is_file()}
    return [
        p
        for p, keys in paths
        if p in found
        and not (isinstance(found[p], dict) and set(keys) <= set(found[p]))
        or (p in grids and p in found and off_grid(cfg["experiments"][grids[p]], found[p]))
        or (p in found and p not in grids and not_as_prepared(Path(p)))
    ]


def not_as_prepared(path: Path) -> bool:
    """True when a manifest.json is not the bytes its splits.sha256 line names (fault battery
    A-2c: its stamp's value edited, every key kept, planned every run on it again without
    prepare; each job refused on this line, and Snakemake deleted the finished runs'
    metrics.json), or when that splits.sha256 cannot vouch for it: missing, damaged (training
    refuses it by the same reader's rules) or without the manifest's line (the confirming pass
    of stop 62, M-4/M-5: the stamp edited and that line removed or doubled had re-planned and
    deleted a finished run). prepare writes the two together, so a folder of its own always
    has both; an older psrnn's, which training refuses too, is made again by prepare."""
    try:
        named = read_sha256sums(path.parent / CHECKSUMS) or {}
        return named.get(path.name) != hashlib.sha256(path.read_bytes()).hexdigest()
    except (OSError, ValueError):
        return True


def off_grid(exp: dict[str, Any], sel: Any) -> bool:
    """True when a selected.json's point, or a draw's, is no point of the experiment's grid
    or names other settings than that point's: Snakemake would train the final runs there
    (fault battery A-2d: a hand-set `lr-0.5` outside the grid trained, rc 0; compile and
    stale refused it only afterwards)."""
    if not isinstance(sel, dict):
        return False  # the key check names it
    draws = sel.get("draws") or []
    picks = [sel, *draws] if isinstance(draws, list) else [sel, draws]
    return any(
        not isinstance(d, dict) or C.point_overrides(exp, str(d.get("point"))) != d.get("overrides")
        for d in picks
    )


def _json_or_none(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def check_stamped_files(cfg: dict[str, Any]) -> None:
    if bad := damaged_stamped_files(cfg):
        raise UserError(
            "damaged (not JSON, without the keys its job writes, not the manifest.json a sound splits.sha256 "
            "beside it names, or choosing what its grid does not hold): "
            f"{', '.join(bad)}; delete them and run again (the jobs that wrote "
            "them make them anew); nothing was run"
        )


def is_current(path: str | Path, stamp: dict[str, str]) -> bool:
    """True when `path` is missing (its job runs anyway) or was written with `stamp`."""
    path = Path(path)
    if not path.is_file():
        return True
    try:
        recorded = json.loads(path.read_text()).get(SPEC_KEY)
    except (OSError, ValueError, AttributeError):
        return False
    return recorded == stamp[SPEC_KEY]


def train_resources(cfg: dict[str, Any], dataset: str | None = None) -> dict[str, Any]:
    """Snakemake resources of a training job on `dataset`: TRAIN_RESOURCES, then the
    config's `resources.train` (less TRAIN_SETTINGS), whose `runtime` (minutes) may be one
    number or a mapping dataset -> minutes (`default:` for the rest)."""
    res = {k: v for k, v in {**TRAIN_RESOURCES, **train_config(cfg)}.items() if k not in TRAIN_SETTINGS}
    if isinstance(res["runtime"], dict):
        per = res["runtime"]
        res["runtime"] = per.get(dataset, per.get("default", TRAIN_RESOURCES["runtime"]))
    return res


def local_gpu_slots(cfg: dict[str, Any]) -> int:
    """The `gpu` resource of a local run: this host's GPUs times `jobs_per_gpu` (psrnn.gpus
    spreads the jobs over the devices), at least 1 so that GPU-asking jobs also run, one
    at a time, on a CPU host."""
    return max(1, host_gpus() * jobs_per_gpu(cfg))


# --- the jobs' shell ----------------------------------------------------------------------------


def shell_prefix(
    suite: str | Path, basedir: str | Path, cfg: dict[str, Any], python_bin: str | None = None
) -> str:
    """The Snakefile's shell.prefix: strict bash, the suite config ($PSRNN_CONFIG), this
    checkout's src/ first on PYTHONPATH, the GPU slots per device (psrnn.gpus), the
    config's job_env; and, for jobs outside a container, the folder of the Python that
    runs Snakemake (`python_bin`) first on PATH, so the jobs' `python` is the one that
    has psrnn's packages (`.venv/bin/snakemake` works without the venv activated). Paths
    are shell-quoted (a config path may hold an apostrophe) and braces doubled (Snakemake
    formats the prefix).

    The slots go here rather than into a param: Snakemake re-runs a job whose params
    changed, and how jobs share a GPU does not change what they compute."""
    prefix = (
        f"set -euo pipefail; export PSRNN_CONFIG={shlex.quote(shown(suite))}; "
        f"export PYTHONPATH={shlex.quote(str(Path(basedir) / 'src'))}"
        "${PYTHONPATH:+:$PYTHONPATH}; "
        f"export {JOBS_PER_GPU_ENV}={jobs_per_gpu(cfg)}; " + job_env(cfg)
    )
    if python_bin:
        prefix += f'export PATH={shlex.quote(python_bin)}:"$PATH"; '
    return prefix.replace("{", "{{").replace("}", "}}")


def one_of(names: Any) -> str:
    """A wildcard constraint: exactly one of `names` (regular expression)."""
    return "|".join(re.escape(str(n)) for n in sorted(names))


def job_env(cfg: dict[str, Any]) -> str:
    """Shell exports of the config's `job_env` (for the Snakefile's shell prefix)."""
    env = sorted((cfg.get("job_env") or {}).items())
    return "".join(f"export {k}={shlex.quote(v)}; " for k, v in env)
