"""The real IMDB reviews through the suite's own download and prepare steps, as
config/quick-imdb.yaml reads them: the paper's Table 1 row (20K / 2.2K, mean length
1,430) from the 50,000 labelled reviews. Needs ../shared/data/imdb beside the checkout
(the archive re-packed without train/unsup, its README); skipped in a clone without it.

    uv run pytest tests/test_data_imdb_real.py -q     # ~40 s on 2 CPU cores (one prepare)
"""

from __future__ import annotations

import contextlib

import pytest

from psrnn import config as C
from psrnn.errors import UserError
from psrnn.studies.private_shared.data import load_split
from psrnn.studies.private_shared.data import prepare as P
from psrnn.studies.private_shared.data.download import download
from psrnn.studies.private_shared.data.sources import source

CONFIG = C.ROOT / "config" / "quick-imdb.yaml"
ARCHIVE = C.ROOT.parent / "shared" / "data" / "imdb" / "aclImdb_v1.tar.gz"
needs_reviews = pytest.mark.skipif(
    not ARCHIVE.is_file(),
    reason=f"real IMDB archive not found at {ARCHIVE} (a user's clone has no ../shared)",
)
IMDB_ROWS = ["imdb_gru", "imdb_full_rec_a1", "imdb_ps60_predrec_a1", "imdb_ps60_predrec_a5"]


def quiet(msg: str) -> None:
    pass


def options(section: str) -> dict:
    return C.dataset_options(CONFIG, "imdb", section)[1]


def test_quick_imdb_is_quick_yaml_on_the_imdb_rows_only():
    cfg, quick = C.load_suite(CONFIG), C.load_suite(C.ROOT / "config" / "quick.yaml")
    assert C.enabled_datasets(cfg) == ["imdb"]
    assert C.enabled_experiments(cfg) == IMDB_ROWS
    assert str(C.results_root(cfg)) == "results/quick-imdb"
    # the protocol is quick.yaml's, inherited: same seeds, defaults, grids and models
    assert cfg["seeds"] == quick["seeds"] and cfg["defaults"] == quick["defaults"]
    for name in IMDB_ROWS:
        assert cfg["experiments"][name] == quick["experiments"][name]
    assert cfg["datasets"]["imdb"]["prepare"] == quick["datasets"]["imdb"]["prepare"]
    # never the network: only the local folder, checked against that copy's md5
    src = options("source")
    assert src["official"] is False
    assert src["md5"] != source("imdb").md5  # not the official archive's checksum


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """download + prepare with quick-imdb.yaml's options, once for the module (~20 s)."""
    root = tmp_path_factory.mktemp("imdb-real")
    with contextlib.chdir(C.ROOT):  # the config's folders are relative to the checkout
        record = download("imdb", root / "raw", options("source"), log=quiet)
    manifest = P.prepare("imdb", root / "raw", root / "prepared", options("prepare"))
    return record, manifest, root / "prepared"


@needs_reviews
def test_the_local_copy_is_fetched_from_the_mirror_and_checked_against_its_md5(prepared):
    record, manifest, _ = prepared
    got = record["files"]["aclImdb_v1.tar.gz"]
    assert record["verified"] is True
    assert got["url"] == ARCHIVE.resolve().as_uri()
    assert got["md5"] == got["expected_md5"] == "4ae2537c841187efb1dd9ca5c16fdf4b"
    assert manifest["sources"] == {"aclImdb_v1.tar.gz": got["md5"]}


@needs_reviews
def test_a_checkout_without_shared_reads_the_copy_in_data_archives(tmp_path):
    """A GPU host gets the archive copied into the checkout's ignored data/archives/imdb/."""
    checkout = tmp_path / "checkout"
    (checkout / "data" / "archives" / "imdb").mkdir(parents=True)
    (checkout / "data" / "archives" / "imdb" / ARCHIVE.name).symlink_to(ARCHIVE)
    with contextlib.chdir(checkout):
        record = download("imdb", tmp_path / "raw", options("source"), log=quiet)
    got = record["files"][ARCHIVE.name]
    assert got["url"].endswith("/checkout/data/archives/imdb/aclImdb_v1.tar.gz")
    assert got["md5"] == "4ae2537c841187efb1dd9ca5c16fdf4b"


@needs_reviews
def test_the_official_checksum_refuses_the_repacked_copy(tmp_path):
    opts = {**options("source"), "md5": None}  # as paper.yaml / quick.yaml would check it
    with contextlib.chdir(C.ROOT), pytest.raises(UserError, match="7c2ac02c03563afcf9b574c7e56c153a"):
        download("imdb", tmp_path, opts, log=quiet)
    assert not (tmp_path / "aclImdb_v1.tar.gz").exists()


@needs_reviews
def test_prepared_reviews_match_table_1(prepared):
    _, m, folder = prepared
    # reviews under 500 characters removed from both official halves
    assert m["official"] == {"train": 25_000, "test": 25_000}
    assert m["filtered"] == {
        "min_chars": 500,
        "train": {"before": 25_000, "kept": 22_586},
        "test": {"before": 25_000, "kept": 22_444},
    }
    # Table 1: 20K train / 2.2K valid (the rest of the kept training reviews), mean 1,430
    assert m["counts"] == {"train": 20_000, "valid": 2_586, "test": 22_444}
    assert m["length"]["train"] == {"mean": 1429.02, "min": 500, "max": 13_704}
    assert m["length"]["valid"]["mean"] == 1432.52 and m["length"]["test"]["mean"] == 1401.66
    assert m["class_balance"] == {
        "train": [10_173, 9_827],
        "valid": [1_268, 1_318],
        "test": [11_325, 11_119],
    }
    # 60 one-hot symbols: unknown + the 59 most frequent training characters
    assert m["features"] == 60 and len(m["alphabet"]) == 60 and m["alphabet"][0] == P.UNKNOWN
    assert m["unknown_rate"]["train"] < 0.005
    train = load_split(folder, "train")
    assert len(train.y) == 20_000 and int(train.offsets[-1]) == 28_580_492
