"""The studies the suite reproduces. A suite config's `study:` key picks one (default
`psrnn`, the first study); the same CLI, Snakefile, selection and compile serve both.

    python -m psrnn config config/relreg.yaml     # study: relreg

A study names its run-settings dataclass, its schema overlay (entries replacing those of
config/schema.yaml), the module whose `run(args)` trains one run, the module that compiles
its results, its reference numbers, and whether its data comes through the download and
prepare jobs (generated data does not). Adding a study is one row here plus those modules.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    run_config: str  # "module:Class" of the run settings
    check: str  # "module:function" of the run settings' cross-field checks
    schema: str | None  # overlay on config/schema.yaml (None: that schema as it is)
    trainer: str  # module with run(args) for `python -m psrnn train`
    results: str  # module with output_paths(cfg) and compile(cfg, results_dir, reference)
    reference: str  # reference numbers, relative to the project root
    data_jobs: bool  # download + prepare jobs feed its runs
    paper: bool  # paper/main.tex is its paper (the `paper` job)


STUDIES = {
    "psrnn": Study(
        name="psrnn",
        title="Private and shared representations in RNNs (semi-supervised sequence classification)",
        run_config="psrnn.config:RunConfig",
        check="psrnn.config:check_run",
        schema=None,
        trainer="psrnn.training",
        results="psrnn.results",
        reference="config/reference.yaml",
        data_jobs=True,
        paper=True,
    ),
    "relreg": Study(
        name="relreg",
        title="Relation-level regularization: proto-LSTM cells with a relation loader (Binary Counter)",
        run_config="psrnn.relreg.config:RelRegConfig",
        check="psrnn.relreg.config:check_run",
        schema="config/relreg.schema.yaml",
        trainer="psrnn.relreg.training",
        results="psrnn.relreg.results",
        reference="config/relreg-reference.yaml",
        data_jobs=False,
        paper=False,
    ),
}
DEFAULT = "psrnn"


def study_name(cfg: dict[str, Any]) -> str:
    return cfg.get("study", DEFAULT)


def study_of(cfg: dict[str, Any]) -> Study:
    """The study of a (validated) suite config."""
    return STUDIES[study_name(cfg)]


def of_run(run: Any) -> Any:
    """The trainer module of the study whose run settings `run` is (its `train` function
    takes the run, its folder, metadata, restart_on_change and reuse)."""
    ref = f"{type(run).__module__}:{type(run).__qualname__}"
    study = next(s for s in STUDIES.values() if s.run_config == ref)
    return importlib.import_module(study.trainer)


def load(ref: str) -> Any:
    """The object a "module:name" reference names."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)
