"""Download: mirrors (file://, folder paths, loopback http), local_dir, checksums, retries.

No test touches the network: every source is a fixture folder in tmp_path or a server on
127.0.0.1, and `official: false` keeps the official URLs out.
"""

import http.server
import io
import os
import threading
from pathlib import Path

import pytest

from psrnn import config as C
from psrnn import files
from psrnn import workflow as W
from psrnn.cli import UserError, main
from psrnn.studies.private_shared.data import download as D
from psrnn.studies.private_shared.data.fixtures import write_fixtures
from psrnn.studies.private_shared.data.sources import SOURCES

MNIST = SOURCES["mnist"].files


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fixtures")
    write_fixtures(root, ("mnist", "imdb"))
    return root


def offline(**opts):
    return {"official": False, **opts}


def test_file_url_mirror_with_md5sums_file(fx, tmp_path):
    raw = tmp_path / "raw"
    record = D.download(
        "mnist", raw, offline(mirrors=[(fx / "mnist").as_uri()], md5=str(fx / "mnist" / "MD5SUMS"))
    )
    assert sorted(p.name for p in raw.iterdir()) == sorted([*MNIST, "download.json"])
    for name in MNIST:
        assert files.md5sum(raw / name) == files.md5sum(fx / "mnist" / name)
        assert record["files"][name]["url"] == (fx / "mnist" / name).as_uri()
    assert files.read_json(raw / "download.json") == record and record["verified"] is True


def test_plain_folder_path_mirror_relative_to_cwd(fx, tmp_path, monkeypatch):
    monkeypatch.chdir(fx)
    sums = D.parse_md5sums((fx / "imdb" / "MD5SUMS").read_text())
    record = D.download("imdb", tmp_path / "raw", offline(mirrors=["imdb"], md5=sums))
    assert record["files"]["aclImdb_v1.tar.gz"]["md5"] == sums["aclImdb_v1.tar.gz"]


def test_a_missing_relative_local_dir_says_where_it_was_looked_for(fx, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as err:
        D.download(
            "imdb", tmp_path / "raw", offline(local_dir="archives/imdb", md5=str(fx / "imdb" / "MD5SUMS"))
        )
    assert str(err.value).endswith(
        f" (relative paths archives/imdb are read from the current directory {tmp_path})"
    )
    assert (tmp_path / "archives" / "imdb" / "aclImdb_v1.tar.gz").as_uri() in str(err.value)
    assert not (tmp_path / "raw" / "download.json").exists()


def test_local_dir_is_used_before_mirrors(fx, tmp_path):
    record = D.download(
        "imdb",
        tmp_path / "raw",
        offline(
            local_dir=str(fx / "imdb"), mirrors=[str(tmp_path / "nowhere")], md5=str(fx / "imdb" / "MD5SUMS")
        ),
    )
    assert record["files"]["aclImdb_v1.tar.gz"]["url"].startswith((fx / "imdb").as_uri())


def test_wrong_checksum_names_file_expected_and_actual_and_leaves_nothing(fx, tmp_path):
    raw = tmp_path / "raw"
    actual = files.md5sum(fx / "imdb" / "aclImdb_v1.tar.gz")
    with pytest.raises(UserError) as err:
        D.download("imdb", raw, offline(mirrors=[str(fx / "imdb")]))  # official md5s
    msg = str(err.value)
    assert "aclImdb_v1.tar.gz" in msg
    assert "7c2ac02c03563afcf9b574c7e56c153a" in msg and actual in msg
    assert list(raw.iterdir()) == []  # no file under its final name, no temporary


def test_truncated_file_fails_the_check_and_next_mirror_is_used(fx, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    data = (fx / "imdb" / "aclImdb_v1.tar.gz").read_bytes()
    (bad / "aclImdb_v1.tar.gz").write_bytes(data[: len(data) // 2])
    raw = tmp_path / "raw"
    md5 = str(fx / "imdb" / "MD5SUMS")
    with pytest.raises(UserError, match="md5 mismatch: expected") as err:
        D.download("imdb", raw, offline(mirrors=[str(bad)], md5=md5))
    assert "aclImdb_v1.tar.gz" in str(err.value)
    assert not (raw / "aclImdb_v1.tar.gz").exists() and not (raw / "download.json").exists()
    record = D.download("imdb", raw, offline(mirrors=[str(bad), str(fx / "imdb")], md5=md5))
    assert record["files"]["aclImdb_v1.tar.gz"]["bytes"] == len(data)


def test_missing_file_is_named(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="could not get train-images-idx3-ubyte.gz") as err:
        D.download("mnist", tmp_path / "raw", offline(mirrors=[str(empty)]))
    assert "No such file" in str(err.value)
    with pytest.raises(UserError, match="no place to look"):
        D.download("mnist", tmp_path / "raw", offline())


def test_verify_false_accepts_own_repack_and_says_so(fx, tmp_path):
    record = D.download("imdb", tmp_path / "raw", offline(mirrors=[str(fx / "imdb")], verify=False))
    assert record["verified"] is False
    assert record["files"]["aclImdb_v1.tar.gz"]["expected_md5"] is None


def test_present_files_are_kept_and_a_bad_one_is_fetched_again(fx, tmp_path):
    raw = tmp_path / "raw"
    opts = offline(mirrors=[str(fx / "mnist")], md5=str(fx / "mnist" / "MD5SUMS"))
    D.download("mnist", raw, opts)
    first = raw / "train-labels-idx1-ubyte.gz"
    first.write_bytes(b"damaged")
    record = D.download("mnist", raw, opts)
    assert files.md5sum(first) == files.md5sum(fx / "mnist" / first.name)
    urls = {n: f["url"] for n, f in record["files"].items()}
    assert urls[first.name] is not None  # re-fetched
    assert urls["t10k-labels-idx1-ubyte.gz"] is None  # kept


def test_official_urls_come_after_mirrors_and_keep_their_own_md5():
    places = D.places(
        SOURCES["dbpedia"],
        "dbpedia_csv.tar.gz",
        {"mirrors": ["http://m/"]},
        SOURCES["dbpedia"].md5["dbpedia_csv.tar.gz"],
    )
    assert [p.url.split("/")[2] for p in places] == ["m", "drive.google.com", "s3.amazonaws.com"]
    assert places[0].md5 == places[1].md5 == "dca7b1ae12b1091090db52aa7ec5ca64"
    assert places[2].md5 == "239c7837b9e79db34486f3de6a00e38e"  # fast.ai re-pack
    assert places[0].url == "http://m/dbpedia_csv.tar.gz"


def test_parse_md5sums_formats_and_errors():
    text = "# comment\nd41d8cd98f00b204e9800998ecf8427e  a.gz\n0cc175b9c0f1b6a831c399e269772661 *b/c.tar.gz\n"
    assert D.parse_md5sums(text) == {
        "a.gz": "d41d8cd98f00b204e9800998ecf8427e",
        "c.tar.gz": "0cc175b9c0f1b6a831c399e269772661",
    }
    with pytest.raises(UserError, match=":1: expected"):
        D.parse_md5sums("nonsense\n", "MD5SUMS")


class FlakyHandler(http.server.BaseHTTPRequestHandler):
    """Serves `payload`; the first `fail` requests get 503, `short` ones a truncated body."""

    payload = b""
    fail = 0
    short = 0
    requests = 0

    def do_GET(self):  # noqa: N802
        cls = type(self)
        cls.requests += 1
        if cls.requests <= cls.fail:
            self.send_error(503, "busy")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(cls.payload)))
        self.end_headers()
        body = cls.payload[:10] if cls.requests <= cls.fail + cls.short else cls.payload
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(fx):
    FlakyHandler.payload = (fx / "imdb" / "aclImdb_v1.tar.gz").read_bytes()
    FlakyHandler.requests = 0
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FlakyHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/", FlakyHandler
    httpd.shutdown()
    httpd.server_close()


def test_http_retries_server_errors_and_truncated_transfers(server, fx, tmp_path, monkeypatch):
    monkeypatch.setattr(D.time, "sleep", lambda s: None)
    url, handler = server
    handler.fail, handler.short = 1, 1  # 503, then a cut-off body, then the file
    record = D.download(
        "imdb", tmp_path / "raw", offline(mirrors=[url], md5=str(fx / "imdb" / "MD5SUMS"), retries=3)
    )
    assert handler.requests == 3
    assert record["files"]["aclImdb_v1.tar.gz"]["bytes"] == len(handler.payload)


def test_http_gives_up_after_retries(server, fx, tmp_path, monkeypatch):
    monkeypatch.setattr(D.time, "sleep", lambda s: None)
    url, handler = server
    handler.fail, handler.short = 5, 0
    with pytest.raises(UserError, match="HTTP 503.*after 2 attempts"):
        D.download("imdb", tmp_path / "raw", offline(mirrors=[url], retries=2))
    assert handler.requests == 2
    assert os.listdir(tmp_path / "raw") == []


def test_cli_with_suite_config_and_one_line_errors(fx, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "suite.yaml").write_text(f"""
name: t
seeds: [0]
datasets:
  mnist:
    source: {{mirrors: ["{fx / "mnist"}"], md5: "{fx / "mnist" / "MD5SUMS"}", official: false}}
experiments:
  g: {{dataset: mnist, shared: 0.0}}
""")
    assert main(["download", "mnist", "--config", "suite.yaml"]) == 0
    marker = tmp_path / "data/t/raw/mnist/download.json"
    cfg = C.load_suite(tmp_path / "suite.yaml")
    assert W.is_current(marker, W.dataset_stamp(cfg, "mnist"))  # made as the config says
    assert main(["download", "mnist", "--config", "suite.yaml", "--retries", "2"]) == 0
    assert not W.is_current(marker, W.dataset_stamp(cfg, "mnist"))  # a flag overrode it
    capsys.readouterr()
    assert main(["download", "imdb", "--raw", "r", "--mirror", str(fx / "imdb"), "--no-official"]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # progress lines, then the error
    assert err[-1].startswith("psrnn download: error: imdb: could not get aclImdb_v1.tar.gz")
    assert "md5 mismatch" in err[-1] and sum(e.startswith("psrnn") for e in err) == 1


def test_a_small_config_download_by_hand_before_its_fixtures_says_how_to_write_them(
    tmp_path, monkeypatch, capsys
):
    """small.yaml's archives are synthetic fixtures that Snakemake writes first; `download`
    by hand in a fresh clone had stopped at "md5 file not found" without saying so."""
    monkeypatch.chdir(tmp_path)
    small = str(C.ROOT / "config" / "small.yaml")
    assert main(["download", "mnist", "--config", small]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "psrnn download: error: data/small/fixtures/mnist: the suite's synthetic archives are not written "
        "yet; `python -m psrnn fixtures data/small/fixtures` writes them (Snakemake does it first)"
    ]
    assert not (tmp_path / "data" / "small" / "raw").exists()
    assert main(["fixtures", "data/small/fixtures"]) == 0
    assert main(["download", "mnist", "--config", small]) == 0
    assert (tmp_path / "data" / "small" / "raw" / "mnist" / "download.json").is_file()


@pytest.mark.parametrize("where", ["folder", "/dev/zero"])
def test_an_md5_file_that_is_no_file_says_what_it_is(where, fx, tmp_path, capsys):
    """`--md5` naming a folder or a device had been "md5 file not found" (fault battery C,
    N86); /dev/zero is never read."""
    md5 = fx / "mnist" if where == "folder" else Path(where)
    says = (
        "is a folder, not a file" if where == "folder" else "is not a regular file (a device, FIFO or socket)"
    )
    args = ["download", "mnist", "--raw", str(tmp_path / "raw"), "--local-dir", str(fx / "mnist")]
    assert main([*args, "--no-official", "--md5", str(md5)]) == 2
    assert capsys.readouterr().err == f"psrnn download: error: md5 file {says}: {md5}\n"
    assert not (tmp_path / "raw").exists()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_download_shows_its_bytes_on_a_terminal_and_nothing_in_a_log(fx, tmp_path, monkeypatch):
    """A byte progress bar per file (tqdm) where stderr is a terminal; a job's log file
    (not a terminal) gets none of it."""
    opts = offline(mirrors=[(fx / "mnist").as_uri()], md5=str(fx / "mnist" / "MD5SUMS"))
    shown = Terminal()
    monkeypatch.setattr("sys.stderr", shown)
    D.download("mnist", tmp_path / "a", opts)
    text = shown.getvalue()
    for name in MNIST:  # e.g. "t10k-labels-idx1-ubyte.gz: 100%|##########| 178/178 [00:00<00:00, 2.28MB/s]"
        size = (fx / "mnist" / name).stat().st_size
        total = str(size) if size < 1000 else f"{size / 1000:.1f}k"
        assert f"\r{name}: 100%|##########| {total}/{total} [" in text, (name, text[-300:])
    logged = io.StringIO()
    monkeypatch.setattr("sys.stderr", logged)
    D.download("mnist", tmp_path / "b", opts)
    assert "100%" not in logged.getvalue()
