"""Full-size look-alikes of the upstream archives, for the benchmark's prepare section: an
aclImdb archive of 50K reviews with IMDB's length distribution (`IMDB_LOGN`) and 60K + 10K
MNIST-format images. Their content is not learnable: they time `prepare` and size its
output.

    python -m psrnn bench --only prepare
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from psrnn import files
from psrnn.studies.private_shared.data.archives import idx_files, tar_gz_bytes

# Review lengths: log-normal with median e^6.98 = 1075 and sigma 0.63, clipped to the real
# corpus's [52, 13704] characters: mean ~1310 characters overall, ~89 % of reviews >= 500
# characters and a mean ~1430 of those (the paper's 22.2K kept reviews and 1430 steps).
IMDB_LOGN = (6.98, 0.63)
IMDB_CLIP = (52, 13_704)
FULL_SIZE_LEVEL = 6  # gzip's default: level 9 is much slower on ~100 MB and the bench times this


def imdb_lengths(n: int, rng: np.random.Generator) -> np.ndarray:
    mu, sigma = IMDB_LOGN
    return np.clip(rng.lognormal(mu, sigma, n), *IMDB_CLIP).astype(np.int64)  # (n,)


def write_imdb_like(path: Path, reviews_per_split: int, seed: int = 0) -> dict[str, Any]:
    """An aclImdb_v1.tar.gz look-alike: {train,test}/{pos,neg}/<id>_<rating>.txt with
    reviews_per_split reviews per split (half per class) of IMDB-like lengths; word soup
    from a Zipf vocabulary with IMDB's punctuation and <br /> tags, so that the character
    statistics (and so the 60-symbol alphabet) look like English text. Returns counts and
    the archive's size in MiB."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    freq = np.array(
        [
            12.7,
            9.1,
            8.2,
            7.5,
            7.0,
            6.7,
            6.3,
            6.1,
            6.0,
            4.3,
            4.0,
            2.8,
            2.8,
            2.4,
            2.4,
            2.2,
            2.0,
            2.0,
            1.9,
            1.5,
            1.0,
            0.8,
            0.15,
            0.15,
            0.1,
            0.07,
        ]
    )
    words = [
        "".join(rng.choice(letters, size=int(k), p=freq / freq.sum())) for k in rng.integers(1, 11, 4000)
    ]
    words += [w.capitalize() for w in words[:1500:3]]  # sentence starts and names
    # rarer symbols real reviews have, so that the alphabet fills its 60 symbols
    words += [
        "(1999)",
        "7/10",
        "3/10",
        '"great"',
        "it's",
        "don't",
        "-",
        "--",
        "...",
        ":",
        ";",
        "&",
        "$5",
        "100%",
        "#1",
        "café",
        "über",
        "señor",
        "Zoë",
        "[sic]",
        "*",
        "Q&A",
        "e-mail",
        "X-Men",
        "JFK",
        "UK",
        "TV",
        "DVD",
        "OK",
        "WWII",
        "Y2K",
        "B+",
        "Jr.",
        "4",
        "8",
        "6",
        "2",
    ]
    vocab = np.array(
        [w + sep for w in words for sep in (" ", ", ", ". ", " ", "! ", "? ", " ")], dtype=object
    )
    rng.shuffle(vocab)
    zipf = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    n = 2 * reviews_per_split
    lengths = imdb_lengths(n, rng)
    chunks = rng.choice(len(vocab), size=int(lengths.sum() // 4) + 1000, p=zipf / zipf.sum())
    text = "".join(vocab[chunks].tolist())
    text = text.replace("x. ", "x.<br /><br />")  # IMDB's line breaks, ~ every few hundred chars
    members: dict[str, bytes] = {}
    pos = 0
    for i in range(n):
        split = "train" if i < reviews_per_split else "test"
        j = i % reviews_per_split
        label = "pos" if j % 2 else "neg"
        rating = int(rng.integers(7, 11) if label == "pos" else rng.integers(1, 5))
        body = text[pos : pos + int(lengths[i])]
        members[f"aclImdb/{split}/{label}/{j // 2}_{rating}.txt"] = body.encode("utf-8")
        pos = (pos + int(lengths[i])) % max(len(text) - IMDB_CLIP[1], 1)
    files.write_bytes(path, tar_gz_bytes(members, FULL_SIZE_LEVEL))
    return {
        "reviews": n,
        "chars": int(lengths.sum()),
        "mean_chars": float(lengths.mean()),
        "archive_mb": path.stat().st_size / 2**20,
    }


def write_idx_like(folder: Path, n_train: int, n_test: int, seed: int = 0) -> dict[str, Any]:
    """MNIST-format gzipped IDX files (28 x 28 uint8, labels 0..9): strokes on black, so the
    files compress about like MNIST's. Returns the image count and the files' size in MiB."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:28, 0:28]
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = np.empty((n, 28, 28), dtype=np.uint8)
        for i in range(0, n, 5000):  # rings of random centre, radius and thickness
            m = min(5000, n - i)
            c = rng.uniform(9, 19, (m, 2, 1, 1))
            radius = rng.uniform(4, 9, (m, 1, 1))
            d = np.hypot(yy - c[:, 0], xx - c[:, 1])  # (m, 28, 28)
            ink = np.clip(1.6 - np.abs(d - radius), 0, 1)  # (m, 28, 28)
            images[i : i + m] = (ink * 255).astype(np.uint8)
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        for name, data in idx_files(prefix, images, labels, FULL_SIZE_LEVEL).items():
            files.write_bytes(folder / name, data)
    return {"images": n_train + n_test, "archive_mb": sum(p.stat().st_size for p in folder.iterdir()) / 2**20}
