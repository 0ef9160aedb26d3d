"""The dataset registry (psrnn.studies.private_shared.datasets) is the one place each dataset's facts
live: the
config, the schema, the workflow and every data module agree with it, and data prepared
from the fixtures has the shape its row says."""

import subprocess
import sys

import pytest

from psrnn import config as C
from psrnn.studies.private_shared import settings as S
from psrnn.studies.private_shared.data import fixtures, read_manifest
from psrnn.studies.private_shared.data import prepare as P
from psrnn.studies.private_shared.data.fixtures import write_fixtures
from psrnn.studies.private_shared.data.readers import READERS
from psrnn.studies.private_shared.data.sources import SOURCES
from psrnn.studies.private_shared.datasets import REGISTRY

NAMES = ["mnist", "fmnist", "cifar10", "imdb", "dbpedia"]


def test_the_registry_names_the_datasets_in_order():
    assert list(REGISTRY) == NAMES and S.DATASETS == tuple(NAMES)
    assert all(ds.name == name for name, ds in REGISTRY.items())


def test_every_dataset_has_a_source_reader_preparer_and_fixture():
    """The README's recipe: one row plus these; a missing one is named here."""
    for part, names in [
        ("sources.SOURCES", SOURCES),
        ("readers.READERS", READERS),
        ("prepare.NOTES", P.NOTES),
        ("fixtures.BUILDERS", fixtures.BUILDERS),
        ("fixtures.DATASETS", fixtures.DATASETS),
    ]:
        assert sorted(names) == sorted(REGISTRY), part


def test_rows_are_well_formed():
    for ds in REGISTRY.values():
        image = ds.input == "continuous"
        assert ds.input in ("continuous", "categorical"), ds.name
        assert (ds.image_side is not None) == image, ds.name  # prepare_images / prepare_texts
        assert ds.classes >= 2 and ds.official_test > 0, ds.name
        if image:
            assert 0 < ds.valid_size < ds.official_train and ds.features in (1, 3), ds.name
            assert ds.filtered_train is None and ds.train_size is None, ds.name
        else:
            assert 2 <= ds.features <= 256, ds.name  # symbols are stored as uint8
            assert (ds.valid_size is None) != (ds.train_size is None), ds.name  # prepare: not both
            assert 0 < ds.split_pool <= ds.official_train, ds.name
            assert max(ds.train_size or 0, ds.valid_size or 0) < ds.split_pool, ds.name


def test_rows_match_the_papers_table_1():
    """config/reference.yaml's Table 1 against the rows (DBpedia: the thesis's sizes are
    not ours, see data/README.md; its classes are)."""
    table1 = {row["dataset"]: row for row in C.load_yaml(C.ROOT / "config" / "reference.yaml")["table1"]}
    assert list(table1) == NAMES
    for name, ds in REGISTRY.items():
        row = table1[name]
        assert row["classes"] == ds.classes, name
        if ds.image_side is not None:
            assert row["mean_length"] == ds.steps() and row["train"] == ds.official_train - ds.valid_size
            # CIFAR-10's "45K / 15K": 5K valid + the 10K test images held out
            held_out = ds.valid_size + (ds.official_test if name == "cifar10" else 0)
            assert row["valid"] == held_out, name
    imdb = REGISTRY["imdb"]  # 20K train + 2.2K valid of the reviews kept by the filter
    assert (table1["imdb"]["train"], table1["imdb"]["valid"]) == (
        imdb.train_size,
        imdb.split_pool - imdb.train_size,
    )


def test_prepare_defaults_are_the_rows():
    """prepare.DEFAULTS as it was typed before the registry: the paper's protocol."""
    caps = {"train": None, "valid": None, "test": None}
    assert P.DEFAULTS == {
        "mnist": {"downsample": None, "valid_size": 10_000, "seed": 0, **caps},
        "fmnist": {"downsample": None, "valid_size": 10_000, "seed": 0, **caps},
        "cifar10": {"downsample": None, "valid_size": 5_000, "seed": 0, **caps},
        "imdb": {
            "min_chars": 500,
            "max_length": None,
            "alphabet_size": 60,
            "lowercase": False,
            "train_size": 20_000,
            "valid_size": None,
            "seed": 0,
            **caps,
        },
        "dbpedia": {
            "min_chars": 0,
            "max_length": None,
            "alphabet_size": 70,
            "lowercase": True,
            "train_size": None,
            "valid_size": 14_000,
            "seed": 0,
            **caps,
        },
    }
    assert P.IMAGES == ("mnist", "fmnist", "cifar10") and P.TEXTS == ("imdb", "dbpedia")


def test_model_inputs_are_the_rows():
    """(input kind, values per step, classes) as the parameter counts see them; a config's
    alphabet_size replaces a text's default and nothing else."""
    assert {n: (ds.input, ds.input_features(), ds.classes) for n, ds in REGISTRY.items()} == {
        "mnist": ("continuous", 1, 10),
        "fmnist": ("continuous", 1, 10),
        "cifar10": ("continuous", 3, 10),
        "imdb": ("categorical", 60, 2),
        "dbpedia": ("categorical", 70, 14),
    }
    assert REGISTRY["imdb"].input_features({"alphabet_size": 40}) == 40
    assert REGISTRY["cifar10"].input_features({"downsample": 16}) == 3
    assert REGISTRY["cifar10"].steps({"downsample": 16}) == 256 and REGISTRY["imdb"].steps() is None


# --- the config --------------------------------------------------------------------------


def schema_enums(node, path=""):
    """(path, enum) of every enum in the schema that lists a dataset."""
    if isinstance(node, dict):
        if "mnist" in (node.get("enum") or []):
            yield path, node["enum"]
        for key, value in node.items():
            yield from schema_enums(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from schema_enums(value, f"{path}/{i}")


def test_the_schema_enums_list_the_registry():
    enums = dict(schema_enums(C.load_yaml(C.SCHEMA_PATH)))
    assert len(enums) >= 3, enums  # datasets:, run.dataset, resources.train.runtime
    for path, enum in enums.items():
        extra = ["default"] if path.endswith("/runtime/oneOf/1/propertyNames") else []
        assert enum == NAMES + extra, path


@pytest.mark.parametrize(
    "config, lengths",
    [
        ("paper.yaml", {"mnist": 784, "fmnist": 784, "cifar10": 1024, "imdb": 500, "dbpedia": 1}),
        ("paper-dbpedia.yaml", {"mnist": 784, "fmnist": 784, "cifar10": 1024, "imdb": 500, "dbpedia": 1}),
        ("quick.yaml", {"mnist": 784, "fmnist": 784, "cifar10": 1024, "imdb": 500, "dbpedia": 1}),
        ("small.yaml", {"mnist": 49, "fmnist": 49, "cifar10": 49, "imdb": 300, "dbpedia": 1}),
    ],
)
def test_min_length_of_the_committed_configs(config, lengths):
    """The values config.min_length had as an if-chain, before the registry."""
    cfg = C.load_suite(C.ROOT / "config" / config)
    assert {d: S.min_length(cfg, d) for d in cfg["datasets"]} == lengths


@pytest.mark.parametrize(
    "dataset, prepare, length",
    [
        ("cifar10", {"downsample": 8}, 64),
        ("imdb", {"max_length": 100}, 100),  # cut below min_chars
        ("imdb", {"min_chars": 0}, 0),
        ("dbpedia", {"min_chars": 50}, 1),  # short texts: no window check, whatever the filter
    ],
)
def test_min_length_follows_the_prepare_options(dataset, prepare, length):
    assert S.min_length({"datasets": {dataset: {"prepare": prepare}}}, dataset) == length


def test_windows_may_outrun_only_short_texts():
    cfg = C.load_yaml(C.ROOT / "config" / "paper-dbpedia.yaml")
    cfg["experiments"]["dbpedia_ps50_rec_a20"]["window"] = 5_000  # longer than any abstract
    C.validate_suite(cfg)
    cfg["experiments"]["imdb_ps60_predrec_a1"]["window"] = 250  # 500 - 2 * 250 = 0 < 1 anchor
    with pytest.raises(C.ConfigError) as err:
        C.validate_suite(cfg)
    assert str(err.value).endswith(
        "experiments.imdb_ps60_predrec_a1.anchors/window: 1 anchor(s) need n - 2 x window >= anchors, but "
        "window 250 leaves 0 of n = 500 steps"
    )


def test_the_config_stays_light():
    """The Snakefile imports psrnn.config at parse time and every job does: no torch."""
    code = "import sys, psrnn.workflow; print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


# --- prepared fixture data ---------------------------------------------------------------

# options that fit the fixtures (1200 train images, ~450 long reviews, 840 abstracts of 36
# distinct characters); everything else is the row's default
FIXTURE_OPTIONS = {
    "mnist": {"valid_size": 100},
    "fmnist": {"valid_size": 100},
    "cifar10": {"valid_size": 100},
    "imdb": {"valid_size": 50},
    "dbpedia": {"valid_size": 70, "alphabet_size": 30},
}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """{dataset: prepared folder} from the fixture archives, with FIXTURE_OPTIONS."""
    root = tmp_path_factory.mktemp("registry")
    write_fixtures(root / "fx", tuple(REGISTRY))
    for name in REGISTRY:
        P.prepare(name, root / "fx" / name, root / "prepared" / name, FIXTURE_OPTIONS[name])
    return {name: root / "prepared" / name for name in REGISTRY}


@pytest.mark.parametrize("name", NAMES)
def test_prepared_fixture_data_has_the_rows_shape(prepared, name):
    ds, opts = REGISTRY[name], FIXTURE_OPTIONS[name]
    m = read_manifest(prepared[name])
    assert (m["dataset"], m["input"], m["num_classes"]) == (name, ds.input, ds.classes)
    assert m["features"] == ds.input_features(opts)
    assert m["steps"] == ds.steps(opts)
    if ds.image_side is not None:
        assert m["image_size"] == [ds.image_side, ds.image_side]
    assert min(m["length"][s]["min"] for s in ("train", "valid", "test")) >= ds.min_length(opts)
    if ds.input == "categorical":  # the row's filter and case (fixture names are capitalised)
        assert (m["filtered"]["min_chars"], m["options"]["lowercase"]) == (ds.min_chars, ds.lowercase)
        assert any(c.isupper() for c in m["alphabet"]) != ds.lowercase
