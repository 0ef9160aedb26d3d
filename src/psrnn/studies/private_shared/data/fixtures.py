"""Small synthetic archives in the exact upstream formats, for tests and CI (no network).

    python -m psrnn fixtures data/fixtures                # all five datasets
    python -m psrnn fixtures /tmp/fx --datasets imdb

Writes `<dir>/<dataset>/<upstream file names>` plus `<dir>/<dataset>/MD5SUMS`:
- mnist, fmnist: the four gzipped IDX files (1200 train / 300 test images, 28 x 28)
- cifar10: cifar-10-python.tar.gz with cifar-10-batches-py/data_batch_1..5, test_batch,
  batches.meta (pickled dicts with b"data" / b"labels" like upstream; 1200 / 300 images)
- imdb: aclImdb_v1.tar.gz with aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt,
  train/unsup, README, imdb.vocab (603 / 202 labelled reviews, 20 unlabelled)
- dbpedia: dbpedia_csv.tar.gz with dbpedia_csv/{train,test}.csv, classes.txt, readme.txt
  (14 classes, 60 / 15 rows per class)
The content is learnable: class-dependent shapes, intensities and colours plus noise for
images; class-dependent words among neutral filler for texts (IMDB reviews of 150 to
~1500 characters, a quarter under 500, with non-ASCII characters). Prepared with the small
config's options (14 x 14 images, 400 training sequences, texts cut to 200 / 100
characters), a 32-unit GRU read-out of the last state (Adam 0.01, batch 50) reaches on
validation after 6 epochs: mnist 0.63, fmnist 0.37, cifar10 0.76, imdb 0.78, dbpedia 0.24
(chance 0.10, 0.10, 0.10, 0.50, 0.07). The bytes are
deterministic (seeded generators, gzip mtime 0, fixed tar metadata), so MD5SUMS is stable
for a given numpy/zlib (psrnn.studies.private_shared.data.archives); the whole set is about 1 MB and takes a
second or two.

Full-size look-alikes for the benchmark's prepare section are in psrnn.studies.private_shared.data.lookalikes.
"""

from __future__ import annotations

import argparse
import csv
import io
import pickle
from pathlib import Path

import numpy as np

from psrnn import files
from psrnn.studies.private_shared.data.archives import (  # noqa: F401 (re-exports)
    TAR_MTIME,
    gzip_bytes,
    idx_bytes,
    idx_files,
    md5sums,
    tar_gz_bytes,
)
from psrnn.studies.private_shared.data.lookalikes import imdb_lengths, write_idx_like, write_imdb_like  # noqa: F401 (re-exports)

DATASETS = ("mnist", "fmnist", "cifar10", "imdb", "dbpedia")


# --- images ------------------------------------------------------------------------------


def gray_images(rng: np.random.Generator, n: int, style: str) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (n, 28, 28), labels (n,): one class-dependent shape + salt noise.

    The shape runs from row 3 to the bottom, so the class is still visible in the last
    steps a sequential model reads (tiny models learn it within a few epochs).
    "digits" (mnist): a vertical bar that moves right and brightens with the class.
    "garments" (fmnist): a centred striped block that widens and darkens.
    """
    y = rng.integers(0, 10, n).astype(np.uint8)
    img = np.zeros((n, 28, 28), dtype=np.uint8)
    jitter = rng.integers(-1, 2, n)
    level = rng.integers(-6, 7, n)
    for i, c in enumerate(y):
        if style == "digits":
            c0 = 2 + 2 * c + jitter[i]
            img[i, 3:28, c0 : c0 + 6] = 90 + 18 * c + level[i]
        else:
            half = 3 + c + jitter[i]
            img[i, 3:28, 14 - half : 14 + half] = 250 - 15 * c + level[i]
            img[i, 5:26:4, 14 - half + 2 : 14 + half - 2] = 0  # dark stripes inside
    salt = rng.random((n, 28, 28)) < 0.03
    img[salt] = rng.integers(0, 60, int(salt.sum()))
    return img, y


PALETTE = np.array(
    [
        [240, 60, 60],
        [60, 220, 60],
        [60, 80, 240],
        [240, 230, 60],
        [230, 60, 230],
        [60, 230, 230],
        [250, 150, 40],
        [150, 60, 230],
        [240, 240, 240],
        [150, 100, 40],
    ]
)


def colour_images(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (n, 3, 32, 32) (CIFAR's channel-first layout), labels (n,).

    A dark random background and a 10-pixel wide band of the class's colour from a
    class-dependent row to the bottom, at a class-dependent column (plus jitter), with
    colour noise, then salt noise.
    """
    y = rng.integers(0, 10, n)
    img = np.zeros((n, 3, 32, 32), dtype=np.int64)
    img += rng.integers(0, 80, (n, 3, 1, 1))
    for i, c in enumerate(y):
        r0 = 2 + c + int(rng.integers(-2, 3))
        c0 = 2 + 2 * c + int(rng.integers(-2, 3))
        r0, c0 = max(r0, 0), max(c0, 0)
        img[i, :, r0:32, c0 : c0 + 10] = (PALETTE[c] + rng.integers(-15, 16, 3))[:, None, None]
    salt = rng.random((n, 1, 32, 32)) < 0.02
    img = np.where(salt, rng.integers(0, 256, (n, 3, 32, 32)), img)
    return img.clip(0, 255).astype(np.uint8), y


def mnist_like(style: str, seed: int) -> dict[str, bytes]:
    rng = np.random.default_rng(seed)
    out = {}
    for prefix, n in (("train", 1200), ("t10k", 300)):
        out.update(idx_files(prefix, *gray_images(rng, n, style)))
    return out


CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def cifar10() -> dict[str, bytes]:
    rng = np.random.default_rng(10)
    members = {}

    def batch(label: str, n: int, tag: str) -> bytes:
        x, y = colour_images(rng, n)
        d = {
            b"batch_label": label.encode(),
            b"labels": [int(v) for v in y],
            b"data": x.reshape(n, 3 * 32 * 32),  # (n, 3072): 1024 R, 1024 G, 1024 B
            b"filenames": [f"{tag}_{i:05d}.png".encode() for i in range(n)],
        }
        return pickle.dumps(d, protocol=2)

    for k in range(1, 6):
        members[f"cifar-10-batches-py/data_batch_{k}"] = batch(f"training batch {k} of 5", 240, f"train{k}")
    members["cifar-10-batches-py/test_batch"] = batch("testing batch 1 of 1", 300, "test")
    members["cifar-10-batches-py/batches.meta"] = pickle.dumps(
        {b"num_cases_per_batch": 240, b"label_names": [c.encode() for c in CIFAR_CLASSES], b"num_vis": 3072},
        protocol=2,
    )
    members["cifar-10-batches-py/readme.html"] = b"<html>synthetic CIFAR-10 fixture</html>\n"
    return {"cifar-10-python.tar.gz": tar_gz_bytes(members)}


# --- text --------------------------------------------------------------------------------

# Positive words lean on z/x/q/j, negative ones on w/k: a character model can pick the
# class up from letter statistics long before it learns whole words.
POS = [
    "amazing",
    "dazzling",
    "exquisite",
    "jazzy",
    "zesty",
    "quixotic",
    "zippy",
    "sizzling",
    "exuberant",
    "majestic",
    "joyous",
    "jazzed",
]
NEG = [
    "awful",
    "weak",
    "awkward",
    "wreck",
    "bleak",
    "wonky",
    "wooden",
    "kitsch",
    "worthless",
    "tacky",
    "weird",
    "wasted",
]
FILLER = (
    "the film plot actor scene movie story director camera music ending cast dialogue "
    "this that and but it really though some moments character script pacing score "
    "editing performance sound set design felt seemed is as on for of in a an one "
    "its role lead part second half opening time place people audience hour"
).split()
NAMES = [
    "Meryl Streep",
    "Tom Hanks",
    "Bruce Willis",
    "Kate Winslet",
    "Quentin Tarantino",
    "Penélope Cruz",
    "Amélie Poulain",
    "Zoë Kravitz",
    "Jean Dujardin",
    "Björk",
    "Yves Montand",
    "Gérard Depardieu",
    "Ursula Andress",
    "Hugh Grant",
    "Liv Ullmann",
    "Olivia Colman",
    "Viggo Mortensen",
]
EXTRAS = [
    " <br /><br />",
    " (1999)",
    " (2006)",
    ' "Citizen Kane"',
    " 7/10",
    " 3/10",
    " — the café scene",
    " a naïve twist…",
    " it’s",
    " 48 minutes",
    " 5 stars",
    " über-cool",
    " señor",
    " & more;",
    " [sic]",
    " :-)",
    " #1",
    " $2",
    " 100%",
]


def sentence(rng: np.random.Generator, label: int) -> str:
    words = list(rng.choice(FILLER, int(rng.integers(4, 10))))
    if rng.random() < 0.95:  # a class word, from the other class 10% of the time
        own = label if rng.random() < 0.9 else 1 - label
        words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(POS if own else NEG)))
    if rng.random() < 0.25:
        words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(NAMES)))
    text = " ".join(words)
    text = text[0].upper() + text[1:]
    if rng.random() < 0.3:
        text += str(rng.choice(EXTRAS))
    return text + str(rng.choice([".", ".", ".", "!", "?", "..."]))


def review(rng: np.random.Generator, label: int, length: int) -> str:
    """A review of about `length` characters (always < 500 when length < 500)."""
    parts: list[str] = []
    while sum(len(p) + 1 for p in parts) < length:
        parts.append(sentence(rng, label))
    text = " ".join(parts)
    if length < 500 and len(text) >= 500:
        text = " ".join(parts[:-1]) or parts[0][:length]
    return text


def imdb() -> dict[str, bytes]:
    rng = np.random.default_rng(7)
    members: dict[str, bytes] = {}
    for split, n in (("train", 300), ("test", 100)):
        for label, name in ((0, "neg"), (1, "pos")):
            for i in range(n):
                short = rng.random() < 0.25
                length = int(rng.integers(150, 500) if short else rng.integers(500, 1500))
                text = review(rng, label, length)
                rating = int(rng.integers(1, 5) if label == 0 else rng.integers(7, 11))
                members[f"aclImdb/{split}/{name}/{i}_{rating}.txt"] = text.encode("utf-8")
    # edge cases of the 500-character filter (characters, not bytes)
    edge = {
        "aclImdb/train/pos/300_9.txt": 500,
        "aclImdb/train/neg/300_2.txt": 499,
        "aclImdb/test/pos/100_8.txt": 500,
        "aclImdb/test/neg/100_1.txt": 499,
    }
    for path, length in edge.items():
        label = int("/pos/" in path)
        members[path] = (review(rng, label, 700) * 2)[:length].encode("utf-8")
    # 480 characters but more than 500 bytes in UTF-8: must be filtered out
    accented = ("Très émouvant, café crème à côté. " * 20)[:480]
    members["aclImdb/train/pos/301_10.txt"] = accented.encode("utf-8")
    assert len(accented.encode("utf-8")) > 500
    for i in range(20):
        text = review(rng, int(rng.integers(0, 2)), int(rng.integers(300, 1200)))
        members[f"aclImdb/train/unsup/{i}_0.txt"] = text.encode("utf-8")
    vocab = sorted({w for w in [*FILLER, *POS, *NEG]})
    members["aclImdb/imdb.vocab"] = ("\n".join(vocab) + "\n").encode()
    members["aclImdb/README"] = (
        b"Synthetic Large Movie Review Dataset fixture (psrnn).\n"
        b"Same layout as aclImdb v1.0: train/{pos,neg,unsup}, test/{pos,neg},\n"
        b"files <id>_<rating>.txt, ratings 1-4 negative, 7-10 positive.\n"
    )
    return {"aclImdb_v1.tar.gz": tar_gz_bytes(members)}


DBPEDIA_CLASSES = [
    "Company",
    "EducationalInstitution",
    "Artist",
    "Athlete",
    "OfficeHolder",
    "MeanOfTransportation",
    "Building",
    "NaturalPlace",
    "Village",
    "Animal",
    "Plant",
    "Album",
    "Film",
    "WrittenWork",
]
DBPEDIA_WORDS = [
    ["company", "founded", "headquartered", "subsidiary", "corporation"],
    ["school", "university", "students", "college", "campus"],
    ["singer", "painter", "musician", "songwriter", "artist"],
    ["footballer", "player", "league", "olympic", "athlete"],
    ["politician", "elected", "minister", "senator", "served"],
    ["ship", "aircraft", "locomotive", "vessel", "engine"],
    ["building", "tower", "historic", "built", "architect"],
    ["mountain", "river", "lake", "peak", "glacier"],
    ["village", "population", "district", "county", "municipality"],
    ["species", "moth", "genus", "beetle", "snail"],
    ["plant", "flowering", "shrub", "endemic", "herb"],
    ["album", "released", "recorded", "tracks", "studio"],
    ["film", "directed", "starring", "comedy", "drama"],
    ["novel", "book", "published", "author", "magazine"],
]
SYLLABLES = ["ka", "lo", "mer", "ta", "vin", "sul", "dor", "en", "bra", "ki", "no", "zel"]
PLACES = [
    "Zürich",
    "São Paulo",
    "Québec",
    "Kraków",
    "Reykjavík",
    "the United States",
    "England",
    "Ontario",
    "New South Wales",
    "Bavaria",
]


def abstract(rng: np.random.Generator, label: int) -> tuple[str, str]:
    """(title, abstract): class words mixed into filler, the last sentence names the class
    word again (so a small model can read the class off the last characters)."""
    title = " ".join(
        "".join(rng.choice(SYLLABLES, int(rng.integers(2, 4)))).capitalize()
        for _ in range(int(rng.integers(1, 3)))
    )
    parts = [f"{title} is a {rng.choice(DBPEDIA_WORDS[label])} in {rng.choice(PLACES)}."]
    target = int(rng.integers(80, 450))
    while len(" ".join(parts)) < target:  # short sentences: a class word every ~30 characters
        words = list(rng.choice(FILLER, int(rng.integers(2, 5))))
        words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(DBPEDIA_WORDS[label])))
        if rng.random() < 0.15:
            words.append('"so-called", one of its kind')
        parts.append(" ".join(words).capitalize() + ".")
    parts.append(f"It is a {rng.choice(DBPEDIA_WORDS[label])}.")
    return title, " " + " ".join(parts)  # upstream abstracts start with a space


def dbpedia() -> dict[str, bytes]:
    rng = np.random.default_rng(14)
    members = {}
    for split, n in (("train", 60), ("test", 15)):
        buf = io.StringIO()
        writer = csv.writer(buf, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
        for label in range(len(DBPEDIA_CLASSES)):  # upstream rows are sorted by class
            for _ in range(n):
                writer.writerow([label + 1, *abstract(rng, label)])
        members[f"dbpedia_csv/{split}.csv"] = buf.getvalue().encode("utf-8")
    members["dbpedia_csv/classes.txt"] = ("\n".join(DBPEDIA_CLASSES) + "\n").encode()
    members["dbpedia_csv/readme.txt"] = (
        b"Synthetic DBpedia Ontology Classification Dataset "
        b"fixture (psrnn): 14 classes, class,title,content.\n"
    )
    return {"dbpedia_csv.tar.gz": tar_gz_bytes(members)}


BUILDERS = {
    "mnist": lambda: mnist_like("digits", 1),
    "fmnist": lambda: mnist_like("garments", 2),
    "cifar10": cifar10,
    "imdb": imdb,
    "dbpedia": dbpedia,
}


def fixture_files(dataset: str) -> dict[str, bytes]:
    """{upstream file name: bytes, "MD5SUMS": md5sum-format text} for one dataset."""
    blobs = BUILDERS[dataset]()
    return {**blobs, "MD5SUMS": md5sums(blobs).encode()}


def write_fixtures(out_dir: str | Path, datasets: tuple[str, ...] = DATASETS) -> dict[str, dict[str, int]]:
    """Write `<out_dir>/<dataset>/...` for each dataset; return {dataset: {file: bytes}}."""
    out = {}
    for ds in datasets:
        blobs = fixture_files(ds)
        for name, data in blobs.items():
            files.write_bytes(Path(out_dir) / ds / name, data)
        out[ds] = {name: len(data) for name, data in blobs.items()}
    return out


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="output folder; gets one sub-folder per dataset")
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))


def run(args: argparse.Namespace) -> int:
    sizes = write_fixtures(args.dir, tuple(args.datasets))
    for ds, blobs in sizes.items():
        print(
            f"{ds}: {', '.join(n for n in blobs)} ({sum(blobs.values()) / 1e3:.0f} kB) "
            f"-> {Path(args.dir) / ds}"
        )
    return 0
