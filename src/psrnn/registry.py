"""The studies the suite reproduces, one Study each, named by its folder. A suite config's
`study:` key picks one (default `private_shared`, the first study; its former name `psrnn`
still reads as it, ALIASES); the same CLI, engine (psrnn.engine.fit), Snakefile, selection,
check and compile serve every study alike.

    python -m psrnn config config/relreg.yaml     # study: relreg

A study's `Study` (its folder's study.py, named in PLUGINS by string) names its
run-settings dataclass and its checks, its schema overlay (entries replacing those of
config/schema.yaml), its hooks (the science the engine calls: data, model, optimizer, one
epoch, evaluation, the run's own outputs; a subclass of psrnn.engine.hooks.Hooks), its
results module (`output_paths(cfg)` and `compile(cfg, results_dir, reference)`), its
reference numbers and which of their rows a `ref:` may name, what `explain` asks of a table
cell, and the facts the shared code asks of it; all by module name, so that reading them
imports nothing of the study. Adding a study is one folder under
src/psrnn/studies/ and one line in PLUGINS (docs/extending.md).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# a Study's default selection: the highest validation accuracy, ties to the lower validation loss
Selection = tuple[str, str, tuple[str, ...]]  # (metric, "max" | "min", tie metrics): Study.selection
BY_ACCURACY: Selection = ("best_valid_acc", "max", ("valid_main_loss", "valid_aux_loss"))


@dataclass(frozen=True)
class Case:
    """A study's tiny runs for the contract tests (Study.contract): seconds each on a CPU."""

    run: Any  # its run settings: 3 epochs of at least 2 optimizer steps each
    changed: Any  # the same run with one setting changed, the setting `key`
    key: str
    exploding: Any  # settings whose training loss explodes (10x its first) but stays finite
    limit: str  # the setting that caps its epochs (max_epochs, epochs)


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    package: str  # its folder: the engine and this package are what its training digest covers
    run_config: str  # "module:Class" of the run settings (a frozen dataclass with to_dict())
    check: str  # "module:function(run)": the run settings' cross-field checks
    check_in_suite: str | None  # "module:function(suite, experiment, run, source)": against the suite
    schema: str | None  # overlay on config/schema.yaml (None: that schema as it is)
    hooks: str  # "module:Class": its psrnn.engine.hooks.Hooks, the science the engine calls
    results: str  # module with output_paths(cfg) and compile(cfg, results_dir, reference)
    reference: str  # reference numbers, relative to the project root
    # "module:function(reference) -> set[str]": the ids of the reference file's rows (as
    # psrnn.report.collect.load_reference reads it) that a suite config's `ref:` may name
    reference_ids: str
    # the modules of its data jobs (fixtures, download, prepare), which feed its runs; ()
    # for a study whose runs make their own data
    data_jobs: tuple[str, ...]
    paper: str | None  # module of the `paper` job (paper/main.tex is its paper); None: no paper job
    # settings a run may change and still resume its checkpoint (how it shows progress,
    # where it runs; they change no number)
    resume_exempt: tuple[str, ...]
    # metrics.json key -> kind of value, compared by `psrnn check` (kind picks the tolerance)
    regression_keys: dict[str, str]
    # what the contract tests (tests/test_study_contract.py: resume, refusals, the NaN stop,
    # the divergence flag, metrics keys, compile) run of it, from its own folder, so that a
    # new study is checked against the engine with no test edited: "module:function(folder)
    # -> Case", its tiny runs (data, if any, written under `folder`), and its CI-sized suite
    # config (relative to the project root), compiled before any run has finished
    contract: str
    ci_config: str
    # fused training (psrnn.engine.group): "module:function(run)" giving the key of runs that train
    # as one batched model (None: every run trains alone), and the module whose `Batched`
    # steps them
    group_key: str | None = None
    fused: str | None = None
    # "module:function(cfg)" printing the experiments' parameter counts beside the paper's
    # (`python -m psrnn config --params`; None: the study has none to compare)
    params: str | None = None
    # run settings a study's configs choose per dataset, each with the measurement it rests
    # on (`datasets.<ds>.settings.<key>: {value, evidence}`), never for all datasets at once
    # in `defaults:`; a paper-scale config must choose them for every dataset it trains on
    per_dataset: tuple[str, ...] = ()
    # "module:function(cfg, results_dir, reference, table, row, column)" returning the
    # psrnn.explain.Cell of one cell of its compiled tables, the runs behind it and its
    # verdict (`python -m psrnn explain`; None: the study explains none)
    explain: str | None = None
    # its own commands of `python -m psrnn` (psrnn.cli, beside the shared ones): name ->
    # (module, one-line help), the module giving configure(parser) and run(args), imported
    # only when its command runs; a name another study or the core has is an error
    commands: dict[str, tuple[str, str]] = field(default_factory=dict)
    # the Snakefile's jobs that run the study's own code outside the engine ("fixtures",
    # "download", "prepare": its data_jobs; "paper": its paper) -> the name in `commands`
    # each runs (`python -m psrnn <name> ...`); {} for a study without such jobs
    job_commands: dict[str, str] = field(default_factory=dict)
    # "module:function(cfg)" giving output stem -> what the file shows, the captions of its
    # compiled files in `snakemake --report` (psrnn.workflow.report_items); None: none shown
    captions: str | None = None
    # how `python -m psrnn select` picks a grid point (psrnn.engine.choose): (metric, mode,
    # tie metrics): the search run's metrics.json key it ranks by, "max" or "min", and the
    # keys summed to break ties under `ties: loss` (the lower sum wins, then the earlier
    # point). A record lacking any of them is refused by name, never read as 0
    selection: Selection = BY_ACCURACY

    def settings(self) -> type:
        return load(self.run_config)

    def output_paths(self, cfg: dict[str, Any]) -> list[Path]:
        """Every file the study's compile writes for a validated suite config."""
        return load(f"{self.results}:output_paths")(cfg)

    def compile(self, cfg: dict[str, Any], results_dir: Path, reference: str | Path) -> list[Path]:
        """Write the study's tables, figures, metrics.json and REPORT.md; returns the paths."""
        return load(f"{self.results}:compile")(cfg, results_dir, reference)


# name -> "module:object" of the study's Study (its folder's study.py): the registry names
# each study by string and imports none of its code (tests/test_style.py)
PLUGINS = {
    "private_shared": "psrnn.studies.private_shared.study:STUDY",
    "relreg": "psrnn.studies.relreg.study:STUDY",
}
DEFAULT = "private_shared"  # the study of a suite config without `study:`
# a study's former name -> its name: a suite config written before the rename (issue 53:
# the first study was `psrnn`, the project's name) still reads as that study
ALIASES = {"psrnn": "private_shared"}


def study_name(cfg: dict[str, Any]) -> str:
    """The study a suite config names (`study:`, an old name read as the study's own; none:
    DEFAULT)."""
    name = cfg.get("study", DEFAULT)
    return ALIASES.get(name, name) if isinstance(name, str) else name


def study_of(cfg: dict[str, Any]) -> Study:
    """The study of a (validated) suite config."""
    return STUDIES[study_name(cfg)]


def of_settings(run: Any) -> Study:
    """The study whose run settings `run` is."""
    ref = f"{type(run).__module__}:{type(run).__qualname__}"
    return next(s for s in STUDIES.values() if s.run_config == ref)


def load(ref: str) -> Any:
    """The object a "module:name" reference names."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def load_studies(plugins: dict[str, str]) -> dict[str, Study]:
    """name -> the Study each of `plugins` names; one that is not a Study of that name (its
    folder's: psrnn.studies.<name>), a job naming no command of its own, or a command
    another study has too, is an error naming them, when the package loads."""
    out: dict[str, Study] = {}
    for name, ref in plugins.items():
        study = load(ref)
        if not isinstance(study, Study) or study.name != name:
            raise TypeError(f"{ref}: not the Study named {name!r} that psrnn.registry.PLUGINS says it is")
        if study.package != f"psrnn.studies.{name}":  # a study is its folder, and named by it
            raise ValueError(f"{ref}: its folder is {study.package}, not psrnn.studies.{name}, its name")
        for job, command in study.job_commands.items():
            if command not in study.commands:
                raise ValueError(f"{ref}: its {job!r} job runs {command!r}, which is none of its commands")
        ran = sorted({study.commands[c][0] for c in study.job_commands.values()})
        if ran != sorted({*study.data_jobs, *([study.paper] if study.paper else [])}):
            raise ValueError(f"{ref}: its job_commands run {ran}, not the modules of its data_jobs and paper")
        metric, mode, ties = study.selection
        if mode not in ("max", "min") or not metric or metric in ties:
            raise ValueError(f"{ref}: selection {study.selection!r} is not (metric, max/min, ties)")
        for other in out.values():
            if both := sorted(other.commands.keys() & study.commands.keys()):
                raise ValueError(f"studies {other.name!r} and {name!r} both have the command(s) {both}")
        out[name] = study
    return out


STUDIES: dict[str, Study] = load_studies(PLUGINS)  # each study's facts
if bad := sorted(old for old, new in ALIASES.items() if old in STUDIES or new not in STUDIES):
    raise ValueError(f"psrnn.registry.ALIASES: {bad}: each is a study's name too, or reads as no study")
