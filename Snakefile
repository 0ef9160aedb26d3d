# The reproduction as one DAG: fixtures -> download -> prepare -> [search -> select] ->
# train -> compile -> paper. Every job calls `python -m psrnn <command>`.
#
#   snakemake --cores 2                                     # no --configfile: the small config (CI), local env
#   snakemake --cores all --use-singularity --configfile config/paper.yaml   # the paper's grid, CUDA image
#   snakemake -n --configfile config/paper-dbpedia.yaml     # the paper config plus DBpedia
#   snakemake --workflow-profile profiles/slurm ...         # on a SLURM cluster
#
# profiles/default (picked up automatically) adds --rerun-incomplete, --apptainer-args
# --nv and printed shell commands. File lists and job parameters come from
# src/psrnn/workflow.py; the config is validated there (JSON Schema + cross-key checks)
# before any job starts. When jobs re-run, and why some inputs are ancient():
# docs/workflow.md.

import os
import sys

from snakemake.utils import min_version

from psrnn import config as C
from psrnn import registry
from psrnn.compile import check_folder_study
from psrnn.engine import codehash
from psrnn.engine import groups as G
from psrnn import workflow as W
from psrnn.errors import UserError
from psrnn.files import unwritable

min_version("9.20")  # pyproject.toml's workflow group


# No `configfile:` directive: the suite config is the last --configfile
# (psrnn.workflow.suite_path), else config/small.yaml, and Snakemake would otherwise
# announce that the default "is extended by" the file the user gave. Why small: a bare
# `snakemake` then costs a few CPU-minutes (toy models, no GPU, no network), where
# config/paper.yaml, the default until issue 52, is 106 H200-hours; and it runs rather than
# refusing so that Snakemake's own bare commands (-n, --lint, --unlock, --list-rules) keep
# working. One line on stderr says which config ran and where the others are.
DEFAULT_SUITE = "config/small.yaml"


report: "paper/report/workflow.rst"


# Snakemake merges the --configfile files into one `config` dict; the jobs must see exactly
# one config file, so that dict is not used (see psrnn.workflow).
try:  # --config KEY=VALUE is refused in one line (Snakemake prints a stack frame per raise)
    SUITE = W.suite_path(
        workflow.overwrite_configfiles,
        default=workflow.source_path(DEFAULT_SUITE),
        cli_config=dict(workflow.config_settings.config),
    )
except UserError as err:
    sys.exit(f"psrnn: {err}")
if not workflow.overwrite_configfiles:
    print(
        f"psrnn: no --configfile: running {DEFAULT_SUITE} (toy models, a few CPU-minutes); "
        "the paper's grid: --configfile config/paper.yaml; every config: config/README.md",
        file=sys.stderr,
    )
try:
    CFG = C.load_suite(SUITE)
    W.check_stamped_files(CFG)  # a damaged manifest.json or selected.json: stop before planning
    codehash.training_digest(registry.study_name(CFG))  # code that does not parse: here, not per job
    check_folder_study(CFG, SUITE)  # results/<name> compiled by another study: a name of its own
    if why := unwritable(C.results_root(CFG)):  # a read-only results folder: one line, not a stack per job
        raise UserError(why)
except UserError as err:  # one line, as the CLI says it: a traceback of our frames helps no one
    sys.exit(f"psrnn: {err}")
RESULTS = str(C.results_root(CFG))
DATA = str(C.data_root(CFG))
# The study's own jobs, outside the engine (fixtures, download, prepare: its data jobs; paper)
# -> the `python -m psrnn` command each runs (psrnn.registry.Study.job_commands): the rules
# below exist only for the jobs its study has (the second study: none).
JOB = registry.study_of(CFG).job_commands


onstart:
    # Jobs write to their logs only (Snakemake's job blocks name each one's `log:`): say
    # where they are before the first job, for a user who wants to watch a run's epochs.
    print(
        f"psrnn: {SUITE}: each job logs to {RESULTS}/logs/<rule>/... (a line per epoch, and "
        f"a heartbeat within one); follow one with tail -f",
        file=sys.stderr,
    )


# The jobs find the suite config through $PSRNN_CONFIG rather than a param: it says
# where the settings live, not what they are (the params do), so two configs that
# define the same runs (paper, paper-dbpedia) share their finished jobs. PYTHONPATH
# makes the jobs run this checkout's code, also inside the container image.
# $PSRNN_JOBS_PER_GPU (`resources.train.jobs_per_gpu`) tells training jobs how many share
# a GPU (psrnn.gpus); not a param, so changing it re-runs nothing. The config's
# `job_env` (e.g. portable CPU numerics in config/small.yaml) goes to every job. Outside
# a container, the jobs' `python` is the one running Snakemake (its folder first on PATH).
PYTHON_BIN = None if W.uses_apptainer(workflow) else os.path.dirname(sys.executable)
shell.prefix(W.shell_prefix(SUITE, workflow.basedir, CFG, PYTHON_BIN))


container: W.container(CFG)


# With --use-singularity, stop before any job when the image is missing (the first job would
# fail inside Snakemake otherwise), keep --nv when the user passes their own
# --apptainer-args, and bind data/ and results/ when they are links out of the checkout.
if W.uses_apptainer(workflow):
    W.check_image(W.container(CFG), workflow.basedir)
    workflow.deployment_settings.apptainer_args = W.apptainer_args(
        workflow.deployment_settings.apptainer_args, CFG
    )


# `resources.train.jobs_per_gpu` training jobs per GPU of this host (psrnn.gpus spreads
# them over the devices; the shell prefix tells the jobs the count), unless the command
# line says `--resources gpu=N`; cluster runs (--jobs/executor) leave it to the scheduler.
if workflow.resource_settings.nodes is None and "gpu" not in workflow.resource_settings.resources:
    workflow.register_resource("gpu", W.local_gpu_slots(CFG))


def current_or_plain(path, stamp):
    """ancient(path) while the file matches the config (a checkout's new mtime re-runs
    nothing), a plain input when its job is about to remake it (see the header)."""
    return ancient(path) if W.is_current(path, stamp) else path


def train_inputs(experiment, search=False):
    """W.train_inputs: the stamped ones (manifest, the grid search's choice)
    current_or_plain, the split tensors ancient(); `search`: without the choice."""
    stamps = W.train_input_stamps(CFG, experiment)
    return {
        k: current_or_plain(v, stamps[k]) if k in stamps else ancient(v)
        for k, v in W.train_inputs(CFG, experiment).items()
        if not (search and k == "selected")
    }


# The compiled files shown in `snakemake --report`, each labelled with what it shows
# (the study's captions; psrnn.workflow.report_items).
REPORTED = W.report_items(CFG)


def reported(path):
    """A compiled file, marked for `snakemake --report` when REPORTED lists it."""
    if path not in REPORTED:
        return path
    category, labels = REPORTED[path]
    caption = workflow.source_path(f"paper/report/{category.lower()}.rst")
    return report(path, caption=caption, category=category, labels=labels)


def train_resources():
    """W.train_resources per job: the runtime (minutes) may differ by dataset."""
    return {
        name: (lambda w, name=name: W.train_resources(CFG, W.experiment_dataset(CFG, w.experiment))[name])
        for name in W.train_resources(CFG)
    }


# Torch threads of a search/train job (`resources.train.threads`); OMP_NUM_THREADS also
# bounds the MKL/OpenMP pools that start before torch reads --threads. Snakemake caps
# threads at --cores; `--set-threads train=N` overrides them.
TRAIN_THREADS = W.train_threads(CFG)


# On a cluster these run where Snakemake runs (the login node), and so do fixtures,
# download and paper (`localrule: True`): downloads need the internet, which compute nodes
# often lack; the paper needs the host's LaTeX; the rest are seconds of work not worth a
# queue slot.
localrules:
    all,
    select,


wildcard_constraints:
    dataset="|".join(CFG["datasets"]),
    # the config's experiments only: another target is "no rule to produce" it, not an
    # error inside an input function
    experiment=W.one_of(C.enabled_experiments(CFG)),
    point="[A-Za-z0-9.+_-]+",
    group="[A-Za-z0-9.+_-]+",
    seed="[0-9]+",


rule all:
    default_target: True
    input:
        G.targets(CFG, W.targets(CFG)),


if "fixtures" in JOB:

    rule fixtures:
        """Small synthetic archives in the upstream formats (configs with `fixtures:` only)."""
        output:
            W.fixture_files(CFG),
        log:
            f"{RESULTS}/logs/fixtures.log",
        benchmark:
            f"{RESULTS}/benchmarks/fixtures.tsv"
        localrule: True
        params:
            folder=lambda w, output: os.path.dirname(os.path.dirname(output[0])),  # <folder>/<ds>/MD5SUMS
        shell:
            f'python -m psrnn {JOB["fixtures"]} {{params.folder}} > {{log}} 2>&1'


if "download" in JOB:

    rule download:
        """One dataset's upstream archives, md5-checked; download.json is written last."""
        input:
            lambda w: [ancient(f) for f in W.download_inputs(CFG, w.dataset)],
        output:
            f"{DATA}/raw/{{dataset}}/download.json",
        log:
            f"{RESULTS}/logs/download/{{dataset}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/download/{{dataset}}.tsv"
        localrule: True
        params:
            spec=lambda w: W.dataset_spec(CFG, w.dataset),
        shell:
            f'python -m psrnn {JOB["download"]} {{wildcards.dataset}} --config "$PSRNN_CONFIG" > {{log}} 2>&1'


if "prepare" in JOB:

    rule prepare:
        """Archives -> train/valid/test tensors + manifest.json (manifest written last)."""
        input:
            lambda w: current_or_plain(W.download_marker(CFG, w.dataset), W.dataset_stamp(CFG, w.dataset)),
        output:
            expand(f"{DATA}/prepared/{{{{dataset}}}}/{{name}}", name=W.SPLIT_FILES),
        log:
            f"{RESULTS}/logs/prepare/{{dataset}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/prepare/{{dataset}}.tsv"
        resources:
            mem_mb=16000,
        params:
            spec=lambda w: W.dataset_spec(CFG, w.dataset),
        shell:
            f'python -m psrnn {JOB["prepare"]} {{wildcards.dataset}} --config "$PSRNN_CONFIG" > {{log}} 2>&1'


rule search:
    """One grid point of an experiment, trained with the first seed."""
    input:
        unpack(lambda w: train_inputs(w.experiment, search=True)),
    output:
        f"{RESULTS}/search/{{experiment}}/{{point}}/metrics.json",
    log:
        f"{RESULTS}/logs/search/{{experiment}}/{{point}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/search/{{experiment}}/{{point}}.tsv"
    # A job killed at its walltime (SLURM) or by a crash resumes from ckpt_last.pt.
    retries: W.TRAIN_RETRIES
    threads: TRAIN_THREADS
    resources:
        **train_resources(),
    params:
        spec=lambda w: W.experiment_spec(CFG, w.experiment, w.point),
        seed=C.search_seed(CFG),
        out=lambda w, output: os.path.dirname(output[0]),
    shell:
        'OMP_NUM_THREADS={threads} python -m psrnn train --config "$PSRNN_CONFIG" '
        "--experiment {wildcards.experiment} --seed {params.seed} --point {wildcards.point} "
        "--out {params.out} --restart-on-change --threads {threads} > {log} 2>&1"


rule search_group:
    """A group of an experiment's grid points (`fused_search: true`; psrnn.engine.groups), trained
    in one process, one shape as one batched model; writes every point's run folder, then
    the group's marker. A killed job resumes each unfinished point from its checkpoint."""
    input:
        unpack(lambda w: train_inputs(w.experiment, search=True)),
    output:
        f"{RESULTS}/search/{{experiment}}/groups/{{group}}.json",
    log:
        f"{RESULTS}/logs/search/{{experiment}}/groups/{{group}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/search/{{experiment}}/groups/{{group}}.tsv"
    retries: W.TRAIN_RETRIES
    threads: TRAIN_THREADS
    resources:
        **train_resources(),
    params:
        spec=lambda w: W.experiment_spec(CFG, w.experiment),
        points=lambda w: G.search_groups(CFG, w.experiment)[w.group],
    shell:
        'OMP_NUM_THREADS={threads} python -m psrnn train-group --config "$PSRNN_CONFIG" '
        "--experiment {wildcards.experiment} --group {wildcards.group} --restart-on-change "
        "--threads {threads} > {log} 2>&1"


rule select:
    """The experiment's grid point with the best validation accuracy -> selected.json."""
    input:
        lambda w: G.search_inputs(CFG, w.experiment, W.search_metrics(CFG, w.experiment)),
    output:
        f"{RESULTS}/search/{{experiment}}/selected.json",
    log:
        f"{RESULTS}/logs/select/{{experiment}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/select/{{experiment}}.tsv"
    params:
        spec=lambda w: W.experiment_spec(CFG, w.experiment),
    shell:
        'python -m psrnn select --config "$PSRNN_CONFIG" --experiment {wildcards.experiment} ' "> {log} 2>&1"


rule train:
    """One final run (experiment x seed), with the selected grid point if there is a grid."""
    input:
        unpack(lambda w: train_inputs(w.experiment)),
    output:
        f"{RESULTS}/runs/{{experiment}}/seed{{seed}}/metrics.json",
    log:
        f"{RESULTS}/logs/train/{{experiment}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train/{{experiment}}/seed{{seed}}.tsv"
    # A job killed at its walltime (SLURM) or by a crash resumes from ckpt_last.pt.
    retries: W.TRAIN_RETRIES
    threads: TRAIN_THREADS
    resources:
        **train_resources(),
    params:
        spec=lambda w: W.experiment_spec(CFG, w.experiment),
        selected=lambda w, input: f"--selected {input.selected}" if "selected" in input.keys() else "",
        out=lambda w, output: os.path.dirname(output[0]),
    shell:
        'OMP_NUM_THREADS={threads} python -m psrnn train --config "$PSRNN_CONFIG" '
        "--experiment {wildcards.experiment} --seed {wildcards.seed} {params.selected} "
        "--out {params.out} --restart-on-change --threads {threads} > {log} 2>&1"


rule final_group:
    """Every final run of one experiment (the suite's `fused_finals: true`; psrnn.engine.group) in
    one process, runs of one shape as one batched model, so that all of them take the same
    numeric path; each keeps its own run folder. A killed job resumes each unfinished run
    from its checkpoint."""
    input:
        unpack(lambda w: train_inputs(w.experiment)),
    output:
        expand(f"{RESULTS}/runs/{{{{experiment}}}}/seed{{seed}}/metrics.json", seed=CFG["seeds"]),
    log:
        f"{RESULTS}/logs/train/{{experiment}}/group.log",
    benchmark:
        f"{RESULTS}/benchmarks/train/{{experiment}}/group.tsv"
    retries: W.TRAIN_RETRIES
    threads: TRAIN_THREADS
    resources:
        **train_resources(),
    params:
        spec=lambda w: W.experiment_spec(CFG, w.experiment),
        selected=lambda w, input: f"--selected {input.selected}" if "selected" in input.keys() else "",
        seeds=" ".join(str(s) for s in CFG["seeds"]),
    shell:
        'OMP_NUM_THREADS={threads} python -m psrnn train-group --config "$PSRNN_CONFIG" '
        "--experiment {wildcards.experiment} --seeds {params.seeds} {params.selected} "
        "--restart-on-change --threads {threads} > {log} 2>&1"


# Both make runs/<experiment>/seed<k>/metrics.json: the suite's `fused_finals` picks one.
if G.fused_finals(CFG):

    ruleorder: final_group > train

else:

    ruleorder: train > final_group


rule compile:
    """Tables 1-4 (csv, md, tex), figures, REPORT.md and the summary metrics.json."""
    input:
        runs=W.final_metrics(CFG),
        manifests=W.manifests(CFG),
        reference=workflow.source_path(W.reference_file(CFG)),
    output:
        [reported(f) for f in W.compile_outputs(CFG)],
    log:
        f"{RESULTS}/logs/compile.log",
    benchmark:
        f"{RESULTS}/benchmarks/compile.tsv"
    shell:
        'python -m psrnn compile --config "$PSRNN_CONFIG" > {log} 2>&1'


if "paper" in JOB:

    rule paper:
        """paper/main.tex -> results/<name>/paper/paper.pdf against the compiled tables and
        figures; build.json says whether it was built (the config's `latex:` decides whether
        a missing latexmk is an error or a skip)."""
        input:
            report=W.compile_report(CFG),
            metrics=W.compile_metrics(CFG),
            tex=workflow.source_path("paper/main.tex"),
        output:
            W.paper_status(CFG),
        log:
            f"{RESULTS}/logs/paper.log",
        benchmark:
            f"{RESULTS}/benchmarks/paper.tsv"
        localrule: True
        # LaTeX lives on the host, not in the CUDA image: a `run:` job runs in Snakemake's
        # own environment, and `container: None` keeps its shell out of the image too.
        container:
            None
        run:
            shell(f'python -m psrnn {JOB["paper"]} --config "$PSRNN_CONFIG" > {{log}} 2>&1')
