"""The fixture archives: upstream formats and layouts, deterministic bytes, small."""

import gzip
import hashlib
import io
import pickle
import tarfile

import numpy as np
import pytest
from torchvision.datasets.mnist import read_image_file, read_label_file

from psrnn.cli import main
from psrnn.studies.private_shared.data import fixtures
from psrnn.studies.private_shared.data.download import parse_md5sums
from psrnn.studies.private_shared.data.sources import SOURCES


@pytest.fixture(scope="module")
def blobs():
    return {ds: fixtures.fixture_files(ds) for ds in fixtures.DATASETS}


def members(blob: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def test_same_bytes_every_time_and_md5sums_match(blobs):
    again = fixtures.fixture_files("imdb")
    assert again == blobs["imdb"]
    for ds, files in blobs.items():
        sums = parse_md5sums(files["MD5SUMS"].decode())
        assert set(sums) == set(SOURCES[ds].files)  # exactly the upstream file names
        for name, md5 in sums.items():
            assert hashlib.md5(files[name]).hexdigest() == md5


def test_whole_set_is_small(blobs):
    total = sum(len(b) for files in blobs.values() for b in files.values())
    assert 200_000 < total < 5_000_000


def test_gzip_and_tar_headers_carry_no_time(blobs):
    gz = blobs["mnist"]["train-images-idx3-ubyte.gz"]
    assert gz[4:8] == b"\0\0\0\0"  # gzip MTIME field
    with tarfile.open(fileobj=io.BytesIO(blobs["imdb"]["aclImdb_v1.tar.gz"]), mode="r:gz") as tar:
        infos = tar.getmembers()
    assert {(i.mtime, i.uid, i.gid, i.uname) for i in infos} == {(fixtures.TAR_MTIME, 0, 0, "")}


@pytest.mark.parametrize("ds", ["mnist", "fmnist"])
def test_idx_files_read_with_torchvision(blobs, ds, tmp_path):
    for prefix, n in (("train", 1200), ("t10k", 300)):
        img = tmp_path / f"{prefix}-images"
        lab = tmp_path / f"{prefix}-labels"
        img.write_bytes(gzip.decompress(blobs[ds][f"{prefix}-images-idx3-ubyte.gz"]))
        lab.write_bytes(gzip.decompress(blobs[ds][f"{prefix}-labels-idx1-ubyte.gz"]))
        x, y = read_image_file(str(img)), read_label_file(str(lab))
        assert tuple(x.shape) == (n, 28, 28) and tuple(y.shape) == (n,)
        assert set(y.tolist()) == set(range(10))
        # class-conditional: the mean image of two classes differs clearly
        a, b = x[y == 0].float().mean(0), x[y == 9].float().mean(0)
        assert (a - b).abs().mean() > 10


def test_cifar_tarball_layout_and_pickles(blobs):
    m = members(blobs["cifar10"]["cifar-10-python.tar.gz"])
    names = {n for n in m if n.startswith("cifar-10-batches-py/")}
    assert {f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)} <= names
    assert {"cifar-10-batches-py/test_batch", "cifar-10-batches-py/batches.meta"} <= names
    batch = pickle.loads(m["cifar-10-batches-py/data_batch_1"], encoding="bytes")
    assert batch[b"data"].dtype == np.uint8 and batch[b"data"].shape == (240, 3072)
    assert len(batch[b"labels"]) == 240 and all(isinstance(v, int) for v in batch[b"labels"])
    meta = pickle.loads(m["cifar-10-batches-py/batches.meta"], encoding="bytes")
    assert meta[b"label_names"][0] == b"airplane" and len(meta[b"label_names"]) == 10


def test_imdb_tarball_layout_lengths_and_characters(blobs):
    m = members(blobs["imdb"]["aclImdb_v1.tar.gz"])
    reviews = {n: b.decode("utf-8") for n, b in m.items() if n.endswith(".txt")}
    train_pos = [n for n in reviews if n.startswith("aclImdb/train/pos/")]
    assert len(train_pos) == 302 and len([n for n in reviews if "/unsup/" in n]) == 20
    assert {"aclImdb/README", "aclImdb/imdb.vocab"} <= set(m)
    for name in train_pos:  # <id>_<rating>.txt, positive ratings 7..10
        assert 7 <= int(name.rsplit("_", 1)[1][:-4]) <= 10
    lengths = np.array([len(t) for n, t in reviews.items() if "/unsup/" not in n])
    assert 0.1 < (lengths < 500).mean() < 0.4 and lengths.max() > 1000
    assert any(any(ord(c) > 127 for c in t) for t in reviews.values())


def test_dbpedia_csv_like_upstream(blobs):
    m = members(blobs["dbpedia"]["dbpedia_csv.tar.gz"])
    assert m["dbpedia_csv/classes.txt"].decode().split() == fixtures.DBPEDIA_CLASSES
    first = m["dbpedia_csv/train.csv"].decode().splitlines()[0]
    assert first.startswith('1,"') and '"," ' in first  # class unquoted, abstract starts with a space
    assert len(m["dbpedia_csv/train.csv"].decode().splitlines()) == 14 * 60


def test_fixtures_command_writes_every_dataset(tmp_path):
    assert main(["fixtures", str(tmp_path), "--datasets", "mnist", "dbpedia"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dbpedia", "mnist"]
    assert (tmp_path / "mnist" / "MD5SUMS").read_bytes() == fixtures.fixture_files("mnist")["MD5SUMS"]
