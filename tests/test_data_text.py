"""IMDB and DBpedia: fixture archive -> download -> ragged character indices."""

import csv
import io
import tarfile

import pytest
import torch

from psrnn import config as C
from psrnn import files
from psrnn import workflow as W
from psrnn.cli import UserError, main
from psrnn.config import ConfigError
from psrnn.studies.private_shared.data import load_split, read_manifest
from psrnn.studies.private_shared.data import prepare as P
from psrnn.studies.private_shared.data.download import download
from psrnn.studies.private_shared.data.fixtures import DBPEDIA_CLASSES, tar_gz_bytes, write_fixtures


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    write_fixtures(root / "fx", ("imdb", "dbpedia"))
    out = {}
    for ds in ("imdb", "dbpedia"):
        fx = root / "fx" / ds
        download(
            ds,
            root / "raw" / ds,
            {"local_dir": str(fx), "md5": str(fx / "MD5SUMS"), "official": False},
            log=lambda m: None,
        )
        out[ds] = root / "raw" / ds
    return out


@pytest.fixture(scope="module")
def reviews(raw):
    """{"train"/"test": [(text, label)]} read straight from the fixture tarball."""
    out = {"train": [], "test": []}
    with tarfile.open(raw["imdb"] / "aclImdb_v1.tar.gz") as tar:
        for m in tar:
            parts = m.name.split("/")
            if m.isfile() and len(parts) == 4 and parts[2] in ("pos", "neg"):
                out[parts[1]].append((tar.extractfile(m).read().decode("utf-8"), int(parts[2] == "pos")))
    return out


def texts(split, alphabet):
    return [
        (P.decode(split.x[a:b], alphabet), int(y))
        for a, b, y in zip(split.offsets[:-1].tolist(), split.offsets[1:].tolist(), split.y)
    ]


def unknown_aside(text, alphabet):
    known = set(alphabet[1:])
    return "".join(c if c in known else "\ufffd" for c in text)


def test_imdb_keeps_exactly_the_reviews_of_500_characters_or_more(raw, reviews, tmp_path):
    out = tmp_path / "imdb"
    m = P.prepare("imdb", raw["imdb"], out, {"valid_size": 50})
    kept = {s: [(t, y) for t, y in reviews[s] if len(t) >= 500] for s in ("train", "test")}
    assert any(len(t) == 500 for t, _ in kept["train"])  # the edge cases are in the fixture
    assert any(len(t) == 499 for t, _ in reviews["train"])
    assert any(len(t) < 500 < len(t.encode()) for t, _ in reviews["train"])  # chars, not bytes
    assert m["filtered"]["train"] == {"before": 603, "kept": len(kept["train"])}
    assert m["filtered"]["test"] == {"before": 202, "kept": len(kept["test"])}
    assert m["counts"] == {"train": len(kept["train"]) - 50, "valid": 50, "test": len(kept["test"])}
    alphabet = m["alphabet"]
    tr, va, te = (load_split(out, s) for s in ("train", "valid", "test"))
    # every kept review comes back (text up to unknown symbols, and its label), none twice
    expect = sorted((unknown_aside(t, alphabet), y) for t, y in kept["train"])
    assert sorted(texts(tr, alphabet) + texts(va, alphabet)) == expect
    expect = sorted((unknown_aside(t, alphabet), y) for t, y in kept["test"])
    assert sorted(texts(te, alphabet)) == expect
    assert m["length"]["train"]["min"] >= 500 and m["length"]["test"]["min"] >= 500


def test_imdb_alphabet_has_60_symbols_by_frequency(raw, tmp_path):
    m = P.prepare("imdb", raw["imdb"], tmp_path / "i", {"valid_size": 50})
    tr = load_split(tmp_path / "i", "train")
    assert len(m["alphabet"]) == 60 == m["features"] and m["alphabet"][0] == P.UNKNOWN
    assert len(set(m["alphabet"])) == 60 and all(len(c) == 1 for c in m["alphabet"][1:])
    assert tr.x.dtype == torch.uint8 and int(tr.x.max()) <= 59
    counts = torch.bincount(tr.x.long(), minlength=60)
    assert (counts[1:-1] >= counts[2:]).all()  # most frequent first
    assert 0 < m["unknown_rate"]["train"] < 0.05  # the fixture has more than 59 characters
    assert m["alphabet"][1] == " " and m["input"] == "categorical" and m["num_classes"] == 2


def test_build_alphabet_ties_by_code_point_and_encode_decode():
    alphabet = P.build_alphabet(["bbaac", "ca"], 3)  # a:3 b:2 c:2 -> a, then b before c
    assert alphabet == [P.UNKNOWN, "a", "b"]
    x, offsets = P.encode(["abc", "", "é"], alphabet)
    assert x.tolist() == [1, 2, 0, 0] and offsets.tolist() == [0, 3, 3, 4]
    assert P.decode(x[:3], alphabet) == "ab\ufffd"


def test_imdb_batches_are_padded_to_the_longest(raw, tmp_path):
    m = P.prepare("imdb", raw["imdb"], tmp_path / "i", {"valid_size": 50, "max_length": 700})
    tr = load_split(tmp_path / "i", "train")
    assert m["length"]["train"]["max"] == 700 and tr.categorical
    short = int(torch.argmin(tr.lengths))
    idx = torch.tensor([short, int(torch.argmax(tr.lengths)), 3])
    x, lengths, y = tr.batch(idx)
    assert x.dtype == torch.int64 and tuple(x.shape) == (3, 700)
    assert lengths.tolist() == tr.lengths[idx].tolist() and lengths[0] >= 500
    assert (x[0, lengths[0] :] == 0).all() and y.tolist() == tr.y[idx].tolist()
    a = int(tr.offsets[short])
    assert x[0, : lengths[0]].tolist() == tr.x[a : a + int(lengths[0])].long().tolist()


def test_imdb_default_split_is_20k_train_and_the_rest_valid(raw, tmp_path):
    with pytest.raises(ConfigError, match="train_size=20000 leaves none for validation"):
        P.prepare("imdb", raw["imdb"], tmp_path / "a")
    m = P.prepare("imdb", raw["imdb"], tmp_path / "b", {"train_size": 400})
    kept = m["filtered"]["train"]["kept"]
    assert m["counts"]["train"] == 400 and m["counts"]["valid"] == kept - 400
    with pytest.raises(ConfigError, match="not both"):
        P.prepare("imdb", raw["imdb"], tmp_path / "c", {"train_size": 400, "valid_size": 10})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def test_imdb_small_options_and_shuffled_test_cap(raw, tmp_path):
    opts = {"valid_size": 40, "min_chars": 0, "max_length": 200, "alphabet_size": 40, "test": 20}
    m = P.prepare("imdb", raw["imdb"], tmp_path / "s", opts)
    assert m["filtered"]["train"]["kept"] == 603 and m["features"] == 40
    assert m["length"]["train"]["max"] == 200 and m["counts"]["test"] == 20
    assert min(m["class_balance"]["test"]) >= 5  # upstream order is by class: shuffled first


def test_empty_review_is_named(tmp_path):
    members = {
        "aclImdb/train/pos/0_9.txt": b"Great " * 100,
        "aclImdb/train/neg/3_2.txt": b"",
        "aclImdb/test/pos/0_8.txt": b"Fine " * 120,
    }
    (tmp_path / "aclImdb_v1.tar.gz").write_bytes(tar_gz_bytes(members))
    with pytest.raises(UserError, match=r"aclImdb/train/neg/3_2.txt: empty review"):
        P.prepare("imdb", tmp_path, tmp_path / "out", {"valid_size": 1})
    assert not (tmp_path / "out").exists()


def test_imdb_archive_without_reviews_is_named(tmp_path):
    (tmp_path / "aclImdb_v1.tar.gz").write_bytes(tar_gz_bytes({"aclImdb/README": b"x"}))
    with pytest.raises(UserError, match=r"no reviews matching aclImdb/train"):
        P.prepare("imdb", tmp_path, tmp_path / "out", {"valid_size": 1})


def test_dbpedia_end_to_end(raw, tmp_path):
    out = tmp_path / "d"
    m = P.prepare("dbpedia", raw["dbpedia"], out, {"valid_size": 140})
    assert m["classes"] == DBPEDIA_CLASSES and m["num_classes"] == 14
    assert m["counts"] == {"train": 700, "valid": 140, "test": 210}
    assert m["class_balance"]["test"] == [15] * 14
    assert m["features"] == len(m["alphabet"]) <= 70 and m["options"]["lowercase"] is True
    assert not any(c.isupper() for c in m["alphabet"])
    with tarfile.open(raw["dbpedia"] / "dbpedia_csv.tar.gz") as tar:
        rows = list(csv.reader(io.TextIOWrapper(tar.extractfile("dbpedia_csv/test.csv"), "utf-8")))
    expect = sorted(
        (unknown_aside(f"{t.strip()} {a.strip()}".lower(), m["alphabet"]), int(c) - 1) for c, t, a in rows
    )
    assert sorted(texts(load_split(out, "test"), m["alphabet"])) == expect


def test_dbpedia_keeps_case_when_asked(raw, tmp_path):
    m = P.prepare("dbpedia", raw["dbpedia"], tmp_path / "d", {"valid_size": 140, "lowercase": False})
    assert any(c.isupper() for c in m["alphabet"])


def test_dbpedia_bad_row_is_named(tmp_path):
    bad = '1,"A"," fine"\n15,"B"," class out of range"\n'
    (tmp_path / "dbpedia_csv.tar.gz").write_bytes(
        tar_gz_bytes(
            {
                "dbpedia_csv/train.csv": bad.encode(),
                "dbpedia_csv/test.csv": b'1,"A"," x"\n',
                "dbpedia_csv/classes.txt": ("\n".join(DBPEDIA_CLASSES) + "\n").encode(),
            }
        )
    )
    with pytest.raises(UserError, match=r"dbpedia_csv/train.csv:2: class 15 outside 1..14"):
        P.prepare("dbpedia", tmp_path, tmp_path / "o", {"valid_size": 1})


def test_cli_prepare_from_suite_config(raw, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "suite.yaml").write_text("""
name: t
seeds: [0]
datasets:
  imdb:
    prepare: {min_chars: 300, max_length: 200, alphabet_size: 40, valid_size: 40}
experiments:
  g: {dataset: imdb, shared: 0.0}
""")
    target = tmp_path / "data/t/raw/imdb"
    target.mkdir(parents=True)
    for p in raw["imdb"].iterdir():
        (target / p.name).write_bytes(p.read_bytes())
    assert main(["prepare", "imdb", "--config", "suite.yaml"]) == 0
    m = read_manifest(tmp_path / "data/t/prepared/imdb")
    assert m["features"] == 40 and m["options"]["min_chars"] == 300
    assert m["options"]["train_size"] is None and m["counts"]["valid"] == 40
    # stamped with the config's settings, which a Snakemake job compares (psrnn.workflow)
    manifest = tmp_path / "data/t/prepared/imdb/manifest.json"
    cfg = C.load_suite(tmp_path / "suite.yaml")
    assert W.is_current(manifest, W.dataset_stamp(cfg, "imdb"))
    cfg["datasets"]["imdb"]["prepare"]["max_length"] = 300
    assert not W.is_current(manifest, W.dataset_stamp(cfg, "imdb"))
    assert main(["prepare", "imdb", "--config", "suite.yaml", "--set", "max_length=300"]) == 0
    assert W.SPEC_KEY not in read_manifest(tmp_path / "data/t/prepared/imdb")  # not the config's
    assert main(["prepare", "mnist", "--config", "suite.yaml"]) == 2  # not in the config


def test_text_split_is_seeded_and_bytes_are_stable(raw, tmp_path):
    opts = {"valid_size": 60, "max_length": 300}
    P.prepare("imdb", raw["imdb"], tmp_path / "a", opts)
    P.prepare("imdb", raw["imdb"], tmp_path / "b", opts)
    P.prepare("imdb", raw["imdb"], tmp_path / "c", {**opts, "seed": 3})
    for name in ("train.pt", "valid.pt", "test.pt", "manifest.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    va, vc = load_split(tmp_path / "a", "valid"), load_split(tmp_path / "c", "valid")
    assert len(va) == len(vc) == 60 and not torch.equal(va.x, vc.x)


# --- bad input: a class missing from an archive or a split -------------------------------


def one_line_error(argv, capsys) -> str:
    """Run the CLI; it must fail with exit 2 and one line on stderr (no traceback)."""
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def archive_members(path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def test_imdb_archive_without_test_pos_is_refused(raw, tmp_path, capsys):
    # the case: a re-packed tarball that lost aclImdb/test/pos/, downloaded with
    # the user's own md5 (so the download accepts it), used to prepare a one-class test set
    members = archive_members(raw["imdb"] / "aclImdb_v1.tar.gz")
    members = {n: b for n, b in members.items() if not n.startswith("aclImdb/test/pos/")}
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "aclImdb_v1.tar.gz").write_bytes(tar_gz_bytes(members))
    (mirror / "MD5SUMS").write_text(f"{files.md5sum(mirror / 'aclImdb_v1.tar.gz')}  aclImdb_v1.tar.gz\n")
    bad = tmp_path / "raw"
    download(
        "imdb",
        bad,
        {"local_dir": str(mirror), "md5": str(mirror / "MD5SUMS"), "official": False},
        log=lambda m: None,
    )
    out = tmp_path / "prepared"
    line = one_line_error(
        [
            "prepare",
            "imdb",
            "--raw",
            str(bad),
            "--out",
            str(out),
            "--set",
            "min_chars=300",
            "--set",
            "max_length=200",
            "--set",
            "valid_size=40",
        ],
        capsys,
    )
    assert line == (
        f"psrnn prepare: error: imdb: {bad / 'aclImdb_v1.tar.gz'}: "
        "aclImdb/test/{neg,pos}/*.txt has no test examples of class 1 (pos)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mirror", "raw"]


def test_dbpedia_csv_without_a_class_is_refused(raw, tmp_path):
    members = archive_members(raw["dbpedia"] / "dbpedia_csv.tar.gz")
    rows = members["dbpedia_csv/test.csv"].decode().splitlines(keepends=True)
    members["dbpedia_csv/test.csv"] = "".join(r for r in rows if not r.startswith("14,")).encode()
    (tmp_path / "dbpedia_csv.tar.gz").write_bytes(tar_gz_bytes(members))
    with pytest.raises(UserError) as err:
        P.prepare("dbpedia", tmp_path, tmp_path / "o", {"valid_size": 140})
    assert str(err.value) == (
        f"dbpedia: {tmp_path / 'dbpedia_csv.tar.gz'}: dbpedia_csv/test.csv "
        "has no test examples of class 13 (WrittenWork)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dbpedia_csv.tar.gz"]


def test_text_split_too_small_for_every_class_is_named(raw, tmp_path, capsys):
    with pytest.raises(
        ConfigError,
        match=r"^prepare: dbpedia valid split \(10 sequences\) has no "
        r"examples of classes .*; make it larger "
        r"\(options valid_size\)$",
    ):
        P.prepare("dbpedia", raw["dbpedia"], tmp_path / "d", {"valid_size": 10})
    # a text split names min_chars too: the length filter can empty a class as well
    line = one_line_error(
        [
            "prepare",
            "imdb",
            "--raw",
            str(raw["imdb"]),
            "--out",
            str(tmp_path / "i"),
            "--set",
            "valid_size=40",
            "--set",
            "test=1",
        ],
        capsys,
    )
    assert "imdb test split (1 sequences) has no examples of class" in line
    assert line.endswith("make it larger (options test, min_chars)")
    assert list(tmp_path.iterdir()) == []
