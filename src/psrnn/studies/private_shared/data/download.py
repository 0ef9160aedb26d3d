"""Download and verify a dataset's upstream archives.

    python -m psrnn download mnist --config config/paper.yaml     # -> data/paper/raw/mnist/
    python -m psrnn download imdb --raw /tmp/raw/imdb --mirror data/fixtures/imdb \\
        --md5 data/fixtures/imdb/MD5SUMS --no-official

Each upstream file is looked for, in order, in the suite config's `source.local_dir`,
its `source.mirrors`, then the official URLs (`sources.py`; skipped with
`official: false`). Every place is read through urllib, so a folder of archives (a
plain path or a file:// URL) goes through the same code as https://. A file is written
under a temporary name and only renamed into place once its md5 matches, so a failed,
truncated or wrong download never leaves a file under its final name. A mismatch moves
on to the next place; when none works the error names the file and, for each place,
the expected and the actual checksum (or the network error). Each file is bounded while it
streams by its dataset's download limit (limits.py: "<dataset> download", a few times the
real file), and a folder entry that is not a regular file (a device such as /dev/zero, a
FIFO; a link to one) is refused before it is opened: either moves on to the next place,
and the temporary file goes. `download.json`, written last, records what was fetched from
where: its presence means the folder is complete.

Why by hand: torchvision's download_url and pooch fetch one URL against one checksum;
here one file has several places to try in order (a local folder, mirrors that may carry
their own md5, the official URLs), and the error must list every place with the checksum
it gave. Both libraries stop at the first failure, and neither writes under a temporary
name that only an md5 match renames into place.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import stat
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from psrnn import __version__, files
from psrnn.errors import UserError
from psrnn.studies.private_shared.data.limits import LIMITS, limit_text
from psrnn.studies.private_shared.data.sources import Source, source

MARKER = "download.json"
CHUNK = 1 << 20
TIMEOUT_S = 60
DEFAULT_RETRIES = 3

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class ChecksumError(UserError):
    """The bytes arrived but are not the expected file."""


class RefusedError(UserError):
    """The place holds something that is not an upstream file: not a regular file, or more
    bytes than the dataset's download limit."""


class TransientError(Exception):
    """Worth another try: a timeout, a dropped connection, a server error."""


@dataclass(frozen=True)
class Place:
    url: str  # full URL of one file
    md5: str | None  # what this place's bytes must hash to (None: not checked)


# --- options -----------------------------------------------------------------------------


def parse_md5sums(text: str, origin: str = "md5 file") -> dict[str, str]:
    """`md5sum` output ("<md5>  <name>" or "<md5> *<name>" per line) -> {name: md5}."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or len(parts[0]) != 32:
            raise UserError(f"{origin}:{n}: expected '<md5>  <file name>', got {line!r}")
        out[Path(parts[1].strip().lstrip("*")).name] = parts[0].lower()
    return out


def expected_md5(src: Source, opts: dict[str, Any]) -> dict[str, str]:
    """The official md5s, replaced by `opts["md5"]` (a mapping or an md5sum-format file)."""
    override = opts.get("md5")
    if isinstance(override, (str, Path)):
        path = Path(override)
        if why := files.not_a_file(path):  # missing: run() says whether the suite's fixtures are unwritten
            raise (FileNotFoundError if why.startswith("not found") else UserError)(f"md5 file {why}: {path}")
        override = parse_md5sums(path.read_text(), str(path))
    out = dict(src.md5)
    for name, md5 in (override or {}).items():
        if name in out:
            out[name] = md5.lower()
    return out


def local_bases(opts: dict[str, Any]) -> list[str]:
    """The config's own places to look, in order: local_dir, then the mirrors."""
    return ([opts["local_dir"]] if opts.get("local_dir") else []) + list(opts.get("mirrors") or [])


def relative_note(opts: dict[str, Any]) -> str:
    """Where relative local_dir/mirrors paths were read from (the current directory, which
    under Snakemake is the checkout), for error messages; '' when there are none."""
    relative = [b for b in local_bases(opts) if "://" not in b and not Path(b).expanduser().is_absolute()]
    if not relative:
        return ""
    return f" (relative paths {', '.join(relative)} are read from the current directory {Path.cwd()})"


def as_base_url(place: str) -> str:
    """A mirror as a base URL ending in '/': URLs pass through, paths become file:// URLs."""
    if "://" not in place:
        place = Path(place).expanduser().resolve().as_uri()
    return place if place.endswith("/") else place + "/"


def places(src: Source, name: str, opts: dict[str, Any], md5: str | None) -> list[Place]:
    """Where to look for one file, in order: local_dir, mirrors, then the official URLs."""
    out = [Place(as_base_url(b) + name, md5) for b in local_bases(opts)]
    if opts.get("official", True):
        # an official URL with its own checksum (a re-packed copy) keeps it unless the
        # user replaced the md5 of this file
        replaced = md5 != src.md5[name]
        out += [Place(u.url, md5 if replaced or u.md5 is None else u.md5) for u in src.urls[name]]
    return out


# --- fetching ----------------------------------------------------------------------------


def _transient_http(err: urllib.error.HTTPError) -> bool:
    return err.code in (408, 429) or err.code >= 500


def fetch(
    url: str,
    target: Path,
    md5: str | None,
    retries: int = DEFAULT_RETRIES,
    log: Log = _stderr,
    kind: str | None = None,
) -> dict[str, Any]:
    """Copy `url` to `target` if its md5 matches (`md5=None`: no check), at most
    LIMITS[kind] bytes (`kind` "<dataset> download"; None: no bound).

    Returns {"md5", "bytes", "url"}. Raises ChecksumError on a mismatch, RefusedError on a
    file over the limit or a local entry that is not a regular file, OSError / urllib
    errors when the place cannot be read. `target` is replaced only on success.
    """
    remote = not url.startswith("file:")
    for attempt in range(1, retries + 1):
        try:
            return _fetch_once(url, target, md5, kind)
        except TransientError as err:
            if attempt == retries:
                raise OSError(f"{err} (after {retries} attempts)") from None
            wait = min(2**attempt, 30) if remote else 0
            log(f"  {err}; retrying in {wait}s ({attempt}/{retries})")
            time.sleep(wait)
    raise AssertionError("unreachable")


def check_regular(url: str, name: str) -> None:
    """Refuse a file:// entry that is not a regular file (after links), before it is opened:
    /dev/zero never ends, and opening a FIFO waits for a writer. A missing one is left to
    urlopen's own error."""
    if not url.startswith("file:"):
        return
    path = urllib.request.url2pathname(urllib.parse.urlparse(url).path)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        kinds = (
            (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"),
            (stat.S_ISFIFO, "a FIFO"),
            (stat.S_ISSOCK, "a socket"),
            (stat.S_ISDIR, "a folder"),
        )
        what = next((text for test, text in kinds if test(mode)), "not a file")
        real = os.path.realpath(path)
        via = f" ({real})" if real != os.path.abspath(path) else ""
        raise RefusedError(f"{name}: {what}{via}, not a regular file; refused")


def _fetch_once(url: str, target: Path, md5: str | None, kind: str | None = None) -> dict[str, Any]:
    check_regular(url, target.name)
    most = LIMITS[kind] if kind else None
    req = urllib.request.Request(url, headers={"User-Agent": f"psrnn/{__version__}"})
    h = hashlib.md5()
    n = 0

    def over() -> RefusedError:
        assert kind is not None
        return RefusedError(f"{target.name}: more than {limit_text(kind)}; refused (not the upstream file)")

    with files.atomic_path(target) as tmp:
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp, open(tmp, "wb") as out:
                length = resp.headers.get("Content-Length")
                if most is not None and length and length.isdigit() and int(length) > most:
                    raise over()
                # bytes so far, on a terminal only (tqdm's disable=None): a job's log gets none
                with tqdm(
                    total=int(length) if length else None,
                    unit="B",
                    unit_scale=True,
                    desc=target.name,
                    file=sys.stderr,
                    disable=None,
                    mininterval=1.0,
                ) as bar:
                    while block := resp.read(CHUNK):
                        if most is not None and n + len(block) > most:
                            raise over()
                        out.write(block)
                        h.update(block)
                        n += len(block)
                        bar.update(len(block))
        except urllib.error.HTTPError as err:
            if _transient_http(err):
                raise TransientError(f"HTTP {err.code} {err.reason}") from None
            raise
        except (TimeoutError, ConnectionError, http.client.HTTPException) as err:
            # HTTPException: IncompleteRead and friends, a connection dropped mid-transfer
            raise TransientError(f"{type(err).__name__}: {err}") from None
        except urllib.error.URLError as err:
            if isinstance(err.reason, (TimeoutError, ConnectionError)):
                raise TransientError(str(err.reason)) from None
            raise
        if length is not None and n != int(length):
            raise TransientError(f"truncated transfer: got {n} of {length} bytes")
        actual = h.hexdigest()
        if md5 is not None and actual != md5:
            raise ChecksumError(f"{target.name}: md5 mismatch: expected {md5}, got {actual} ({n} bytes)")
    return {"md5": actual, "bytes": n, "url": url}


def download(
    dataset: str,
    raw_dir: str | Path,
    opts: dict[str, Any] | None = None,
    log: Log = _stderr,
    stamp: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Fetch every upstream file of `dataset` into `raw_dir`; write and return download.json.

    `opts` is the suite config's `datasets.<dataset>.source` (all keys optional):
    mirrors, official (default true), local_dir, verify (default true), md5, retries.
    Files already present with the right checksum are kept. `stamp`: extra keys for
    download.json (the workflow's settings digest, psrnn.jobspec.dataset_stamp).
    """
    opts = dict(opts or {})
    src = source(dataset)
    raw_dir = Path(raw_dir)
    verify = opts.get("verify", True)
    retries = int(opts.get("retries") or DEFAULT_RETRIES)
    if retries < 1:
        raise UserError(f"retries={retries}: must be at least 1 (attempts per URL)")
    expected = expected_md5(src, opts)
    # a failed run must not leave the marker of an earlier complete one behind
    (raw_dir / MARKER).unlink(missing_ok=True)
    record: dict[str, Any] = {
        "dataset": dataset,
        "verified": verify,
        "files": {},
        "psrnn_version": __version__,
        **(stamp or {}),
    }
    for name in src.files:
        target = raw_dir / name
        want = expected[name] if verify else None
        accepted = {want} | {u.md5 for u in src.urls[name] if u.md5 and want == src.md5[name]}
        if target.is_file():
            have = files.md5sum(target)
            if not verify or have in accepted:
                log(f"{dataset}: {name} already present ({have})")
                record["files"][name] = {
                    "md5": have,
                    "bytes": target.stat().st_size,
                    "url": None,
                    "expected_md5": want,
                }
                continue
            log(f"{dataset}: {name} present but md5 {have} is not {want}; fetching again")
        failures = []
        for place in places(src, name, opts, want):
            log(f"{dataset}: {name} <- {place.url}")
            try:
                got = fetch(
                    place.url, target, place.md5 if verify else None, retries, log, f"{dataset} download"
                )
            except (ChecksumError, RefusedError) as err:
                failures.append(f"{place.url}: {err}")
            except (OSError, urllib.error.URLError, ValueError) as err:
                failures.append(f"{place.url}: {getattr(err, 'reason', err)}")
            else:
                record["files"][name] = {**got, "expected_md5": place.md5 if verify else None}
                break
            log(f"  failed: {failures[-1].split(': ', 1)[1]}")
        else:
            tried = "; ".join(failures) if failures else "no place to look (official: false, no mirrors)"
            raise UserError(
                f"{dataset}: could not get {name} (expected md5 {want}): {tried}{relative_note(opts)}"
            )
    files.write_json(raw_dir / MARKER, record)
    return record


# --- command line ------------------------------------------------------------------------


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="mnist, fmnist, cifar10, imdb or dbpedia")
    p.add_argument(
        "--config",
        help="suite config: raw folder data/<name>/raw/<dataset>/ and its datasets.<dataset>.source options",
    )
    p.add_argument("--raw", help="raw folder (default: from --config)")
    p.add_argument(
        "--mirror",
        action="append",
        default=[],
        help="base URL or folder holding the upstream files (repeatable; tried after the config's mirrors)",
    )
    p.add_argument("--local-dir", help="folder that already holds the archives")
    p.add_argument("--md5", help="md5sum-format file replacing the official checksums")
    p.add_argument("--no-official", action="store_true", help="never try the official URLs")
    p.add_argument("--no-verify", action="store_true", help="skip the md5 check (own mirrors)")
    p.add_argument("--retries", type=int, help="attempts per URL on network errors")


def check_fixtures(folder: str | None, dataset: str, places: list[str]) -> None:
    """A UserError saying how to write the suite's synthetic archives when `dataset` reads
    them (one of `places` is under the suite's `fixtures:` folder) and they are not there
    (Snakemake's fixtures job writes them before any download)."""
    if not folder or not any(p and Path(p).resolve().is_relative_to(Path(folder).resolve()) for p in places):
        return
    if not (Path(folder) / dataset / "MD5SUMS").is_file():
        raise UserError(
            f"{Path(folder) / dataset}: the suite's synthetic archives are not written yet; "
            f"`python -m psrnn fixtures {folder}` writes them (Snakemake does it first)"
        )


def source_options(args: argparse.Namespace) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """(raw folder, source options, stamp for download.json) from --config and the flags;
    the stamp is the config's settings digest when no flag changes what the config says."""
    opts: dict[str, Any] = {}
    stamp: dict[str, Any] = {}
    raw = Path(args.raw) if args.raw else None
    if args.config:
        from psrnn import config as C
        from psrnn.jobspec import dataset_stamp

        cfg, opts = C.dataset_options(args.config, args.dataset, "source")
        raw = raw or C.data_root(cfg) / "raw" / args.dataset
        flags = (args.mirror, args.local_dir, args.md5, args.retries, args.no_official, args.no_verify)
        if not any(flags):
            stamp = dataset_stamp(cfg, args.dataset)
    if raw is None:
        raise UserError("give --config <suite.yaml> or --raw <folder>")
    opts["mirrors"] = list(opts.get("mirrors") or []) + args.mirror
    for key, value in (("local_dir", args.local_dir), ("md5", args.md5), ("retries", args.retries)):
        if value is not None:
            opts[key] = value
    if args.no_official:
        opts["official"] = False
    if args.no_verify:
        opts["verify"] = False
    return raw, opts, stamp


def run(args: argparse.Namespace) -> int:
    raw, opts, stamp = source_options(args)  # a config says first whether its study downloads
    source(args.dataset)
    try:
        record = download(args.dataset, raw, opts, stamp=stamp)
    except FileNotFoundError:
        if args.config:  # the suite's synthetic archives, not written yet? say how
            from psrnn import config as C

            places = [*local_bases(opts), str(opts.get("md5") or "")]
            check_fixtures(C.load_yaml(args.config).get("fixtures"), args.dataset, places)
        raise
    total = sum(f["bytes"] for f in record["files"].values())
    print(f"{args.dataset}: {len(record['files'])} file(s), {total / 1e6:.1f} MB in {raw}")
    return 0
