"""Where each dataset's upstream archives live, and their checksums.

    python -m psrnn download mnist --config config/paper.yaml   # uses these sources

One `Source` per dataset: the upstream file names (kept as local names under
`data/<name>/raw/<dataset>/`), the expected md5 of each, and the official URLs tried in
order. MNIST, Fashion-MNIST and CIFAR-10 come from torchvision's own tables so the
checksums are not re-typed here. A URL may carry its own md5: the fast.ai copy of
DBpedia is a re-packed archive with other bytes than the original release.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchvision.datasets import CIFAR10, MNIST, FashionMNIST


@dataclass(frozen=True)
class Url:
    """One place an upstream file can be fetched from."""

    url: str
    md5: str | None = None  # this URL's own checksum when its bytes differ from the official file


@dataclass(frozen=True)
class Source:
    """A dataset's upstream files: local name -> md5, and local name -> official URLs."""

    dataset: str
    md5: dict[str, str]  # upstream file name -> md5 of the official archive
    urls: dict[str, tuple[Url, ...]]  # upstream file name -> official URLs, tried in order
    homepage: str = ""
    note: str = ""
    sizes: dict[str, int] = field(default_factory=dict)  # bytes, for messages only

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(self.md5)


def _from_mirrors(
    dataset: str, mirrors: list[str], resources: list[tuple[str, str]], homepage: str
) -> Source:
    return Source(
        dataset=dataset,
        md5={name: md5 for name, md5 in resources},
        urls={name: tuple(Url(base + name) for base in mirrors) for name, _ in resources},
        homepage=homepage,
    )


# Zhang et al. (2015) released DBpedia as dbpedia_csv.tar.gz in a Google Drive folder;
# torchtext and most loaders use this file id and md5. `confirm=t` skips Drive's
# "cannot scan this file for viruses" page that large files get.
DBPEDIA_DRIVE = "https://drive.google.com/uc?export=download&id=0Bz8a_Dbh9QhbQ2Vic1kxMmZZQ1k&confirm=t"
# fast.ai re-packed the same folder as dbpedia_csv.tgz: 68,341,743 bytes, md5 from
# fastai's fastai/data/checks.txt. Same CSV files, other archive bytes.
DBPEDIA_FASTAI = Url(
    "https://s3.amazonaws.com/fast-ai-nlp/dbpedia_csv.tgz", md5="239c7837b9e79db34486f3de6a00e38e"
)

SOURCES: dict[str, Source] = {
    "mnist": _from_mirrors("mnist", MNIST.mirrors, MNIST.resources, "http://yann.lecun.com/exdb/mnist/"),
    "fmnist": _from_mirrors(
        "fmnist",
        FashionMNIST.mirrors,
        FashionMNIST.resources,
        "https://github.com/zalandoresearch/fashion-mnist",
    ),
    "cifar10": Source(
        dataset="cifar10",
        md5={CIFAR10.filename: CIFAR10.tgz_md5},
        urls={CIFAR10.filename: (Url(CIFAR10.url),)},
        homepage="https://www.cs.toronto.edu/~kriz/cifar.html",
        sizes={CIFAR10.filename: 170_498_071},
    ),
    "imdb": Source(
        dataset="imdb",
        md5={"aclImdb_v1.tar.gz": "7c2ac02c03563afcf9b574c7e56c153a"},
        urls={"aclImdb_v1.tar.gz": (Url("https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"),)},
        homepage="https://ai.stanford.edu/~amaas/data/sentiment/",
        sizes={"aclImdb_v1.tar.gz": 84_125_825},
    ),
    "dbpedia": Source(
        dataset="dbpedia",
        md5={"dbpedia_csv.tar.gz": "dca7b1ae12b1091090db52aa7ec5ca64"},
        urls={"dbpedia_csv.tar.gz": (Url(DBPEDIA_DRIVE), DBPEDIA_FASTAI)},
        homepage="https://arxiv.org/abs/1509.01626",
        note="Zhang, Zhao & LeCun (2015) character-level text classification release",
        sizes={"dbpedia_csv.tar.gz": 68_341_698},
    ),
}


def source(dataset: str) -> Source:
    if dataset not in SOURCES:
        from psrnn.errors import UserError

        raise UserError(f"unknown dataset {dataset!r}; known: {', '.join(SOURCES)}")
    return SOURCES[dataset]
