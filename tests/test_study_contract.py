"""Every study against the engine (psrnn.engine.fit): what a run of any study promises, checked
on a tiny run of each. Each study brings its case from its own folder (Study.contract,
a registry.Case) and its CI-sized config (Study.ci_config), so a new study is checked here
with no edit of this file (tests/test_third_study.py runs it on a third).

Exact resume after a kill, a changed checkpoint (or finished run) refused by name and
started over on request, a finished run returned without training, the NaN stop, the
divergence flag, the metrics keys selection and compile read, and the hooks' interface.
The studies' own science (their models, data, tables) is tested in their own files.
"""

import dataclasses
import hashlib
import math
from pathlib import Path

import pytest
import torch
from test_training import Interrupt, kill_at, quiet, read_history, stable

from psrnn import config as C
from psrnn import registry
from psrnn.engine.books import metric_keys
from psrnn.engine.checkpoint import ConfigChanged
from psrnn.engine.fit import fit
from psrnn.engine.hooks import Hooks, hooks_of
from psrnn.errors import TrainingDiverged
from psrnn.files import read_json
from psrnn.registry import Case


def case_of(name: str, folder: Path) -> Case:
    """The study's contract case (Study.contract), its data written under `folder`."""
    return registry.load(registry.STUDIES[name].contract)(folder)


def numbers(metrics: dict) -> dict:
    """metrics.json without what is measured or recorded about the code (time, memory, commit)."""
    return {k: v for k, v in stable(metrics).items() if k != "git_commit"}


def untimed(run: Path) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "epoch_time_s"} for row in read_history(run)]


@pytest.fixture(params=sorted(registry.STUDIES))
def case(request, tmp_path) -> Case:
    return case_of(request.param, tmp_path)


def test_every_study_brings_a_case_and_hooks_the_engine_can_call(monkeypatch, tmp_path):
    """Each case is its own study's runs, `changed` differs from `run` in `key` alone, and
    `limit` caps the epochs (3)."""
    assert set(registry.STUDIES) == set(registry.PLUGINS)
    for name, study in registry.STUDIES.items():
        c = case_of(name, tmp_path / name)
        assert isinstance(c, Case) and registry.of_settings(c.run) is study, name
        assert registry.of_settings(c.changed) is study and registry.of_settings(c.exploding) is study
        assert getattr(c.changed, c.key) != getattr(c.run, c.key), name
        assert dataclasses.replace(c.run, **{c.key: getattr(c.changed, c.key)}) == c.changed, name
        assert getattr(c.run, c.limit) == 3, name
        assert (C.ROOT / study.ci_config).is_file(), name
    import sys
    import types

    renamed = types.ModuleType("renamed_study")  # a study is its folder: named otherwise, refused
    renamed.STUDY = dataclasses.replace(registry.STUDIES["relreg"], name="other")
    monkeypatch.setitem(sys.modules, "renamed_study", renamed)
    with pytest.raises(ValueError, match=r"^renamed_study:STUDY: its folder is psrnn.studies.relreg, not "):
        registry.load_studies({"other": "renamed_study:STUDY"})
    with pytest.raises(
        TypeError, match=r"^psrnn.studies.relreg.study:STUDY: not the Study named 'private_shared' "
    ):
        registry.load_studies({"private_shared": "psrnn.studies.relreg.study:STUDY"})
    with pytest.raises(TypeError, match=r"^psrnn.registry:DEFAULT: not the Study named 'x' "):
        registry.load_studies({"x": "psrnn.registry:DEFAULT"})
    for study in registry.STUDIES.values():
        assert isinstance(hooks_of(study), Hooks), study.name


def test_a_new_studys_hooks_and_name_are_checked_when_loaded(monkeypatch):
    """Hooks lacking a hook, or history columns without the engine's, are named when the
    study loads them; the schema's `study` enum is the registry's names."""
    import sys
    import types

    from psrnn.engine import hooks as engine
    from psrnn.studies.private_shared import hooks as first

    fake = types.ModuleType("fake_hooks")
    own = {k: v for k, v in vars(first.PrivateSharedHooks).items() if not k.startswith("__")}
    fake.Lacking = type("Lacking", (Hooks,), {k: v for k, v in own.items() if k not in ("build", "finish")})
    fake.NoEpoch = type(
        "NoEpoch",
        (Hooks,),
        {**own, "HISTORY_COLUMNS": tuple(c for c in first.HISTORY_COLUMNS if c != "epoch")},
    )
    fake.Whole = type("Whole", (Hooks,), own)
    fake.NotHooks = object
    monkeypatch.setitem(sys.modules, "fake_hooks", fake)
    engine._hooks.cache_clear()
    for cls, error in (
        ("Lacking", r"^study fake: fake_hooks:Lacking lacks build, finish \(psrnn.engine.hooks.Hooks\)$"),
        ("NoEpoch", r"^study fake: fake_hooks:NoEpoch lacks epoch \(history.csv\)$"),
        ("NotHooks", r"^study fake: fake_hooks:NotHooks is not a subclass of psrnn.engine.hooks.Hooks$"),
    ):
        row = dataclasses.replace(registry.STUDIES["private_shared"], name="fake", hooks=f"fake_hooks:{cls}")
        with pytest.raises(TypeError, match=error):
            hooks_of(row)
    row = dataclasses.replace(registry.STUDIES["private_shared"], name="fake", hooks="fake_hooks:Whole")
    whole = hooks_of(row)
    assert isinstance(whole, fake.Whole)
    assert Hooks.capture(whole, None, None, None, None, 1, None) is None  # the defaults
    monkeypatch.setitem(registry.STUDIES, "fake", row)
    assert C.suite_schema()["properties"]["study"]["enum"] == [*registry.STUDIES, *registry.ALIASES]
    assert "fake" in C.suite_schema()["properties"]["study"]["enum"]
    engine._hooks.cache_clear()


def test_a_killed_run_resumes_to_exactly_the_uninterrupted_metrics(case, tmp_path):
    whole = fit(case.run, tmp_path / "whole", log=quiet)
    with pytest.raises(Interrupt):
        fit(case.run, tmp_path / "cut", on_step=kill_at(2, 2), log=quiet)
    assert not (tmp_path / "cut" / "metrics.json").exists()
    logs: list[str] = []
    cut = fit(case.run, tmp_path / "cut", log=logs.append)
    assert "resumed after epoch 1" in logs[0]
    assert stable(cut) == stable(whole)
    no_time = [
        {k: v for k, v in row.items() if k != "epoch_time_s"} for row in read_history(tmp_path / "cut")
    ]
    assert no_time == [
        {k: v for k, v in row.items() if k != "epoch_time_s"} for row in read_history(tmp_path / "whole")
    ]


def test_a_changed_checkpoint_is_refused_by_name_and_starts_over_on_request(case, tmp_path):
    with pytest.raises(Interrupt):
        fit(case.run, tmp_path / "run", on_step=kill_at(2, 1), log=quiet)
    with pytest.raises(ConfigChanged, match=rf"{case.key} \(checkpoint"):
        fit(case.changed, tmp_path / "run", log=quiet)
    restarted = fit(case.changed, tmp_path / "run", restart_on_change=True, log=quiet)
    assert numbers(restarted) == numbers(fit(case.changed, tmp_path / "fresh", log=quiet))


def test_a_finished_run_returns_without_training_and_refuses_other_settings(case, tmp_path):
    first = fit(case.run, tmp_path / "run", log=quiet)

    def must_not_train(*_):
        raise AssertionError("trained again")

    logs: list[str] = []
    assert fit(case.run, tmp_path / "run", on_step=must_not_train, log=logs.append) == first
    assert logs == [f"already complete: {tmp_path / 'run' / 'metrics.json'}"]
    with pytest.raises(ConfigChanged, match=rf"metrics.json .*{case.key} \(checkpoint"):
        fit(case.changed, tmp_path / "run", log=quiet)
    # the resume-exempt settings change no number: the finished run is that run
    assert fit(dataclasses.replace(case.run, progress="auto"), tmp_path / "run", log=quiet) == first


def poisoner(at: tuple[int, int]):
    """An on_step hook that fills every weight with NaN at (epoch, step)."""

    def poison(epoch, step, model):
        if (epoch, step) == at:
            with torch.no_grad():
                for p in model.parameters():
                    p.fill_(math.nan)

    return poison


def test_a_nan_loss_in_the_first_epoch_is_an_error_and_writes_no_metrics(case, tmp_path):
    with pytest.raises(TrainingDiverged, match="epoch 1"):
        fit(case.run, tmp_path / "run", on_step=poisoner((1, 1)), log=quiet)
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_a_later_nan_loss_ends_the_run_at_its_best_epoch(case, tmp_path):
    """A grid point that diverges is a result of the search: the run ends, its best epoch so
    far is its result (as early stopping keeps it), and `diverged` says where and why."""
    logs: list[str] = []
    m = fit(case.run, tmp_path / "run", on_step=poisoner((2, 1)), log=logs.append)
    assert m["stopped"] == "non_finite" and m["epochs_run"] == 1 and m["best_epoch"] == 1
    assert m["diverged"]["epoch"] == 2 and "finite" in m["diverged"]["non_finite"]
    assert math.isfinite(m["test_acc"]) and 0.0 <= m["test_acc"] <= 1.0
    assert any(line.startswith("stopped: ") and "best epoch so far (1)" in line for line in logs)
    # the best epoch's numbers are an untouched run's first epoch
    clean = fit(dataclasses.replace(case.run, **{case.limit: 1}), tmp_path / "clean", log=quiet)
    assert m["best_valid_acc"] == clean["best_valid_acc"] and m["test_acc"] == clean["test_acc"]
    assert untimed(tmp_path / "run") == untimed(tmp_path / "clean")
    best = torch.load(tmp_path / "run" / "ckpt_best.pt", weights_only=True)
    assert best["epoch"] == 1 and all(torch.isfinite(v).all() for v in best["model"].values())
    # finished: a second call returns the record without training
    assert fit(case.run, tmp_path / "run", log=quiet) == m


def test_an_exploding_finite_loss_is_flagged_and_the_run_finishes(case, tmp_path):
    logs: list[str] = []
    m = fit(case.exploding, tmp_path / "run", log=logs.append)
    assert m["stopped"] == "max_epochs" and m["epochs_run"] == 3
    flag = m["diverged"]
    assert (
        flag is not None
        and flag["train_loss"] > 10 * flag["first_loss"]
        and math.isfinite(flag["train_loss"])
    )
    assert sum(line.startswith(f"diverged: epoch {flag['epoch']} ") for line in logs) == 1
    assert read_json(tmp_path / "run" / "metrics.json")["diverged"] == flag


def test_metrics_and_history_carry_what_selection_and_compile_read(case, tmp_path):
    m = fit(case.run, tmp_path / "run", meta={"experiment": "e", "config_name": "c", "point": "p"}, log=quiet)
    study = registry.of_settings(case.run)
    assert set(m) == metric_keys(study)
    assert (m["experiment"], m["config_name"], m["point"], m["seed"]) == ("e", "c", "p", 0)
    assert 0 <= m["test_acc"] <= 1 and 0 <= m["best_valid_acc"] <= 1 and 1 <= m["best_epoch"] <= 3
    assert set(study.regression_keys) <= set(m)
    assert m["config"] == case.run.to_dict()
    columns = list(read_history(tmp_path / "run")[0])
    assert columns == list(hooks_of(study).HISTORY_COLUMNS)
    best = torch.load(tmp_path / "run" / "ckpt_best.pt", weights_only=True)
    assert best["epoch"] == m["best_epoch"] and best["valid_acc"] == m["best_valid_acc"]


@pytest.mark.parametrize("name", sorted(registry.STUDIES))
def test_compile_writes_every_listed_output_and_the_same_bytes_twice(name, tmp_path, monkeypatch):
    """Before any run has finished (every number missing): the whole compile path, through
    the study's row, for every study (its CI-sized config, Study.ci_config); the studies'
    own tests compile real numbers."""
    cfg = C.load_suite(C.ROOT / registry.STUDIES[name].ci_config)
    study = registry.study_of(cfg)
    assert study is registry.STUDIES[name]
    monkeypatch.chdir(tmp_path)
    results = C.results_root(cfg)
    digests = []
    for _ in range(2):
        written = study.compile(cfg, results, C.ROOT / study.reference)
        assert sorted(written) == sorted(study.output_paths(cfg))
        digests.append({str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in written})
    assert digests[0] == digests[1]
