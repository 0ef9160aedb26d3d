"""Hostile and damaged archives (issue 51, item 10), as they reach `prepare` with a config's
own md5 or `verify: false`: each stops with one line naming the file, the member and the
limit, and nothing is written (no prepared folder, no scratch file). The archives are
built here, a few KB each; a bomb's limit is lowered with monkeypatch where the real one
would cost a large decompression, and the real limits are checked against the real sizes."""

from __future__ import annotations

import csv
import gzip
import io
import pickle
import struct
import tarfile
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from psrnn.cli import UserError, main
from psrnn.studies.private_shared.data import limits as L
from psrnn.studies.private_shared.data.archives import gzip_bytes, idx_bytes, tar_gz_bytes
from psrnn.studies.private_shared.data.fixtures import DBPEDIA_CLASSES
from psrnn.studies.private_shared.data.readers import read_dbpedia, read_idx

MiB = 1 << 20
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def zeros_gz(prefix: bytes, mib: int) -> bytes:
    """gzip of `prefix` and then `mib` MiB of zero bytes, without the gzip trailer: ~1 KB per
    MiB (1,024 MiB in ~1.06 MB, the fault battery's bomb). After a sync flush the deflate
    output for another MiB of zeros repeats, so it is compressed twice and copied."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = c.compress(prefix + bytes(MiB)) + c.flush(zlib.Z_SYNC_FLUSH)
    again = c.compress(bytes(MiB)) + c.flush(zlib.Z_SYNC_FLUSH)
    return first + again * (mib - 1)


def tar_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(tarfile.USTAR_FORMAT)


def tar_gz(entries: list[tuple[str, bytes | None, bytes, str]]) -> bytes:
    """(name, data, tar type, link name) -> .tar.gz; data None for a link or special file."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data, kind, link in entries:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.size = kind, link, len(data or b"")
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return gzip_bytes(buf.getvalue())


def counted_reads(monkeypatch) -> list[int]:
    """The sizes of every block read out of a gzip stream from here on."""
    seen: list[int] = []
    read = gzip.GzipFile.read

    def counting(self, n=-1):
        data = read(self, n)
        seen.append(len(data))
        return data

    monkeypatch.setattr(gzip.GzipFile, "read", counting)
    return seen


def one_line_error(argv, capsys) -> str:
    """Run the CLI; it must fail with exit 2 and one line on stderr (no traceback)."""
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """The system temporary folder, redirected: empty again after every error below."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def prepare_fails(dataset: str, raw: Path, tmp_path: Path, capsys) -> str:
    """`python -m psrnn prepare` on `raw`: its one-line error; nothing written beside raw."""
    out = tmp_path / "prepared" / dataset
    line = one_line_error(["prepare", dataset, "--raw", str(raw), "--out", str(out)], capsys)
    assert line.startswith("psrnn prepare: error: ")
    assert not (tmp_path / "prepared").exists()
    return line


# --- the real limits rest on the real files ----------------------------------------------

# bytes of the largest real file of each kind (limits.LIMITS states where each comes from;
# "~" ones are from the upstream listings, not measured here)
REAL = {
    "mnist download": 9_912_422,  # ~ train-images-idx3-ubyte.gz (the official listing)
    "fmnist download": 26_421_880,  # ~ train-images-idx3-ubyte.gz (the official listing)
    "cifar10 download": 170_498_071,  # ~ cifar-10-python.tar.gz (sources.py's sizes)
    "imdb download": 84_125_825,  # ~ aclImdb_v1.tar.gz (sources.py's sizes)
    "dbpedia download": 68_341_743,  # ~ fast.ai's dbpedia_csv.tgz (sources.py)
    "idx": 47_040_016,  # train-images-idx3-ubyte: 16 + 60,000 x 28 x 28
    "cifar10 member": 31_035_999,  # data_batch_3 (a Python 3 protocol-2 re-pickle: ~62 MB)
    "cifar10 archive": 186_214_400,  # ~ six batches + headers
    "imdb review": 13_704,  # aclImdb/train/pos/1175_9.txt, measured
    "imdb member": 42_000_000,  # ~ train/unsupBow.feat
    "imdb archive": 300_000_000,  # ~ the official tar (the labelled half: 103,997,440, measured)
    "dbpedia member": 178_428_970,  # ~ train.csv (Hugging Face's count of its text)
    "dbpedia archive": 200_739_255,  # ~ train + test
}


def test_every_limit_is_at_least_twice_the_largest_real_file():
    assert set(REAL) == set(L.LIMITS) == set(L.WHAT)
    for kind, real in REAL.items():
        assert L.LIMITS[kind] >= 2 * real, kind
    assert L.LIMITS["cifar10 member"] > 62_000_000  # the Python 3 re-pickle too
    # a DBpedia field: 8 x Python's default, which stopped a 128 KB abstract
    assert L.CSV_FIELD_CHARS == 8 * 131_072
    assert (
        L.limit_text("idx") == "the 128 MiB (134,217,728 bytes) limit for an MNIST / Fashion-MNIST IDX file"
    )
    assert L.limit_text("imdb archive") == "the 1 GiB (1,073,741,824 bytes) limit for the IMDB tar"


@pytest.mark.skipif(not (SHARED / "mnist-test").is_dir(), reason="no ../shared/data/mnist-test")
def test_the_real_idx_files_are_within_their_limit(tmp_path):
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        out = L.gunzip(SHARED / "mnist-test" / name, tmp_path / name, "idx")
        assert out.stat().st_size in (7_840_016, 10_008)


# --- MNIST: a gzip bomb ------------------------------------------------------------------


def mnist_raw(folder: Path, train_images: bytes) -> Path:
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (20, 28, 28), dtype=np.uint8), np.arange(20, dtype=np.uint8) % 10
    folder.mkdir()
    for prefix in ("train", "t10k"):
        (folder / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip_bytes(idx_bytes(x)))
        (folder / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(gzip_bytes(idx_bytes(y)))
    (folder / "train-images-idx3-ubyte.gz").write_bytes(train_images)
    return folder


def test_an_mnist_gzip_bomb_stops_at_its_limit(tmp_path, scratch, monkeypatch, capsys):
    """The battery's bomb: 1.06 MB that gunzips to 1 GiB (it took 2.8 GB RSS and a 1 GiB
    temp file). With the IDX limit at 4 MiB, at most 4 MiB + 1 byte comes out of the stream
    before the one-line error, and the scratch file is gone."""
    bomb = zeros_gz(b"", 1024)
    assert len(bomb) < 1_100_000
    raw = mnist_raw(tmp_path / "raw", bomb)
    monkeypatch.setitem(L.LIMITS, "idx", 4 * MiB)
    seen = counted_reads(monkeypatch)
    line = prepare_fails("mnist", raw, tmp_path, capsys)
    assert line.endswith(
        f"{raw / 'train-images-idx3-ubyte.gz'}: decompresses to more than the 4 MiB (4,194,304 bytes) "
        "limit for an MNIST / Fashion-MNIST IDX file; the archive is damaged or not the official one"
    )
    assert sum(seen) == 4 * MiB + 1
    assert list(scratch.iterdir()) == []


def test_an_idx_file_at_its_limit_still_reads(tmp_path, scratch, monkeypatch):
    raw = mnist_raw(tmp_path / "raw", gzip_bytes(idx_bytes(np.zeros((20, 28, 28), np.uint8))))
    monkeypatch.setitem(L.LIMITS, "idx", 16 + 20 * 28 * 28)  # exactly the file
    assert len(read_idx(raw, [str(d) for d in range(10)]).train) == 20
    monkeypatch.setitem(L.LIMITS, "idx", 16 + 20 * 28 * 28 - 1)
    with pytest.raises(
        UserError, match=r"ubyte.gz: decompresses to more than the 15,695-byte limit for an MNIST"
    ):
        read_idx(raw, [str(d) for d in range(10)])
    assert list(scratch.iterdir()) == []


# --- CIFAR-10: lengths a pickle asks for -------------------------------------------------

BATCH = "cifar-10-batches-py/data_batch_1"


class _HugeArray:
    """Pickles as numpy's _reconstruct of a 1 TiB array (it allocates the shape it is given)."""

    def __reduce__(self):
        from numpy._core.multiarray import _reconstruct

        return (_reconstruct, (np.ndarray, (1 << 40,), b"b"))


@pytest.mark.parametrize(
    "pickled, says",
    [
        # BINBYTES8 of 2**40 bytes: the C unpickler allocated them first (MemoryError)
        (
            b"\x80\x04}\x8e" + struct.pack("<Q", 1 << 40) + b"xx.",
            "refused to unpickle: expected 1099511627776 bytes in a bytes8, but only 3 remain",
        ),
        # LONG_BINPUT 2**31: the C unpickler grows its memo to twice the index
        (
            b"\x80\x02Nr" + struct.pack("<I", 1 << 31) + b".",
            "refused to unpickle: at position 3, LONG_BINPUT names memo entry 2147483648 after 2 opcodes",
        ),
        (
            pickle.dumps({b"data": _HugeArray()}, protocol=2),
            "refused to unpickle an array of 1,099,511,627,776 bytes",
        ),
        (b"\x80\x02}\xff.", "refused to unpickle: at position 3, opcode b'\\xff' unknown"),
    ],
)
def test_a_cifar_batch_asking_for_more_than_it_holds_is_refused(pickled, says, tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "cifar-10-python.tar.gz").write_bytes(tar_gz_bytes({BATCH: pickled}))
    line = prepare_fails("cifar10", raw, tmp_path, capsys)
    assert f"{raw / 'cifar-10-python.tar.gz'}: {BATCH}: {says}" in line


def test_a_cifar_member_over_its_limit_is_refused_at_its_header(tmp_path, capsys, monkeypatch):
    """A 1 GiB member whose gzip is 1 MB: its header's size is refused before any of it is
    decompressed (the stream stops after the header block)."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "cifar-10-python.tar.gz").write_bytes(zeros_gz(tar_header(BATCH, 1 << 30), 1024))
    seen = counted_reads(monkeypatch)
    line = prepare_fails("cifar10", raw, tmp_path, capsys)
    assert line.endswith(
        f"{BATCH}: 1,073,741,824 bytes, over the 128 MiB (134,217,728 bytes) limit for a CIFAR-10 "
        "archive member; the archive is damaged or not the official one"
    )
    assert sum(seen) <= 2 * 512


# --- IMDB: a tar whose members stay under their limit but not the whole ------------------


def test_an_imdb_review_over_its_limit_is_refused(tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    review = "aclImdb/train/pos/0_9.txt"
    (raw / "aclImdb_v1.tar.gz").write_bytes(tar_gz_bytes({review: b"a" * (MiB + 1)}))
    line = prepare_fails("imdb", raw, tmp_path, capsys)
    assert line.endswith(
        f"{review}: 1,048,577 bytes, over the 1 MiB (1,048,576 bytes) limit for an IMDB review; "
        "the archive is damaged or not the official one"
    )


def test_an_imdb_tar_over_its_limit_stops_while_streaming(tmp_path, capsys, monkeypatch):
    """Reviews under their own limit that add up to more than the whole tar's limit (4 MiB
    here): the error names the member where the stream passed it."""
    monkeypatch.setitem(L.LIMITS, "imdb archive", 4 * MiB)
    raw = tmp_path / "raw"
    raw.mkdir()
    reviews = {f"aclImdb/train/pos/{i}_9.txt": b"great film " * 90_000 for i in range(5)}  # 990 KB each
    (raw / "aclImdb_v1.tar.gz").write_bytes(tar_gz_bytes(reviews))
    line = prepare_fails("imdb", raw, tmp_path, capsys)
    assert line.endswith(
        f"{raw / 'aclImdb_v1.tar.gz'}: aclImdb/train/pos/4_9.txt: decompresses to more than the "
        "4 MiB (4,194,304 bytes) limit for the IMDB tar; the archive is damaged or not the official one"
    )


def test_a_skipped_member_past_the_tar_limit_is_not_decompressed(tmp_path, capsys, monkeypatch):
    """A member no reader reads (aclImdb/train/unsupBow.feat, say) that ends past the tar's
    limit: tarfile would skip it by decompressing it; the seek past the limit is refused."""
    monkeypatch.setitem(L.LIMITS, "imdb archive", 4 * MiB)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "aclImdb_v1.tar.gz").write_bytes(
        zeros_gz(tar_header("aclImdb/train/unsupBow.feat", 200 * MiB), 256)
    )
    seen = counted_reads(monkeypatch)
    line = prepare_fails("imdb", raw, tmp_path, capsys)
    assert "aclImdb/train/unsupBow.feat: decompresses to more than the 4 MiB" in line
    assert sum(seen) <= 2 * 512


# --- DBpedia: CSV fields, links -------------------------------------------------------------


def dbpedia_raw(folder: Path, train: bytes, entries: list | None = None) -> Path:
    folder.mkdir()
    members = [
        ("dbpedia_csv/classes.txt", ("\n".join(DBPEDIA_CLASSES) + "\n").encode(), tarfile.REGTYPE, ""),
        (
            "dbpedia_csv/test.csv",
            "".join(f'{c},"T{c}"," test row"\n' for c in range(1, 15)).encode(),
            tarfile.REGTYPE,
            "",
        ),
    ]
    members += entries if entries is not None else [("dbpedia_csv/train.csv", train, tarfile.REGTYPE, "")]
    (folder / "dbpedia_csv.tar.gz").write_bytes(tar_gz(members))
    return folder


def train_rows(abstract_chars: int) -> bytes:
    rows = [f'{c},"T{c}"," train row {c}"' for c in range(1, 15)]
    rows.insert(1, f'1,"Long"," {"x" * abstract_chars}"')
    return ("\n".join(rows) + "\n").encode()


def test_a_dbpedia_field_over_128_kb_reads(tmp_path):
    """The battery's field: Python's default field_size_limit (131,072) stopped it with a
    _csv.Error traceback. The process's own limit is put back afterwards."""
    before = csv.field_size_limit()
    raw = dbpedia_raw(tmp_path / "raw", train_rows(200_000))
    texts = read_dbpedia(raw).train.x
    assert len(texts) == 15 and texts[1] == "Long " + "x" * 200_000
    assert csv.field_size_limit() == before


def test_a_dbpedia_field_over_the_limit_is_one_line(tmp_path, capsys):
    raw = dbpedia_raw(tmp_path / "raw", train_rows(L.CSV_FIELD_CHARS))  # + the leading space
    line = prepare_fails("dbpedia", raw, tmp_path, capsys)
    assert line.endswith(
        f"{raw / 'dbpedia_csv.tar.gz'}: dbpedia_csv/train.csv:2: a field longer than 1,048,576 "
        "characters; the archive is damaged or not the official one"
    )


@pytest.mark.parametrize(
    "kind, link, says",
    [
        (tarfile.SYMTYPE, "test.csv", "a symbolic link to test.csv"),
        (tarfile.LNKTYPE, "dbpedia_csv/test.csv", "a hard link to dbpedia_csv/test.csv"),
        (tarfile.FIFOTYPE, "", "a FIFO"),
        (tarfile.CHRTYPE, "", "a device file"),
    ],
)
def test_a_dbpedia_train_csv_that_is_a_link_is_refused(kind, link, says, tmp_path, capsys):
    """train.csv as a link to test.csv prepared the test rows as training data."""
    raw = dbpedia_raw(tmp_path / "raw", b"", [("dbpedia_csv/train.csv", None, kind, link)])
    line = prepare_fails("dbpedia", raw, tmp_path, capsys)
    assert line.endswith(
        f"{raw / 'dbpedia_csv.tar.gz'}: dbpedia_csv/train.csv: {says}; refused (an upstream archive "
        "holds only regular files and folders; the archive is damaged or not the official one)"
    )


def test_a_link_anywhere_in_an_archive_is_refused(tmp_path, capsys):
    """Also where no reader reads it: an upstream archive has no links at all."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "aclImdb_v1.tar.gz").write_bytes(
        tar_gz(
            [
                ("aclImdb/train/pos/0_9.txt", b"Great " * 100, tarfile.REGTYPE, ""),
                ("aclImdb/README", None, tarfile.SYMTYPE, "/etc/passwd"),
            ]
        )
    )
    line = prepare_fails("imdb", raw, tmp_path, capsys)
    assert "aclImdb_v1.tar.gz: aclImdb/README: a symbolic link to /etc/passwd; refused" in line


def test_a_member_twice_is_refused(tmp_path, capsys):
    rows = b'1,"A"," a row"\n'
    raw = dbpedia_raw(
        tmp_path / "raw",
        b"",
        [(name, rows, tarfile.REGTYPE, "") for name in ("dbpedia_csv/train.csv", "dbpedia_csv/train.csv")],
    )
    line = prepare_fails("dbpedia", raw, tmp_path, capsys)
    assert line.endswith(
        "dbpedia_csv.tar.gz: dbpedia_csv/train.csv: in the archive twice; "
        "the archive is damaged or not the official one"
    )
