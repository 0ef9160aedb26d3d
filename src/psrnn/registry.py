"""The studies the suite reproduces, one row each. A suite config's `study:` key picks one
(default `psrnn`, the first study); the same CLI, engine (psrnn.engine.fit), Snakefile,
selection, check and compile serve every study alike.

    python -m psrnn config config/relreg.yaml     # study: relreg

A row names the study's run-settings dataclass and its checks, its schema overlay (entries
replacing those of config/schema.yaml), its hooks module (the science the engine calls:
data, model, optimizer, one epoch, evaluation, the run's own outputs; psrnn.engine.fit.Hooks
says what it holds), its results module (`output_paths(cfg)` and `compile(cfg,
results_dir, reference)`), its reference numbers, and the facts the shared code asks of
it. Adding a study is one row here plus those modules (README: "Add your own dataset,
variant, model or study").
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
    package: str  # its folder: the engine and this package are what its training digest covers
    run_config: str  # "module:Class" of the run settings (a frozen dataclass with to_dict())
    check: str  # "module:function(run)": the run settings' cross-field checks
    check_in_suite: str | None  # "module:function(suite, experiment, run, source)": against the suite
    schema: str | None  # overlay on config/schema.yaml (None: that schema as it is)
    hooks: str  # module the engine trains a run with (psrnn.engine.fit.Hooks)
    results: str  # module with output_paths(cfg) and compile(cfg, results_dir, reference)
    reference: str  # reference numbers, relative to the project root
    # the modules of its data jobs (fixtures, download, prepare), which feed its runs; ()
    # for a study whose runs make their own data
    data_jobs: tuple[str, ...]
    paper: str | None  # module of the `paper` job (paper/main.tex is its paper); None: no paper job
    # settings a run may change and still resume its checkpoint (how it shows progress,
    # where it runs; they change no number)
    resume_exempt: tuple[str, ...]
    # metrics.json key -> kind of value, compared by `psrnn check` (kind picks the tolerance)
    regression_keys: dict[str, str]
    # fused training (psrnn.engine.group): "module:function(run)" giving the key of runs that train
    # as one batched model (None: every run trains alone), and the module whose `Batched`
    # steps them
    group_key: str | None = None
    fused: str | None = None
    # "module:function(cfg)" printing the experiments' parameter counts beside the paper's
    # (`python -m psrnn config --params`; None: the study has none to compare)
    params: str | None = None

    def settings(self) -> type:
        return load(self.run_config)

    def engine_hooks(self) -> Any:
        """The hooks module (psrnn.engine.fit.hooks_of checks it against psrnn.engine.fit.Hooks)."""
        return importlib.import_module(self.hooks)

    def output_paths(self, cfg: dict[str, Any]) -> list[Path]:
        """Every file the study's compile writes for a validated suite config."""
        return load(f"{self.results}:output_paths")(cfg)

    def compile(self, cfg: dict[str, Any], results_dir: Path, reference: str | Path) -> list[Path]:
        """Write the study's tables, figures, metrics.json and REPORT.md; returns the paths."""
        return load(f"{self.results}:compile")(cfg, results_dir, reference)


STUDIES = {
    "psrnn": Study(
        name="psrnn",
        package="psrnn.studies.private_shared",
        title="Private and shared representations in RNNs (semi-supervised sequence classification)",
        run_config="psrnn.studies.private_shared.settings:RunConfig",
        check="psrnn.studies.private_shared.settings:check_run",
        check_in_suite="psrnn.studies.private_shared.settings:check_window",
        schema=None,
        hooks="psrnn.studies.private_shared.hooks",
        results="psrnn.studies.private_shared.results.compile",
        reference="config/reference.yaml",
        data_jobs=(
            "psrnn.studies.private_shared.data.fixtures",
            "psrnn.studies.private_shared.data.download",
            "psrnn.studies.private_shared.data.prepare",
        ),
        paper="psrnn.studies.private_shared.results.paper",
        params="psrnn.studies.private_shared.params:print_params",
        # max_tokens: the same batches' gradients in more or fewer pieces (lower it and
        # resume after running out of GPU memory)
        resume_exempt=("progress", "device", "max_tokens", "cuda_graphs"),
        regression_keys={
            "test_acc": "acc",
            "best_valid_acc": "acc",
            "best_epoch": "epoch",
            "epochs_run": "epoch",
            "test_main_loss": "loss",
            "test_aux_loss": "loss",
            "valid_main_loss": "loss",
            "valid_aux_loss": "loss",
            "train_main_loss": "loss",
            "train_aux_loss": "loss",
            "params": "count",
            "params_main": "count",
            "params_head": "count",
            "params_aux": "count",
        },
    ),
    "relreg": Study(
        name="relreg",
        package="psrnn.studies.relreg",
        title="Relation-level regularization: proto-LSTM cells with a relation loader (Binary Counter)",
        run_config="psrnn.studies.relreg.settings:RelRegConfig",
        check="psrnn.studies.relreg.settings:check_run",
        check_in_suite=None,
        schema="config/relreg.schema.yaml",
        hooks="psrnn.studies.relreg.hooks",
        results="psrnn.studies.relreg.results",
        reference="config/relreg-reference.yaml",
        data_jobs=(),
        paper=None,
        resume_exempt=("progress", "device"),
        regression_keys={
            "test_acc": "acc",
            "test_bit_acc": "acc",
            "best_valid_acc": "acc",
            "best_epoch": "epoch",
            "epochs_run": "epoch",
            "valid_main_loss": "loss",
            "train_loss": "loss",
            "params": "count",
            "cell_params": "count",
        },
        group_key="psrnn.studies.relreg.settings:group_key",
        fused="psrnn.studies.relreg.fused",
    ),
}
DEFAULT = "psrnn"  # the study of a suite config without `study:`


def study_name(cfg: dict[str, Any]) -> str:
    return cfg.get("study", DEFAULT)


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
