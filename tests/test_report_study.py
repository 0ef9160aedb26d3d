"""psrnn.report holds no study's science: which rows of a reference file a `ref:` may name is
what the config's study declares (psrnn.registry.Study.reference_ids), and a table's
heading is the one its study gives it, so the shared gather, check_refs and table writers
serve any study alike."""

from __future__ import annotations

import copy
import dataclasses
import sys
import types

import pandas as pd
import pytest

from psrnn import config as C
from psrnn import registry
from psrnn.report.collect import Suite, check_refs, gather, load_reference, reference_ids
from psrnn.report.tables import Table, to_latex, to_markdown

FAKE_REFERENCE = {"rows": [{"id": "rows/one"}, {"id": "rows/two"}], "other": [{"id": "other/x"}]}


@pytest.fixture
def fake_study(monkeypatch):
    """A study "fake": the first study's settings and hooks, its own reference file whose
    `rows` (not `other`) a `ref:` may name."""
    module = types.ModuleType("fake_refs")
    module.ids = lambda reference: {r["id"] for r in reference.get("rows", [])}
    monkeypatch.setitem(sys.modules, "fake_refs", module)
    study = dataclasses.replace(
        registry.STUDIES["private_shared"],
        name="fake",
        reference="config/fake-reference.yaml",
        reference_ids="fake_refs:ids",
    )
    monkeypatch.setitem(registry.STUDIES, "fake", study)
    return study


def fake_config(ref: str) -> dict:
    """config/small.yaml as a `study: fake` config of one experiment, mnist_gru, with `ref`."""
    cfg = copy.deepcopy(C.load_suite(C.ROOT / "config" / "small.yaml"))
    cfg["study"] = "fake"
    cfg["experiments"] = {"mnist_gru": {**cfg["experiments"]["mnist_gru"], "ref": ref}}
    return cfg


def test_the_refs_a_study_declares_are_those_gather_accepts(fake_study, tmp_path):
    cfg = fake_config("rows/two")
    assert reference_ids(cfg, FAKE_REFERENCE) == {"rows/one", "rows/two"}
    check_refs(cfg, FAKE_REFERENCE)
    s = gather(cfg, FAKE_REFERENCE, tmp_path / "results", tmp_path / "data")
    assert s.reference is FAKE_REFERENCE
    assert s.experiments == ["mnist_gru"] and s.runs == {"mnist_gru": []}
    assert s.experiments_for("rows/two") == ["mnist_gru"] and s.experiments_for("rows/one") == []


def test_a_ref_the_study_does_not_declare_is_refused_naming_its_reference_file(fake_study, tmp_path):
    # a row of the file the study does not let a `ref:` name, and one of no table at all
    for ref in ("other/x", "rows/three"):
        cfg = fake_config(ref)
        with pytest.raises(
            C.ConfigError,
            match=rf"^experiments.mnist_gru.ref: '{ref}' is not a row of config/fake-reference.yaml$",
        ):
            gather(cfg, FAKE_REFERENCE, tmp_path / "results", tmp_path / "data")
    # a reference read from a file is named by its path
    named = {**FAKE_REFERENCE, "file": "/elsewhere/mine.yaml"}
    with pytest.raises(C.ConfigError, match=r"'rows/three' is not a row of /elsewhere/mine.yaml$"):
        check_refs(fake_config("rows/three"), named)


def test_each_real_study_accepts_its_own_rows_and_refuses_the_others():
    first = C.load_suite(C.ROOT / "config" / "small.yaml")
    second = C.load_suite(C.ROOT / "config" / "relreg.yaml")
    first_ref = load_reference(C.ROOT / registry.study_of(first).reference)
    second_ref = load_reference(C.ROOT / registry.study_of(second).reference)
    assert {"table2/mnist/gru", "table4/shared-50", "fig3/mnist-h16"} <= reference_ids(first, first_ref)
    assert "table1/mnist" not in reference_ids(first, first_ref)  # Table 1 rows are datasets, no `ref:`
    assert {"table45/lstm-l2", "table45/rmc-l2"} <= reference_ids(second, second_ref)
    check_refs(first, first_ref)
    check_refs(second, second_ref)
    crossed = copy.deepcopy(second)
    exp = next(e for e, x in crossed["experiments"].items() if x.get("ref") == "table45/lstm-l2")
    crossed["experiments"][exp]["ref"] = "table2/mnist/gru"
    with pytest.raises(
        C.ConfigError,
        match=rf"experiments.{exp}.ref: 'table2/mnist/gru' is not a row of .*relreg-reference.yaml$",
    ):
        check_refs(crossed, second_ref)


def test_a_tables_heading_is_the_one_its_study_gives_it():
    s = Suite(cfg={"name": "tiny", "paper_scale": True}, reference={}, runs={}, settings={}, manifests={})
    data = pd.DataFrame({"bits": [3], "acc": [99.5]})
    t = Table("ablations", "Table 4.5a", "Ablations.", data, data.astype(str), "rr", ["A note."])
    md = to_markdown(t, s)
    assert md.splitlines()[0] == "**Table 4.5a.** Ablations. Config tiny."
    assert md.splitlines()[-1] == "- A note."
    tex = to_latex(t, s)
    assert r"\caption{Ablations. Config tiny.}" in tex and r"\label{tab:ablations}" in tex


def test_each_studys_tables_carry_the_headings_it_gives_them(tmp_path):
    from psrnn.studies.private_shared.results import tables as first
    from psrnn.studies.relreg import ablations
    from psrnn.studies.relreg import results as second

    cfg = C.load_suite(C.ROOT / "config" / "small.yaml")
    s = gather(cfg, load_reference(C.ROOT / "config" / "reference.yaml"), tmp_path / "a", tmp_path / "d")
    assert [(t.name, t.heading) for t in first.all_tables(s)] == [
        (f"table{i}", f"Table {i}") for i in (1, 2, 3, 4)
    ]
    assert to_markdown(first.all_tables(s)[1], s).startswith("**Table 2.** Main results: ")
    cfg = C.load_suite(C.ROOT / "config" / "relreg.yaml")
    r = second.gather(cfg, load_reference(second.REFERENCE_PATH), tmp_path / "b")
    tables = [second.table45(r, second.SEARCH), second.table45(r, second.FIXED), ablations.ablation_table(r)]
    assert [(t.name, t.heading) for t in tables] == [
        ("table4.5", "Table 4.5"),
        ("table4.5-thesis", "Table 4.5-thesis"),
        ("table4.5a", "Table 4.5a"),
    ]
