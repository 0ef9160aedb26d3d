"""The second study's suite config: validated by its own run schema, resolved to
RelRegConfig, searched over grids with tied settings, without moving the first study."""

import pytest

from psrnn import config as C
from psrnn import workflow as W
from psrnn.engine.selection import overrides_for
from psrnn.files import read_json
from psrnn.studies.relreg.settings import RelRegConfig, with_defaults

RELREG = C.ROOT / "config" / "relreg.yaml"
FULL = C.ROOT / "config" / "relreg-full.yaml"


def suite(**experiment):
    return {
        "study": "relreg",
        "name": "t",
        "seeds": [0],
        "datasets": {"bincounter": {}},
        "experiments": {"e": {"dataset": "bincounter", **experiment}},
    }


def test_relreg_config_resolves_to_its_own_settings():
    cfg = C.load_suite(RELREG)
    run = C.resolve_run(cfg, "proto_both", 3, point="l2_cell-0.001_l2_noncell-0.01_noise-0.1")
    assert isinstance(run, RelRegConfig)
    assert (run.model, run.cells, run.hidden, run.lr, run.seed) == ("proto", 4, 8, 0.01, 3)
    assert (run.l2_cell, run.l2_noncell, run.noise) == (0.001, 0.01, 0.1)
    assert run.test_bits == (6, 8, 10, 12, 14, 16) and run.train_bits == 3


def test_tied_grid_settings_vary_together():
    cfg = C.load_suite(RELREG)
    points = dict(C.grid_points(cfg["experiments"]["rmc_l2"]))
    assert len(points) == 2 * 5 * 3
    shapes = {(p["hidden"], p["key_size"], p["heads"]) for p in points.values()}
    assert shapes == {(8, 8, 1), (8, 4, 2), (10, 5, 2)}
    assert "heads-2_hidden-8_key_size-4_l2-0.001_lr-0.01" in points
    for pid in points:  # every point is a valid run
        run = C.resolve_run(cfg, "rmc_l2", 0, point=pid)
        assert run.hidden == run.key_size * run.heads


def test_first_study_point_ids_do_not_move():
    exp = {"grid": {"lr": [0.1, 0.3], "hidden": [64]}}
    assert [p for p, _ in C.grid_points(exp)] == ["hidden-64_lr-0.1", "hidden-64_lr-0.3"]


@pytest.mark.parametrize(
    ("experiment", "needle"),
    [
        ({"model": "gru"}, "experiments.e.model: 'gru' is not one of"),
        ({"model": "rmc", "hidden": 8, "key_size": 3, "heads": 2}, "hidden: 8 must equal key_size * heads"),
        ({"model": "lstm", "noise": 0.1}, "model lstm has no proto-LSTM cells"),
        ({"model": "lstm", "shared": 0.5}, "'shared' was unexpected"),
        ({"model": "lstm", "grid": {"tied": [{"heads": 0}]}}, "experiments.e.grid.tied[0].heads"),
        ({"model": "lstm", "grid": {"lr": [0.0]}}, "experiments.e.grid.lr[0]"),
        ({"model": "lstm", "causal": True}, "causal: model lstm is recurrent"),
        ({"model": "transformer", "causal": "yes"}, "experiments.e.causal: 'yes' is not of type 'boolean'"),
    ],
)
def test_bad_values_are_named(experiment, needle):
    with pytest.raises(C.ConfigError, match=None) as err:
        C.validate_suite(suite(**experiment))
    assert needle in str(err.value)


def test_unknown_study_is_named():
    with pytest.raises(C.ConfigError, match="study: 'nope' is not a study"):
        C.validate_suite({**suite(model="lstm"), "study": "nope"})


def test_first_study_settings_are_refused_in_relreg_and_back():
    with pytest.raises(C.ConfigError, match="unknown run setting"):
        C.coerce_run({"shared": 0.5}, "relreg")
    with pytest.raises(C.ConfigError, match="unknown run setting"):
        C.coerce_run({"cells": 4})


def test_workflow_has_no_data_jobs_and_no_paper_for_relreg():
    cfg = C.load_suite(RELREG)
    files = W.all_jobs_outputs(cfg)
    assert not [f for f in files if "/prepared/" in f or "download.json" in f or "paper/" in f]
    assert W.train_inputs(cfg, "lstm_l2") == {"selected": "results/relreg/search/lstm_l2/selected.json"}
    assert W.manifests(cfg) == []
    assert W.reference_file(cfg).endswith("config/relreg-reference.yaml")
    # 7 rows of Table 4.5 and Figure 4.2, 5 ablations, 5 rows at the thesis' settings; 20 seeds
    assert len(W.final_metrics(cfg)) == 17 * 20


def test_full_grid_config_has_the_thesis_grids():
    cfg = C.load_suite(FULL)
    sizes = {e: len(C.grid_points(cfg["experiments"][e])) for e in cfg["experiments"]}
    # Tables 4.1-4.4: 3 x 2 x 5; 8 shapes x 2 x 5; 9 shapes x 3 layers x 2 x 5; proto 3 x 6 x 2 x 5 x 5 x 5
    assert sizes["lstm_l2"] == 30 and sizes["rmc_l2"] == 80 and sizes["transformer_l2"] == 270
    assert sizes["proto_both"] == 3 * 6 * 2 * 5 * 5 * 5
    # the unmasked Transformer keeps transformer_l2's grid; the selection ablations are off
    assert cfg["experiments"]["transformer_l2_nomask"]["grid"] == cfg["experiments"]["transformer_l2"]["grid"]
    assert not [e for e in cfg["experiments"] if e.endswith("_valid3")]
    assert (
        C.resolve_run(cfg, "transformer_l2", 0).causal
        and not C.resolve_run(cfg, "transformer_l2_nomask", 0).causal
    )


def test_transformer_row_is_causal_with_table_43s_rates_and_the_ablations_share_their_rows_grids():
    cfg = C.load_suite(RELREG)
    exps = cfg["experiments"]
    assert C.resolve_run(cfg, "transformer_l2", 0).causal is True
    assert exps["transformer_l2"]["grid"]["lr"] == [0.01, 0.05]  # Table 4.3
    assert C.resolve_run(cfg, "transformer_l2_nomask", 0).causal is False
    assert exps["transformer_l2_nomask"]["grid"] == exps["transformer_l2"]["grid"]
    for main in ("lstm_l2", "proto_l2", "proto_cell", "proto_both"):
        variant = f"{main}_valid3"
        assert exps[variant]["grid"] == exps[main]["grid"] and "ref" not in exps[variant]
        a, b = C.resolve_run(cfg, main, 0).to_dict(), C.resolve_run(cfg, variant, 0).to_dict()
        assert {k for k in a if a[k] != b[k]} == {"valid_bits"}
        assert (a["valid_bits"], b["valid_bits"]) == ([4, 5], [3])
    # the CI slice keeps its two experiments only
    assert list(C.load_suite(C.ROOT / "config" / "relreg-ci.yaml")["experiments"]) == [
        "lstm_l2",
        "proto_both",
    ]


def test_settings_recorded_before_a_field_existed_read_as_its_default():
    recorded = RelRegConfig(model="lstm", hidden=10).to_dict()
    del recorded["causal"], recorded["slots"]
    assert with_defaults(recorded) == RelRegConfig(model="lstm", hidden=10).to_dict()
    assert with_defaults({**recorded, "causal": True})["causal"] is True  # recorded values win


@pytest.mark.parametrize(
    "experiment", ["lstm_l2", "rmc_l2", "proto_l2", "proto_cell", "proto_noise", "proto_both"]
)
def test_committed_runs_are_still_the_runs_the_config_asks_for(experiment):
    """The committed runs are the config's: each final run's recorded settings, fields it
    predates at their defaults, are the settings config/relreg.yaml gives it today, at the
    point its selection drew for its seed (so no run of them is re-trained)."""
    cfg = C.load_suite(RELREG)
    root = C.ROOT / C.results_root(cfg)
    selected = read_json(root / "search" / experiment / "selected.json")
    # the selection's stamp still matches the config, so Snakemake keeps it (and the runs after it)
    assert W.is_current(root / "search" / experiment / "selected.json", W.selection_stamp(cfg, experiment))
    for seed in cfg["seeds"]:
        recorded = read_json(root / "runs" / experiment / f"seed{seed}" / "metrics.json")["config"]
        today = C.resolve_run(cfg, experiment, seed, selected=overrides_for(selected, seed)[1]).to_dict()
        assert with_defaults(recorded) == today
