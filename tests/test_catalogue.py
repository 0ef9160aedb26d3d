"""The config catalogue (config/README.md, `python -m psrnn config --list`): written from the
configs themselves, so the page and the command say the same, and each cost names where its
number comes from."""

import re
import subprocess

import pytest

from psrnn import catalogue as K
from psrnn import config as C
from psrnn import registry
from psrnn.cli import main

ROOT = C.ROOT
README = ROOT / "config" / "README.md"
# a file of the repository that a cost or hardware line names as its source
SOURCE = re.compile(r"(?<![\w/.-])((?:results|docs|tests|config|containers|profiles)/[\w./-]*\w)")


def committed_configs() -> list:
    """config/*.yaml as git holds them (a file of your own there is not the committed page's)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "config/*.yaml"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return sorted((ROOT / "config").glob("*.yaml"))  # no git: a copy of the tree
    return [ROOT / f for f in out] if out else sorted((ROOT / "config").glob("*.yaml"))


@pytest.fixture(scope="module")
def catalogue():
    return K.entries(committed_configs())


def test_the_committed_readme_is_the_catalogue_of_the_committed_configs(catalogue):
    assert README.read_text() == K.markdown(*catalogue), (
        "config/README.md is stale: python -m psrnn config --list --markdown > config/README.md"
    )


def test_config_list_prints_the_same_catalogue_also_under_quiet(capsys):
    for args in (["config", "--list"], ["-q", "config", "--list"]):
        assert main(args) == 0
        assert capsys.readouterr().out == K.text(*K.entries()), args
    assert main(["config", "--list", "--markdown"]) == 0
    assert capsys.readouterr().out == K.markdown(*K.entries())


def test_suite_configs_are_those_load_suite_accepts_and_the_rest_are_listed_apart(catalogue):
    suites, others = catalogue
    for s in suites:
        C.load_suite(ROOT / "config" / s.file)  # raises on a config it refuses
    for o in others:
        with pytest.raises(C.ConfigError):
            C.load_suite(ROOT / "config" / o.file)
        assert o.about.endswith((".", "?")) and len(o.about) > 30, o  # a sentence of its header
    assert {s.file for s in suites} >= {"small.yaml", "paper.yaml", "quick.yaml", "relreg.yaml"}
    assert {o.file: o.kind for o in others}["schema.yaml"] == K.KINDS["$defs"]
    # by study in the registry's order, and every study has one at least
    assert [s.study for s in suites] == sorted((s.study for s in suites), key=list(registry.STUDIES).index)
    assert {s.study for s in suites} == set(registry.STUDIES)


def test_every_suite_config_states_its_purpose_hardware_and_cost_with_their_sources(catalogue):
    """Each in its own file (not inherited), and every cost either says it is not measured or
    names a file of the repository that holds the number."""
    suites, _ = catalogue
    for s in suites:
        assert K.NOT_STATED not in (s.description, s.hardware, s.cost), s.file
        named = SOURCE.findall(s.cost + " " + s.hardware)
        assert named or "not measured" in s.cost, (s.file, s.cost)
        missing = [f for f in named if not (ROOT / f).exists()]
        assert missing == [], (s.file, missing)
        cfg = C.load_suite(ROOT / "config" / s.file)
        assert s.results == f"{C.results_root(cfg)}/"


def test_nothing_is_inherited_and_a_shared_results_folder_is_named(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "name: base\ndescription: the base\ncatalogue: {hardware: a CPU, cost: 1 min (results/x.md)}\n"
    )
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nname: child\n")
    (tmp_path / "twin.yaml").write_text("extends: base.yaml\ndescription: the base again\n")
    (tmp_path / "ref.yaml").write_text("# Numbers of a paper, as printed. More text.\npaper: P\n")
    suites, others = K.entries(sorted(tmp_path.glob("*.yaml")))
    by = {s.file: s for s in suites}
    assert (by["child.yaml"].description, by["child.yaml"].cost) == (K.NOT_STATED, K.NOT_STATED)
    assert by["child.yaml"].extends == "base.yaml" and by["child.yaml"].results == "results/child/"
    assert by["twin.yaml"].results == "results/base/" and by["twin.yaml"].hardware == K.NOT_STATED
    assert K.sharing(suites, by["base.yaml"]) == " (with twin.yaml)"
    assert [(o.file, o.kind, o.about) for o in others] == [
        ("ref.yaml", K.KINDS["paper"], "Numbers of a paper, as printed.")
    ]
    text = K.text(suites, others)
    assert "config/twin.yaml (extends base.yaml) -> results/base/ (with base.yaml)" in text
    assert "| [child.yaml](child.yaml) (extends base.yaml) | not stated in the file |" in K.markdown(
        suites, others
    )


def test_every_link_of_the_readme_resolves():
    targets = re.findall(r"\]\(([^)#\s]+)\)", README.read_text())
    assert targets and [t for t in targets if not (README.parent / t).exists()] == []


def test_list_and_a_config_file_exclude_each_other(capsys):
    assert main(["config", "config/small.yaml", "--list"]) == 2
    assert main(["config"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "psrnn config: error: --list takes no config file (--markdown goes with --list)",
        "psrnn config: error: name a suite config (e.g. config/small.yaml), or --list for every config",
    ]
