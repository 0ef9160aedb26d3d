"""What an archive's contents must be, beyond its sizes (fault battery C, cases C30-C34,
C38, C52-C54, C64, C72): CIFAR-10 batches hold uint8-range integer pixels and integer
labels within the class names, MNIST images are 28 x 28, a download is bounded and reads
regular files only, and a tar's member count is bounded. Each hostile input is built here
and stops with one line naming the file and what is wrong; nothing is left half-written
(no prepared folder, no temporary download)."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import os
import pickle
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from psrnn import files
from psrnn.cli import main
from psrnn.studies.private_shared.data import limits as L
from psrnn.studies.private_shared.data import readers as R
from psrnn.studies.private_shared.data import store as S
from psrnn.studies.private_shared.data.archives import gzip_bytes, idx_bytes, tar_gz_bytes
from psrnn.studies.private_shared.data.fixtures import fixture_files, write_fixtures

NOT_OFFICIAL = "the archive is damaged or not the official one"
CIFAR = "cifar-10-python.tar.gz"
B1 = "cifar-10-batches-py/data_batch_1"
META = "cifar-10-batches-py/batches.meta"


def one_line_error(argv: list[str], capsys, progress: bool = False) -> str:
    """Run the CLI; it must fail with exit 2 and one line on stderr (no traceback), after
    `download`'s progress lines when `progress`."""
    capsys.readouterr()
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("psrnn ")]
    assert errors == lines[-1:] if progress else errors == lines, lines
    assert len(errors) == 1 and "Traceback" not in "".join(lines), lines
    return lines[-1]


def prepare_fails(dataset: str, raw: Path, tmp_path: Path, capsys, *options: str) -> str:
    out = tmp_path / "prepared" / dataset
    line = one_line_error(["prepare", dataset, "--raw", str(raw), "--out", str(out), *options], capsys)
    assert not (tmp_path / "prepared").exists()
    return line.removeprefix("psrnn prepare: error: ")


# --- CIFAR-10: what a batch holds (C30-C34, C38) -----------------------------------------


@pytest.fixture(scope="module")
def cifar_members() -> dict[str, bytes]:
    """The fixture archive's regular members, path -> bytes."""
    blob = fixture_files("cifar10")[CIFAR]
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isreg()}  # type: ignore[union-attr]


def cifar_raw(tmp_path: Path, members: dict[str, bytes], name: str, edit) -> Path:
    """A raw folder whose archive is the fixture with `name`'s unpickled dict edited."""
    d = dict(pickle.loads(members[name], encoding="bytes"))
    edit(d)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / CIFAR).write_bytes(tar_gz_bytes({**members, name: pickle.dumps(d, protocol=2)}))
    return raw


def _set(key: bytes, make):
    return lambda d: d.__setitem__(key, make(d[key]))


def _first(value):
    def put(old):
        new = list(old)
        new[0] = value
        return new

    return put


def _list_with_300(data):
    rows = data.astype(int).tolist()
    rows[0][0] = 300
    return rows


@pytest.mark.parametrize(
    "case, edit, says",
    [
        # C30: labels stored as floats were cut to ints
        (
            "c30",
            _set(b"labels", lambda ls: [v + 0.9 for v in ls]),
            "labels of type float64, not integers 0..9",
        ),
        # C31: int64 pixels 256..511 wrapped to 0..255
        (
            "c31",
            _set(b"data", lambda x: x.astype(np.int64) + 256),
            "pixel {p} at index (0, 0) is not an integer in 0..255",
        ),
        # C32: float pixels -100..333 were clipped / wrapped
        ("c32", _set(b"data", lambda x: x * 1.7 - 100), "pixels of type float64, not integers 0..255"),
        # C33: a nested list holding a 300 was an OverflowError traceback
        ("c33", _set(b"data", _list_with_300), "pixel 300 at index (0, 0) is not an integer in 0..255"),
        # C34: a label 2**70 was an OverflowError traceback
        ("c34", _set(b"labels", _first(2**70)), f"label {2**70} at index 0 is not an integer in 0..9"),
        ("label-10", _set(b"labels", _first(10)), "label 10 at index 0 is not an integer in 0..9"),
        ("label-neg", _set(b"labels", _first(-1)), "label -1 at index 0 is not an integer in 0..9"),
        (
            "label-str",
            _set(b"labels", lambda ls: [str(v) for v in ls]),
            "labels of type <U1, not integers 0..9",
        ),
        ("label-none", _set(b"labels", _first(None)), "label None at index 0 is not an integer in 0..9"),
        ("rows", _set(b"data", lambda x: x[:, :100]), "data (240, 100), labels (240,)"),
        ("no-data", lambda d: d.pop(b"data"), "'data'"),
    ],
)
def test_a_cifar_batch_not_holding_integer_pixels_and_labels_is_one_line(
    case, edit, says, cifar_members, tmp_path, capsys
):
    raw = cifar_raw(tmp_path, cifar_members, B1, edit)
    pixel = pickle.loads(cifar_members[B1], encoding="bytes")[b"data"][0, 0]
    line = prepare_fails("cifar10", raw, tmp_path, capsys)
    assert line == f"{raw / CIFAR}: {B1}: not a CIFAR-10 batch ({says.format(p=int(pixel) + 256)})"


def test_integer_pixels_and_labels_of_another_type_read_the_same(cifar_members, tmp_path):
    """Exact values pass: int64 pixels in 0..255 (a Python list of them too), numpy labels."""
    want = R.read_cifar10(write_and_return(tmp_path / "fixture", {CIFAR: tar_gz_bytes(cifar_members)}))

    def edit(d):
        d[b"data"] = d[b"data"].astype(np.int64).tolist()
        d[b"labels"] = np.asarray(d[b"labels"], dtype=np.uint16)

    got = R.read_cifar10(cifar_raw(tmp_path, cifar_members, B1, edit))
    assert got.train.x.dtype == want.train.x.dtype and bool((got.train.x == want.train.x).all())
    assert got.train.y.dtype == want.train.y.dtype and bool((got.train.y == want.train.y).all())


def write_and_return(folder: Path, blobs: dict[str, bytes]) -> Path:
    folder.mkdir()
    for name, data in blobs.items():
        (folder / name).write_bytes(data)
    return folder


@pytest.mark.parametrize(
    "names, says",
    [
        (10, "int 10"),  # C38: a TypeError traceback ('int' object is not iterable)
        ([], "list []"),
        ([b"a", 3], "list [b'a', 3]"),
        ("airplane", "str 'airplane'"),
        (None, "NoneType None"),
    ],
)
def test_cifar_label_names_not_a_list_of_names_is_one_line(names, says, cifar_members, tmp_path, capsys):
    raw = cifar_raw(tmp_path, cifar_members, META, lambda d: d.__setitem__(b"label_names", names))
    line = prepare_fails("cifar10", raw, tmp_path, capsys)
    assert line == f"{raw / CIFAR}: {META}: label_names is {says}, not a list of class names; {NOT_OFFICIAL}"


def test_cifar_meta_without_label_names_or_not_a_dict_is_one_line(cifar_members, tmp_path, capsys):
    raw = cifar_raw(tmp_path, cifar_members, META, lambda d: d.pop(b"label_names"))
    line = prepare_fails("cifar10", raw, tmp_path, capsys)
    assert line == f"{raw / CIFAR}: {META}: label_names is missing, not a list of class names; {NOT_OFFICIAL}"
    (raw / CIFAR).write_bytes(tar_gz_bytes({**cifar_members, B1: pickle.dumps([1, 2], protocol=2)}))
    line = prepare_fails("cifar10", raw, tmp_path, capsys)
    assert line == f"{raw / CIFAR}: {B1}: not a CIFAR-10 batch (a list, not a dict); {NOT_OFFICIAL}"


# --- MNIST / Fashion-MNIST: 28 x 28 only (C52-C54) ---------------------------------------


def idx_raw(folder: Path, train_size: int, test_size: int, test_count: int = 100) -> Path:
    """A valid IDX pair per split, with images of train_size / test_size pixels a side."""
    rng = np.random.default_rng(0)
    folder.mkdir()
    for prefix, side, n in (("train", train_size, 100), ("t10k", test_size, test_count)):
        y = np.arange(n, dtype=np.uint8) % 10
        x = rng.integers(0, 256, (n, side, side), dtype=np.uint8)
        (folder / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip_bytes(idx_bytes(x)))
        (folder / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(gzip_bytes(idx_bytes(y)))
    return folder


SMALL = ["--set", "valid_size=50"]


@pytest.mark.parametrize(
    "dataset, train, test, options, bad, size",
    [
        ("mnist", 28, 32, ["--set", "downsample=7"], "t10k", "32 x 32"),  # C52
        ("mnist", 28, 32, [], "t10k", "32 x 32"),  # C53: test 1,024 steps, manifest 784
        ("mnist", 14, 28, [], "train", "14 x 14"),  # C54: train 196 steps, test 784
        ("mnist", 56, 28, ["--set", "downsample=7"], "train", "56 x 56"),
        ("fmnist", 28, 32, [], "t10k", "32 x 32"),
    ],
)
def test_idx_images_that_are_not_28_by_28_are_one_line(
    dataset, train, test, options, bad, size, tmp_path, capsys
):
    raw = idx_raw(tmp_path / "raw", train, test)
    line = prepare_fails(dataset, raw, tmp_path, capsys, *SMALL, *options)
    assert line == (
        f"{raw / f'{bad}-images-idx3-ubyte.gz'}: images of {size} pixels; MNIST and Fashion-MNIST "
        f"images are 28 x 28; {NOT_OFFICIAL}"
    )


def test_idx_files_of_no_items_are_one_line(tmp_path, capsys):
    """t10k images and labels holding 0 items had been "corrupt or truncated archive
    (ValueError: offset (16 bytes) must be non-negative ...)" (fault battery C, N20)."""
    raw = idx_raw(tmp_path / "raw", 28, 28, test_count=0)
    line = prepare_fails("mnist", raw, tmp_path, capsys, *SMALL)
    assert line == f"{raw / 't10k-images-idx3-ubyte.gz'}: its IDX header counts 0 items; {NOT_OFFICIAL}"


def test_28_by_28_idx_images_prepare(tmp_path, capsys):
    raw = idx_raw(tmp_path / "raw", 28, 28)
    out = tmp_path / "prepared"
    assert main(["prepare", "mnist", "--raw", str(raw), "--out", str(out), *SMALL]) == 0
    assert (out / "manifest.json").is_file()


# --- what prepare replaces (N55-N58) -----------------------------------------------------


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("target", ["own files", "the raw folder", "raw's parent", "a file"])
def test_prepare_never_replaces_what_it_did_not_write(target, tmp_path, capsys):
    """Battery N55-N58: prepare replaces its --out folder whole, and had deleted a folder of a
    user's own files, the raw archives (--out = --raw, or raw's parent) and a file, exit 0.
    Its own earlier output is still replaced (prepared again)."""
    work = tmp_path / "work"
    work.mkdir()
    raw = idx_raw(work / "raw", 28, 28)
    out = {"the raw folder": raw, "raw's parent": work, "a file": work / "notes.txt"}.get(
        target, work / "mine"
    )
    if target == "own files":
        (out / "sub").mkdir(parents=True)
        (out / "thesis.tex").write_text("chapter 1")
        (out / "sub" / "data.csv").write_text("1,2")
    if target == "a file":
        out.write_text("precious")
    before = tree(work)
    line = one_line_error(["prepare", "mnist", "--raw", str(raw), "--out", str(out), *SMALL], capsys)
    assert tree(work) == before
    found = {
        "own files": "'sub' and 1 more",
        "the raw folder": "'t10k-images-idx3-ubyte.gz' and 3 more",
        "raw's parent": "'raw'",
    }
    if target == "a file":
        assert (
            line == f"psrnn prepare: error: {out}: exists and is not a folder; prepare writes a folder there "
            "(name another --out)"
        )
    else:
        assert line == (
            f"psrnn prepare: error: {out}: holds {found[target]}, which prepare did not write, and replaces "
            "the whole folder: name an empty or prepared folder as --out"
        )
    again = work / "prepared"
    for _ in range(2):  # a new folder, then its own earlier output
        assert main(["prepare", "mnist", "--raw", str(raw), "--out", str(again), *SMALL]) == 0
        assert sorted(p.name for p in again.iterdir()) == sorted(S.WRITES)


@pytest.mark.parametrize(
    "files",
    [
        {"manifest.json": '{"name": "my web app", "icons": []}'},
        {"train.pt": "data", "test.pt": "notes"},
        {"splits.sha256": f"{'0' * 64}  a.txt\n"},  # stop 62, P06c: a user's own checksum list
        {"splits.sha256": "my notes\n"},
    ],
)
def test_prepare_never_replaces_a_users_files_of_its_names(files, tmp_path, capsys):
    """A folder holding only a user's own manifest.json, or train.pt and test.pt, had been
    replaced (confirming pass of stop 60, P06/P06b): a folder prepare wrote holds its manifest;
    a splits.sha256 alone is prepare's only when it names prepare's files."""
    raw = idx_raw(tmp_path / "raw", 28, 28)
    out = tmp_path / "mine"
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    line = one_line_error(["prepare", "mnist", "--raw", str(raw), "--out", str(out), *SMALL], capsys)
    first = sorted(files)[0]
    more = f" and {len(files) - 1} more" if len(files) > 1 else ""
    assert line == (
        f"psrnn prepare: error: {out}: holds {first!r}{more}, which prepare did not write, and replaces "
        "the whole folder: name an empty or prepared folder as --out"
    )
    assert {p.name: p.read_text() for p in out.iterdir()} == files


def test_prepare_replaces_a_folder_snakemake_emptied_but_for_its_checksums(tmp_path):
    """Snakemake deletes a prepare job's declared outputs (the split files and manifest) before
    it runs it; splits.sha256, not declared, is left alone there (tests/test_workflow_e2e.py)."""
    raw = idx_raw(tmp_path / "raw", 28, 28)
    out = tmp_path / "prepared"
    argv = ["prepare", "mnist", "--raw", str(raw), "--out", str(out), *SMALL]
    assert main(argv) == 0
    for name in ("train.pt", "valid.pt", "test.pt", "manifest.json"):
        (out / name).unlink()
    assert main(argv) == 0 and sorted(p.name for p in out.iterdir()) == sorted(S.WRITES)


def test_a_loop_of_links_is_one_line(tmp_path, capsys):
    """Battery C of stop 62, D-loop/P06g: `--out` or `--raw` naming a loop of symbolic links
    had shown RuntimeError's and OSError's stacks; nothing is written."""
    raw = idx_raw(tmp_path / "raw", 28, 28)
    loop, back = tmp_path / "loop", tmp_path / "back"
    loop.symlink_to(back)
    back.symlink_to(loop)
    says = "a loop of symbolic links (links that lead back to themselves): point it at a folder"
    line = one_line_error(["prepare", "mnist", "--raw", str(raw), "--out", str(loop), *SMALL], capsys)
    assert line == f"psrnn prepare: error: {loop}: {says}"
    md5 = raw / "MD5SUMS"
    md5.write_text(
        "".join(f"{hashlib.md5(f.read_bytes()).hexdigest()}  {f.name}\n" for f in sorted(raw.iterdir()))
    )
    argv = ["download", "mnist", "--raw", str(loop), "--mirror", str(raw), "--md5", str(md5), "--no-official"]
    assert one_line_error(argv, capsys) == f"psrnn download: error: {loop / 'download.json'}: {says}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["back", "loop", "raw"]


def test_prepare_writes_through_a_link(tmp_path, capsys):
    """`--out LINK` writes into the folder the link names, the link kept (battery C, N60: it
    had been replaced by a real folder); that folder's own files are refused as any --out's."""
    raw = idx_raw(tmp_path / "raw", 28, 28)
    target, link = tmp_path / "big-disk" / "mnist", tmp_path / "prepared"
    target.mkdir(parents=True)
    link.symlink_to(target)
    assert main(["prepare", "mnist", "--raw", str(raw), "--out", str(link), *SMALL]) == 0
    assert link.is_symlink() and sorted(p.name for p in target.iterdir()) == sorted(S.WRITES)
    assert main(["prepare", "mnist", "--raw", str(raw), "--out", str(link), *SMALL]) == 0  # again
    (target / "keep.txt").write_text("mine")
    line = one_line_error(["prepare", "mnist", "--raw", str(raw), "--out", str(link), *SMALL], capsys)
    assert line.startswith(f"psrnn prepare: error: {target}: holds 'keep.txt', which prepare did not write")
    assert link.is_symlink() and (target / "keep.txt").read_text() == "mine"


def test_one_prepare_per_folder_at_a_time(tmp_path, capsys):
    """Three prepares into one folder at once had all exited 0 naming it (battery C, N83):
    while one holds the folder's lock, another is one line and writes nothing."""
    raw = idx_raw(tmp_path / "raw", 28, 28)
    out = tmp_path / "prepared" / "mnist"
    argv = ["prepare", "mnist", "--raw", str(raw), "--out", str(out), *SMALL]
    with files.exclusive(out.parent / ".mnist.lock", "held"):  # as a prepare at work holds it
        line = one_line_error(argv, capsys)
        assert line == f"psrnn prepare: error: another prepare is writing {out} now: wait for it to end"
        assert sorted(p.name for p in out.parent.iterdir()) == [".mnist.lock"]
    assert main(argv) == 0 and sorted(p.name for p in out.iterdir()) == sorted(S.WRITES)
    assert sorted(p.name for p in out.parent.iterdir()) == ["mnist"]  # the lock goes with the prepare


# --- download: bounded, regular files only (C64) -----------------------------------------

MNIST_IMAGES = "train-images-idx3-ubyte.gz"


@pytest.fixture
def mirror(tmp_path) -> Path:
    write_fixtures(tmp_path / "fx", ("mnist",))
    return tmp_path / "fx" / "mnist"


def download_fails(mirror: Path, raw: Path, capsys) -> str:
    """`download mnist` from `mirror` alone: its one-line error; no temporary file, no
    train-images file and no download.json left in `raw`."""
    argv = ["download", "mnist", "--raw", str(raw), "--mirror", str(mirror), "--no-official"]
    line = one_line_error([*argv, "--md5", str(mirror / "MD5SUMS")], capsys, progress=True)
    left = sorted(p.name for p in raw.iterdir()) if raw.exists() else []
    assert not [n for n in left if n.startswith(".") or n in (MNIST_IMAGES, "download.json")], left
    return line.removeprefix("psrnn download: error: ")


@pytest.mark.parametrize("kind", ["character device", "FIFO"])
def test_a_mirror_entry_that_is_not_a_regular_file_is_refused(kind, mirror, tmp_path, capsys):
    """C64: a link to /dev/zero was copied without end (filling the disk); a FIFO would
    wait for a writer. Both are refused before they are opened."""
    entry = mirror / MNIST_IMAGES
    entry.unlink()
    if kind == "FIFO":
        os.mkfifo(entry)
        via = ""
    else:
        entry.symlink_to("/dev/zero")
        via = " (/dev/zero)"
    md5 = fixture_md5(mirror)
    line = download_fails(mirror, tmp_path / "raw", capsys)
    assert line == (
        f"mnist: could not get {MNIST_IMAGES} (expected md5 {md5}): {entry.as_uri()}: "
        f"{MNIST_IMAGES}: a {kind}{via}, not a regular file; refused"
    )


def fixture_md5(mirror: Path) -> str:
    return next(ln.split()[0] for ln in (mirror / "MD5SUMS").read_text().splitlines() if MNIST_IMAGES in ln)


def test_a_mirror_file_over_the_download_limit_stops_while_streaming(mirror, tmp_path, capsys, monkeypatch):
    size = (mirror / MNIST_IMAGES).stat().st_size
    monkeypatch.setitem(L.LIMITS, "mnist download", size - 1)
    line = download_fails(mirror, tmp_path / "raw", capsys)
    assert line.endswith(
        f"{(mirror / MNIST_IMAGES).as_uri()}: {MNIST_IMAGES}: more than the {size - 1:,}-byte limit for "
        "a downloaded MNIST file; refused (not the upstream file)"
    )
    monkeypatch.setitem(L.LIMITS, "mnist download", size)  # exactly the file: fetched
    assert main(["download", "mnist", "--raw", str(tmp_path / "ok"), "--mirror", str(mirror), "--no-official",
                 "--md5", str(mirror / "MD5SUMS")]) == 0  # fmt: skip


class EndlessHandler(http.server.BaseHTTPRequestHandler):
    """Zeros without a Content-Length (read until the connection closes), or a stated
    Content-Length over the limit."""

    sent = 0
    length: int | None = None

    def do_GET(self):
        self.send_response(200)
        if self.length is not None:
            self.send_header("Content-Length", str(self.length))
        self.end_headers()
        block = bytes(1 << 16)
        try:
            while EndlessHandler.sent < 64 << 20:  # the test's limit is 1 MiB
                self.wfile.write(block)
                EndlessHandler.sent += len(block)
        except OSError:
            pass  # the client stopped reading

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("length", [None, 2 << 20])
def test_an_http_mirror_that_never_ends_stops_at_the_limit(length, tmp_path, capsys, monkeypatch):
    EndlessHandler.sent, EndlessHandler.length = 0, length
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EndlessHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setitem(L.LIMITS, "mnist download", 1 << 20)
    url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    raw = tmp_path / "raw"
    try:
        argv = ["download", "mnist", "--raw", str(raw), "--mirror", url, "--no-official", "--no-verify"]
        line = one_line_error(argv, capsys, progress=True)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert line.endswith(
        f"{url}{MNIST_IMAGES}: {MNIST_IMAGES}: more than the 1 MiB (1,048,576 bytes) limit for a "
        "downloaded MNIST file; refused (not the upstream file)"
    )
    assert os.listdir(raw) == []
    assert EndlessHandler.sent < 64 << 20  # the client stopped reading


# --- tar member counts (C72) -------------------------------------------------------------


def many_members_tar(n: int) -> bytes:
    """An IMDB-like tar of n empty members and then one review per class and split."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(n):
            tar.addfile(tarfile.TarInfo(f"aclImdb/train/unsup/x{i}_0.txt"))
        for split in ("train", "test"):
            for label in ("neg", "pos"):
                data = f"a {label} review".encode()
                info = tarfile.TarInfo(f"aclImdb/{split}/{label}/1_{7 if label == 'pos' else 2}.txt")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), mtime=0)


def test_a_tar_with_more_members_than_its_limit_is_one_line(tmp_path, capsys, monkeypatch):
    """C72: 1.2 million empty members took 1.3 GB (every TarInfo kept) and ended in a
    MemoryError; the count is now bounded, here lowered to 1,000."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "aclImdb_v1.tar.gz").write_bytes(many_members_tar(1_500))
    monkeypatch.setitem(L.MEMBERS, "imdb", 1_000)
    line = prepare_fails("imdb", raw, tmp_path, capsys)
    assert (
        line
        == f"{raw / 'aclImdb_v1.tar.gz'}: more than 1,000 members, the limit for the IMDB tar; {NOT_OFFICIAL}"
    )
    monkeypatch.setitem(L.MEMBERS, "imdb", 1_504)  # exactly the members: read
    assert len(R.read_imdb(raw).train) == 2


def test_reading_a_tar_keeps_no_member_headers(tmp_path):
    path = tmp_path / "aclImdb_v1.tar.gz"
    path.write_bytes(many_members_tar(3_000))
    with L.TarArchive(path, "imdb") as tar:
        kept = [len(tar.tar.members) for _ in tar.members()]
    assert len(kept) == 3_004 and max(kept) == 0


def test_member_limits_stand_well_above_the_real_counts():
    # cifar-10-python.tar.gz: 9 members, dbpedia_csv.tar.gz: 5, aclImdb_v1.tar.gz: ~100,020
    assert L.MEMBERS == {"cifar10": 1_000, "imdb": 250_000, "dbpedia": 1_000}
    assert L.MEMBERS["imdb"] >= 2 * 100_020
    with tarfile.open(fileobj=io.BytesIO(fixture_files("cifar10")[CIFAR])) as tar:
        assert len(tar.getmembers()) < L.MEMBERS["cifar10"]


# --- a tar that ends before its end-of-archive marker (N90, N91) -------------------------


@pytest.mark.parametrize("damage", ["checksum", "cut"])
def test_a_tar_damaged_or_cut_at_a_header_past_its_first_member_is_one_line(damage, tmp_path, capsys):
    """Battery N90/N91: past the first member, tarfile ends the member list without a word at
    a header whose checksum is wrong, or where the data ends (a tar cut at a header and
    gzipped again): prepare wrote splits without the reviews after it, exit 0."""
    whole = gzip.decompress(fixture_files("imdb")["aclImdb_v1.tar.gz"])
    with tarfile.open(fileobj=io.BytesIO(whole)) as tar:
        members = tar.getmembers()
    at = members[len(members) * 9 // 10]  # a review header at 90 % of the archive
    if damage == "checksum":
        data = bytearray(whole)
        data[at.offset + 148] ^= 1  # a digit of the header's checksum field
        tar_bytes = bytes(data)
    else:
        tar_bytes = whole[: at.offset]
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "aclImdb_v1.tar.gz").write_bytes(gzip.compress(tar_bytes, mtime=0))
    before = members[members.index(at) - 1].name
    assert prepare_fails("imdb", raw, tmp_path, capsys) == (
        f"{raw / 'aclImdb_v1.tar.gz'}: no readable header or end-of-archive marker at byte "
        f"{at.offset:,} after {before} (a cut or damaged tar); {NOT_OFFICIAL}"
    )
    (raw / "aclImdb_v1.tar.gz").write_bytes(gzip.compress(whole, mtime=0))  # the whole tar: read
    assert len(R.read_imdb(raw).train) > 0
