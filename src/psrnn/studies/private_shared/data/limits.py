"""What an upstream archive may hold, checked while it is read: how large it may be as
downloaded, how much it decompresses to, how many and which kinds of tar member it holds,
and the lengths a pickled CIFAR-10 batch asks for.

    python -m psrnn prepare mnist --config config/paper.yaml   # the readers check these

An archive reaches `prepare` with the user's own md5 (a mirror's MD5SUMS) or
`verify: false`, so it may be damaged or hostile. Each bound below is the most one kind
of file may decompress to, a few times the size of the largest real file of that kind
(stated beside it), and is checked while the bytes stream in: a gzip bomb stops after at
most its limit, with one line naming the file (and member) and the limit. `download`
stops a file that streams past its "<dataset> download" limit the same way (a mirror entry
that never ends, such as a link to /dev/zero, would fill the disk). Links and other
non-regular members are refused (a `train.csv` that links to `test.csv` would prepare the
test rows as training data). Every error is a UserError raised before `prepare` writes
anything; the scratch files of the IDX reader are in a temporary folder that is removed.
"""

from __future__ import annotations

import gzip
import pickletools
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, cast

from psrnn.errors import UserError

MiB = 1 << 20
GiB = 1 << 30
CHUNK = MiB

# kind -> the most bytes one file of that kind may decompress to ("<dataset> download": may
# have as downloaded, before any decompression). The real sizes (bytes):
LIMITS: dict[str, int] = {
    # the upstream files as fetched. MNIST: train-images-idx3-ubyte.gz 9,912,422 (the
    # largest of the four); Fashion-MNIST: train-images-idx3-ubyte.gz 26,421,880. A .gz
    # is never much larger than what it decompresses to, and that is at most the IDX limit
    "mnist download": 128 * MiB,
    "fmnist download": 128 * MiB,
    # cifar-10-python.tar.gz 170,498,071; aclImdb_v1.tar.gz 84,125,825;
    # dbpedia_csv.tar.gz 68,341,698 (fast.ai's dbpedia_csv.tgz 68,341,743): 3 to 7 times
    "cifar10 download": 512 * MiB,
    "imdb download": 512 * MiB,
    "dbpedia download": 512 * MiB,
    # train-images-idx3-ubyte (MNIST and Fashion-MNIST alike), the largest IDX file:
    # 47,040,016 = 16 + 60,000 x 28 x 28 (t10k-images: 7,840,016; the labels: 60,008)
    "idx": 128 * MiB,
    # cifar-10-batches-py/data_batch_1..5, test_batch: 31,035,320 to 31,035,999 each
    # (Python 2 pickles of 10,000 x 3,072 pixels, labels and file names); a re-pickle by
    # Python 3 with protocol 2 stores the pixels as UTF-8 text, up to ~62 MB
    "cifar10 member": 128 * MiB,
    # the whole tar: ~186.2 MB (six batches, batches.meta, readme.html and their headers)
    "cifar10 archive": 1 * GiB,
    # aclImdb/{train,test}/{pos,neg}/*.txt: the longest review is 13,704 bytes
    # (aclImdb/train/pos/1175_9.txt, measured in ../shared/data/imdb)
    "imdb review": 1 * MiB,
    # any other member: the largest official one, train/unsupBow.feat, is ~42 MB
    "imdb member": 256 * MiB,
    # the whole tar: 103,997,440 for the 50,000 labelled reviews (../shared/data/imdb,
    # measured); the official archive adds 50,000 unlabelled reviews and the .feat, urls
    # and vocabulary files, ~300 MB
    "imdb archive": 1 * GiB,
    # dbpedia_csv/train.csv ~174 MB, test.csv ~22 MB (Hugging Face's dbpedia_14 card counts
    # 178,428,970 and 22,310,285 bytes of train and test text); classes.txt, readme.txt: KBs
    "dbpedia member": 512 * MiB,
    # the whole tar: ~196 MB (the two CSVs, classes.txt, readme.txt and their headers)
    "dbpedia archive": 1 * GiB,
}

# The longest field the DBpedia CSV reader takes, in characters. A field is one title or one
# abstract (the readme: "no new lines in title or content"); the 630,000 rows average ~310
# bytes (~196 MB of CSV), and Python's default of 131,072 stops a longer field with a
# _csv.Error traceback. 1 MiB is 8 times that default and thousands of times an average
# row, and bounds what an unclosed quote swallows before its one-line error. (The longest
# real field is not measured here: ../shared holds no DBpedia archive.)
CSV_FIELD_CHARS = 1 * MiB

# dataset -> the most members (tar headers: files and folders) its tar may hold. Each header
# is 512 bytes of tar, so a tar of empty members stays under the archive's byte limit with
# ~2 million of them; reading them costs time and, for the names kept to find duplicates,
# memory. The real counts (from the upstream listings; only ../shared/data/imdb's is
# counted here): cifar-10-python.tar.gz 9 (the folder, six batches, batches.meta,
# readme.html); dbpedia_csv.tar.gz 5 (the folder, train.csv, test.csv, classes.txt,
# readme.txt); aclImdb_v1.tar.gz ~100,020 (100,000 reviews with train/unsup, the folders and
# the .feat, urls and vocabulary files); ../shared/data/imdb's labelled half: 50,007, counted
MEMBERS: dict[str, int] = {"cifar10": 1_000, "imdb": 250_000, "dbpedia": 1_000}

WHAT = {
    "mnist download": "a downloaded MNIST file",
    "fmnist download": "a downloaded Fashion-MNIST file",
    "cifar10 download": "a downloaded CIFAR-10 file",
    "imdb download": "a downloaded IMDB file",
    "dbpedia download": "a downloaded DBpedia file",
    "idx": "an MNIST / Fashion-MNIST IDX file",
    "cifar10 member": "a CIFAR-10 archive member",
    "cifar10 archive": "the CIFAR-10 tar",
    "imdb review": "an IMDB review",
    "imdb member": "an IMDB archive member",
    "imdb archive": "the IMDB tar",
    "dbpedia member": "a DBpedia archive member",
    "dbpedia archive": "the DBpedia tar",
}

NOT_OFFICIAL = "the archive is damaged or not the official one"


def limit_text(kind: str) -> str:
    """'the 128 MiB (134,217,728 bytes) limit for an MNIST / Fashion-MNIST IDX file'."""
    most = LIMITS[kind]
    unit = next((f"{most // u} {name}" for u, name in ((GiB, "GiB"), (MiB, "MiB")) if most % u == 0), "")
    size = f"{unit} ({most:,} bytes)" if unit else f"{most:,}-byte"
    return f"the {size} limit for {WHAT[kind]}"


def over(where: str, kind: str) -> UserError:
    return UserError(f"{where}: decompresses to more than {limit_text(kind)}; {NOT_OFFICIAL}")


# --- gzip --------------------------------------------------------------------------------


def gunzip(path: Path, out: Path, kind: str) -> Path:
    """Decompress `path` into the file `out` in chunks, stopping once more than LIMITS[kind]
    bytes came out (the partial `out` is left to the caller's scratch folder)."""
    most, n = LIMITS[kind], 0
    with gzip.open(path, "rb") as src, open(out, "wb") as dst:
        while block := src.read(min(CHUNK, most + 1 - n)):
            n += len(block)
            if n > most:
                raise over(str(path), kind)
            dst.write(block)
    return out


class Bounded:
    """A gzip stream for `tarfile` that stops once more than LIMITS[kind] bytes came out:
    reads return at most one byte past the limit, and a seek past it (tarfile skipping a
    member) is refused before anything is decompressed. `member` names where it stopped."""

    def __init__(self, raw: gzip.GzipFile, path: Path, kind: str):
        self.raw, self.path, self.kind = raw, path, kind
        self.member = ""  # the last member header read, for the message
        self.last = b""  # the last block read (tarfile's last header read, once its list ended)

    def _over(self) -> UserError:
        return over(f"{self.path}: {self.member}" if self.member else str(self.path), self.kind)

    def read(self, n: int = -1) -> bytes:
        room = LIMITS[self.kind] - self.raw.tell()
        if n is None or n < 0:
            parts = []
            while block := self.read(min(CHUNK, room + 1)):
                parts.append(block)
                room -= len(block)
            return b"".join(parts)
        data = self.raw.read(min(n, room + 1))
        if self.raw.tell() > LIMITS[self.kind]:
            raise self._over()
        self.last = data
        return data

    def seek(self, pos: int, whence: int = 0) -> int:
        if whence not in (0, 1):
            raise OSError("seek from the end of a gzip stream")
        target = pos + (self.raw.tell() if whence == 1 else 0)
        if target > LIMITS[self.kind]:
            raise self._over()
        return self.raw.seek(target)

    def tell(self) -> int:
        return self.raw.tell()

    def seekable(self) -> bool:
        return True  # forward (tarfile skipping or reading on), as GzipFile does


class TarArchive:
    """A .tar.gz of one dataset read as a stream under its limits:

    with TarArchive(path, "imdb") as tar:
        for m in tar.members():          # regular files only; links etc. refused
            data = tar.read(m, "imdb review")
    """

    def __init__(self, path: Path, dataset: str):
        self.path, self.dataset = path, dataset

    def __enter__(self) -> TarArchive:
        self.gz = gzip.open(self.path, "rb")
        self.stream = Bounded(self.gz, self.path, f"{self.dataset} archive")
        try:
            self.tar = tarfile.open(fileobj=cast(IO[bytes], self.stream), mode="r:")
        except BaseException:
            self.gz.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.tar.close()
        self.gz.close()

    def members(self) -> Iterator[tarfile.TarInfo]:
        """The regular files, in archive order; folders are skipped. A link, device, FIFO,
        sparse file, a file twice, a file over the dataset's member limit, or more members
        than MEMBERS[dataset] is refused.

        tarfile keeps every header it read (TarFile.members, for look-ups by name, which
        nothing here makes): they are dropped as the tar is read, so memory does not grow
        with the number of members (~1 KB each)."""
        seen: set[str] = set()
        most = MEMBERS[self.dataset]
        count = 0
        while (m := self.tar.next()) is not None:
            self.tar.members.clear()  # type: ignore[attr-defined]  # (not in typeshed)
            count += 1
            if count > most:
                raise UserError(
                    f"{self.path}: more than {most:,} members, the limit for "
                    f"{WHAT[f'{self.dataset} archive']}; {NOT_OFFICIAL}"
                )
            self.stream.member = m.name
            if m.isdir():
                continue
            if not m.isreg() or m.issparse():
                raise UserError(
                    f"{self.path}: {m.name}: {member_kind(m)}; refused (an upstream archive holds "
                    f"only regular files and folders; {NOT_OFFICIAL})"
                )
            if m.name in seen:
                raise UserError(f"{self.path}: {m.name}: in the archive twice; {NOT_OFFICIAL}")
            seen.add(m.name)
            self.check(m, f"{self.dataset} member")
            yield m
        self.check_end()

    def check_end(self) -> None:
        """Refuse a member list that did not end at the end-of-archive marker (a block of
        zeros): past its first member, tarfile ends the list without a word at a header it
        cannot read (a damaged checksum) or at the end of the data (a tar cut at a header),
        and the members after it would be missing from the prepared splits."""
        end = self.tar.offset  # where the header it could not read (or the marker) starts
        if self.stream.tell() != end + tarfile.BLOCKSIZE or self.stream.last != bytes(tarfile.BLOCKSIZE):
            after = f" after {self.stream.member}" if self.stream.member else ""
            raise UserError(
                f"{self.path}: no readable header or end-of-archive marker at byte {end:,}{after} "
                f"(a cut or damaged tar); {NOT_OFFICIAL}"
            )

    def check(self, m: tarfile.TarInfo, kind: str) -> None:
        """Refuse `m` when its header says it holds more than LIMITS[kind] bytes."""
        if m.size > LIMITS[kind]:
            raise UserError(
                f"{self.path}: {m.name}: {m.size:,} bytes, over {limit_text(kind)}; {NOT_OFFICIAL}"
            )

    def open(self, m: tarfile.TarInfo, kind: str | None = None) -> IO[bytes]:
        """A member's bytes as a stream, after its size is checked against LIMITS[kind]."""
        if kind is not None:
            self.check(m, kind)
        f = self.tar.extractfile(m)
        assert f is not None  # a regular member (members() yields no others)
        return f

    def read(self, m: tarfile.TarInfo, kind: str | None = None) -> bytes:
        return self.open(m, kind).read()


def member_kind(m: tarfile.TarInfo) -> str:
    """'a symbolic link to dbpedia_csv/test.csv', 'a device file', ... for messages."""
    if m.issym():
        return f"a symbolic link to {m.linkname}"
    if m.islnk():
        return f"a hard link to {m.linkname}"
    if m.issparse():
        return "a sparse file"
    if m.ischr() or m.isblk():
        return "a device file"
    if m.isfifo():
        return "a FIFO"
    return f"a member of tar type {m.type!r}"


# --- pickles -----------------------------------------------------------------------------

MEMO_PUTS = ("PUT", "BINPUT", "LONG_BINPUT")


def check_pickle(where: str, data: bytes) -> None:
    """Refuse a pickle whose opcodes ask for more than it holds, before it is unpickled.

    The C unpickler allocates what a length prefix says before reading the bytes
    (BINBYTES8 with 2**40: a MemoryError) and grows its memo to the index a PUT names.
    pickletools.genops reads each counted argument from the bytes themselves, so a length
    past the end is a ValueError here; a memo index larger than the number of opcodes
    before it cannot come from a pickler (each memo entry takes an opcode)."""
    try:
        for n, (op, arg, pos) in enumerate(pickletools.genops(data)):
            if op.name in MEMO_PUTS and isinstance(arg, int) and arg > n:
                raise ValueError(f"at position {pos}, {op.name} names memo entry {arg} after {n} opcodes")
    except ValueError as err:
        raise UserError(f"{where}: refused to unpickle: {err}; {NOT_OFFICIAL}") from None
