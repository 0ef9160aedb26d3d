"""The run-settings contract (psrnn.engine.settings.RunSettings): every registered study's
settings hold it, and the engine reads no other attribute of a run's settings."""

import ast
import typing
from pathlib import Path

import pytest

from psrnn import registry
from psrnn.engine import settings as S

ENGINE = Path(S.__file__).parent
MEMBERS = {*typing.get_type_hints(S.RunSettings), "to_dict"}  # seed, lr, device, progress, dataset
RUN_NAMES = {"run", "run0"}  # how the engine's modules name a run's settings


def settings_reads(tree: ast.AST) -> set[str]:
    """The attributes read of a name in RUN_NAMES (`run.lr`, `run0.batch_size`)."""
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in RUN_NAMES
    }


def test_the_protocol_names_the_five_settings_and_to_dict():
    assert MEMBERS == {"seed", "lr", "device", "progress", "dataset", "to_dict"}


@pytest.mark.parametrize("study", sorted(registry.STUDIES))
def test_every_studys_settings_hold_the_protocol(study):
    run = registry.STUDIES[study].settings()()  # every field has a default
    assert isinstance(run, S.RunSettings)
    hints = typing.get_type_hints(S.RunSettings)
    for name, kind in hints.items():
        assert isinstance(getattr(run, name), kind), (study, name, getattr(run, name))
    assert isinstance(run.to_dict(), dict) and run.to_dict()["seed"] == run.seed


def test_the_rule_sees_a_read_outside_the_protocol():
    tree = ast.parse("def f(run, other):\n    return run.lr + run0.noise + other.model\n")
    assert settings_reads(tree) == {"lr", "noise"}


def test_the_engine_reads_only_the_protocol_of_a_runs_settings():
    reads = {
        path.name: settings_reads(ast.parse(path.read_bytes())) - MEMBERS
        for path in sorted(ENGINE.glob("*.py"))
    }
    assert {name: found for name, found in reads.items() if found} == {}
    every = set().union(*(settings_reads(ast.parse(p.read_bytes())) for p in ENGINE.glob("*.py")))
    assert {"seed", "lr", "device"} <= every  # the rule reads the engine's modules
