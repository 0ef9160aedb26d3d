"""The thesis' bold (selected) hyper-parameters of Tables 4.1-4.4, as config/relreg-reference.yaml
records them under each grid's `bold`: the bold was lost when the thesis' text was extracted,
but each value row keeps one stray space beside the bolded value. These tests re-derive every
recorded reading from its printed row by that rule, check that the 16 rows cover each table's
grid settings once with values of that grid, and, where the seed text lies next to the
checkout, that the recorded rows are the seed text's rows, none left out."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

from psrnn.studies.relreg.collect import REFERENCE_PATH
from psrnn.yamlfiles import read_yaml

REF = read_yaml(REFERENCE_PATH)
GRIDS = {g["table"]: g for g in REF["grids"]}
SEED = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "003_b7fe4d80f7aba9c5.txt"
TABLES = ["4.1", "4.2", "4.3", "4.4"]


def items(printed: str) -> list[str]:
    """The braces' content split at its top-level commas (not those inside parentheses),
    each piece with its spaces as printed."""
    if not (printed.startswith("{") and printed.endswith("}")):
        raise ValueError(f"not a braced row: {printed!r}")
    pieces, depth, start = [], 0, 1
    for i, ch in enumerate(printed[1:-1], start=1):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            pieces.append(printed[start:i])
            start = i + 1
    return pieces + [printed[start:-1]]


def bold_reading(printed: str) -> str:
    """The one item of a printed row written otherwise than `v` (the first) or ` v` (the
    others): the lost bold mark. ValueError unless exactly one item is so marked."""
    pieces = items(printed)
    marked = [p.strip() for i, p in enumerate(pieces) if p != ("" if i == 0 else " ") + p.strip()]
    if len(marked) != 1:
        raise ValueError(f"{printed!r}: {len(marked)} marked items, not 1")
    return marked[0]


def rows(table: str) -> list[dict]:
    return GRIDS[table]["bold"]


def all_rows() -> list[tuple[str, dict]]:
    return [(t, row) for t in TABLES for row in rows(t)]


def as_value(reading: str):
    """A reading as the YAML records it: a number, or a list for a tuple."""
    value = ast.literal_eval(reading)
    return list(value) if isinstance(value, tuple) else value


def test_the_rule_on_constructed_rows():
    assert bold_reading("{1, 2 , 3}") == "2"
    assert bold_reading("{ 1 , 2}") == "1"
    assert bold_reading("{(1, 2), (3, 4) }") == "(3, 4)"
    assert bold_reading("{(1, 2) , (3, 4)}") == "(1, 2)"  # the commas inside parentheses do not split
    with pytest.raises(ValueError, match="0 marked"):
        bold_reading("{1, 2, 3}")
    with pytest.raises(ValueError, match="2 marked"):
        bold_reading("{1 , 2, 3 }")


def test_each_recorded_value_is_its_printed_rows_reading():
    assert sorted(GRIDS) == TABLES
    for table, row in all_rows():
        reading = bold_reading(row["printed"])  # raises unless exactly one item is marked
        assert as_value(reading) == row["value"], (table, row)
        if len(row["keys"]) > 1:
            assert isinstance(row["value"], list) and len(row["value"]) == len(row["keys"]), (table, row)


def test_sixteen_rows_cover_each_tables_grid_settings_once():
    assert len(all_rows()) == 16
    for table in TABLES:
        grid = GRIDS[table]["grid"]
        expected = [(k,) for k in grid if k != "tied"]
        if "tied" in grid:
            tied_keys = {tuple(item) for item in grid["tied"]}
            assert len(tied_keys) == 1, table  # every tied choice names the same settings
            expected += list(tied_keys)
        got = Counter(tuple(row["keys"]) for row in rows(table))
        assert got == Counter(expected), table


def test_each_value_is_one_of_its_tables_grid_values():
    for table, row in all_rows():
        grid = GRIDS[table]["grid"]
        if len(row["keys"]) == 1:
            assert row["value"] in grid[row["keys"][0]], (table, row)
        else:
            assert dict(zip(row["keys"], row["value"])) in grid["tied"], (table, row)


def seed_rows(text: str) -> dict[str, list[str]]:
    """The value rows (the part after the tab) of each grid table of the seed text: the lines
    between a "Hyper-parameter<TAB>Values" header and the next "Table 4.x:" caption."""
    tables: dict[str, list[str]] = {}
    block: list[str] | None = None
    for line in text.splitlines():
        if line == "Hyper-parameter\tValues":
            block = []
        elif (caption := re.match(r"Table (4\.\d+):", line)) and block is not None:
            assert caption[1] not in tables, caption[1]
            tables[caption[1]] = block
            block = None
        elif block is not None and line.strip():
            _name, values = line.split("\t")
            block.append(values)
    return tables


def test_printed_rows_are_the_seed_texts_rows():
    if not SEED.is_file():
        pytest.skip(f"the thesis' seed text is not next to the checkout ({SEED})")
    text = SEED.read_text(encoding="utf-8")
    for table, row in all_rows():
        assert row["printed"] in text, (table, row["printed"])
    assert seed_rows(text) == {t: [row["printed"] for row in rows(t)] for t in TABLES}


def model_of(cfg: dict, exp: str) -> tuple:
    """An experiment's run settings (seed 1) with the penalties as what they do: l2 (eq. 3.6,
    every weight) folded into l2_cell and l2_noncell (eq. 3.7), which together cover every weight."""
    from psrnn import config as C

    run = C.resolve_run(cfg, exp, 1).to_dict()
    lam = float(run.pop("l2", 0.0) or 0.0)
    if run.get("model") == "proto":
        run["l2_cell"] = float(run.get("l2_cell") or 0.0) + lam
        run["l2_noncell"] = float(run.get("l2_noncell") or 0.0) + lam
    else:
        run["l2"] = lam
    return tuple(sorted((k, repr(v)) for k, v in run.items()))


def test_the_thesis_rows_of_relreg_yaml_train_the_bolded_settings(tmp_path):
    """config/relreg.yaml's *_thesis experiments (Table 4.5 as the thesis trained it) set
    exactly the readings above for their model (psrnn.studies.relreg.results.thesis_differences,
    which the table's caption uses); a changed value is named, and so is a regulariser dropped
    or added. Table 4.4's one bold set is the both row's (it holds epsilon = 1.0): the L2 and
    cell rows have no settings from the thesis and no *_thesis experiment, so no model trains
    twice under two names."""
    from psrnn import config as C
    from psrnn.report.collect import load_reference
    from psrnn.studies.relreg import results as R

    cfg = C.load_suite(C.ROOT / "config" / "relreg.yaml")
    s = R.gather(cfg, load_reference(REFERENCE_PATH), tmp_path)  # no runs: settings from the config
    fixed = [e for _, e in R.rows(s, table=R.FIXED) if e]
    assert fixed == [
        "lstm_thesis",
        "rmc_thesis",
        "transformer_thesis",
        "transformer_thesis_nomask",  # the same settings, the other attention reading
        "proto_both_thesis",
    ]
    assert {e: R.thesis_differences(s, e) for e in fixed} == {e: [] for e in fixed}
    both = s.settings["proto_both_thesis"]
    s.settings["proto_both_thesis"] = {**both, "cells": 4}
    assert R.thesis_differences(s, "proto_both_thesis") == ["cells 4 vs 3"]
    s.settings["proto_both_thesis"] = {**both, "noise": 0.0}  # drops epsilon: the cell row's reading
    assert R.thesis_differences(s, "proto_both_thesis") == ["noise 0.0 vs 1.0"]
    s.settings["proto_both_thesis"] = {**both, "l2": 0.001}  # adds the plain L2 of eq. 3.6
    assert R.thesis_differences(s, "proto_both_thesis") == ["l2 0.001 vs 0.0"]
    s.settings["lstm_thesis"] = {**s.settings["lstm_thesis"], "l2": 0.0}  # drops its only regulariser
    assert R.thesis_differences(s, "lstm_thesis") == ["l2 0.0 vs 0.001"]
    # no model twice under two names: every pair of rows differs in some run setting once the
    # penalties are written as what they do (eq. 3.6's l2 adds to both eq. 3.7 lambdas)
    assert len({model_of(cfg, e) for e in fixed}) == len(fixed)
    old = {  # the two rows issue 49 found to be one model
        "proto_l2_thesis": {**cfg["experiments"]["proto_both_thesis"], "noise": 0.0},
        "proto_cell_thesis": {**cfg["experiments"]["proto_both_thesis"], "noise": 0.0},
    }
    old["proto_l2_thesis"].update(l2=0.001, l2_cell=0.0, l2_noncell=0.0)
    both = {**cfg, "experiments": {**cfg["experiments"], **old}}
    assert model_of(both, "proto_l2_thesis") == model_of(both, "proto_cell_thesis")
    # a row the thesis gives no settings for differs as a whole, whatever it trains
    s.cfg["experiments"]["proto_both_thesis"]["ref"] = "table45/ours-l2"
    assert R.thesis_differences(s, "proto_both_thesis") == ["the thesis gives no settings for this row"]


def test_a_reference_file_with_a_syntax_error_is_one_line_with_its_place(tmp_path):
    """Both studies' reference files are read as the suite configs are: a YAML syntax error
    names file:line:column (it was a 65-line traceback), a missing file its path."""
    from psrnn.errors import UserError
    from psrnn.report.collect import load_reference

    bad = tmp_path / "relreg-reference.yaml"
    text = REFERENCE_PATH.read_text().replace("table45:\n", "table45:\n  - id: [broken\n", 1)
    bad.write_text(text)
    with pytest.raises(UserError, match=rf"^{bad}:\d+:\d+: ") as err:
        load_reference(bad)
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="reference file not found"):
        load_reference(tmp_path / "none.yaml")
    assert load_reference(REFERENCE_PATH)["table45"][0]["id"] == "table45/lstm-l2"
