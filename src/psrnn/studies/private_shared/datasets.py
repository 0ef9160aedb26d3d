"""The dataset registry: one row of facts per dataset; everything else asks this table.

    from psrnn.studies.private_shared.datasets import REGISTRY
    REGISTRY["cifar10"].steps({"downsample": 16})           # 256 steps (of 3 values)
    REGISTRY["imdb"].input_features({"alphabet_size": 40})  # 40 symbols per step

A row says what the model sees (input kind, values per step, classes), how large the
official sets are, and the defaults of the dataset's preparation, which a suite config's
`datasets.<name>.prepare` overrides (data/README.md explains each choice). Derived from
it: `config.DATASETS` and `config.min_length`, `prepare.DEFAULTS`, the parameter counts
of `python -m psrnn config --params`. Each dataset also has a source
(`data/sources.py`), a reader (`data/readers.py`), a preparer (`data/prepare.py`) and a
fixture (`data/fixtures.py`); tests/test_datasets.py checks that all of them cover
exactly these rows and that prepared fixture data matches them.

Imported by the Snakefile at parse time and by every job: standard library only (the
package `psrnn.studies.private_shared.data` imports torch, hence this module sits outside it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Dataset:
    """One dataset's facts. `prepare` arguments are `datasets.<name>.prepare` of a suite config."""

    name: str
    input: str  # "continuous": 8-bit values, scaled to [0, 1] | "categorical": symbol indices
    features: int  # values per step (image channels); text: prepare's default alphabet size (incl. unknown)
    classes: int
    official_train: int  # sequences in the official training set
    official_test: int  # sequences in the official test set
    valid_size: int | None  # prepare's default: training sequences moved (seeded) to validation
    # --- images: one pixel per step, row-major -------------------------------------------
    image_side: int | None = None  # H = W of the official images; steps = side ** 2 before any downsample
    # --- text: one character per step ----------------------------------------------------
    min_chars: int = 0  # prepare's default: texts shorter than this are dropped (train and test)
    lowercase: bool = False  # prepare's default: lowercase before building the alphabet
    train_size: int | None = None  # prepare's default: kept training texts to train on, the rest validate
    filtered_train: int | None = None  # official training texts left after the default min_chars filter
    # texts may be shorter than the auxiliary windows (the targets outside a text are
    # masked, models.py), so the config does not check a window against a length
    short_texts: bool = False

    def steps(self, prepare: dict[str, Any] | None = None) -> int | None:
        """Steps of every sequence (images); None for ragged text."""
        if self.image_side is None:
            return None
        return ((prepare or {}).get("downsample") or self.image_side) ** 2

    def input_features(self, prepare: dict[str, Any] | None = None) -> int:
        """Values per step as the model sees them: text's alphabet may be set by the config."""
        if self.input == "categorical":
            return (prepare or {}).get("alphabet_size") or self.features
        return self.features

    def min_length(self, prepare: dict[str, Any] | None = None) -> int:
        """The shortest sequence the prepared data can hold (for the config's window checks):
        images have a fixed length, text is filtered to min_chars and cut at max_length;
        1 where short texts are allowed."""
        opts = prepare or {}
        if self.image_side is not None:
            return self.steps(opts)
        if self.short_texts:
            return 1
        return min(opts.get("min_chars", self.min_chars), opts.get("max_length") or 10**9)

    @property
    def split_pool(self) -> int:
        """Training sequences the default train/valid split draws from (without the data at hand)."""
        return self.filtered_train or self.official_train


# MNIST and Fashion-MNIST: 28 x 28 grey images, 10 classes, 60K + 10K, 10K for validation
DIGIT_LIKE: dict[str, Any] = dict(
    input="continuous",
    features=1,
    classes=10,
    image_side=28,
    official_train=60_000,
    official_test=10_000,
    valid_size=10_000,
)

# The paper's Table 1 with our readings of its open points (src/psrnn/data/prepare.py).
REGISTRY: dict[str, Dataset] = {
    ds.name: ds
    for ds in (
        Dataset("mnist", **DIGIT_LIKE),  # 50K / 10K / 10K
        Dataset("fmnist", **DIGIT_LIKE),  # Fashion-MNIST: MNIST's shapes and sizes
        Dataset(
            "cifar10",
            input="continuous",
            features=3,
            classes=10,
            image_side=32,  # RGB per step
            official_train=50_000,
            official_test=10_000,
            valid_size=5_000,
        ),  # 45K / 5K / 10K
        Dataset(
            "imdb",
            input="categorical",
            features=60,
            classes=2,
            official_train=25_000,
            official_test=25_000,
            valid_size=None,
            min_chars=500,
            train_size=20_000,  # paper: reviews >= 500 characters, 20K train
            filtered_train=22_200,
        ),  # Table 1: 20K train + 2.2K valid kept
        Dataset(
            "dbpedia",
            input="categorical",
            features=70,
            classes=14,
            official_train=560_000,
            official_test=70_000,
            valid_size=14_000,
            lowercase=True,  # as Zhang et al. (2015)
            short_texts=True,
        ),  # abstracts are short and ragged (thesis)
    )
}
