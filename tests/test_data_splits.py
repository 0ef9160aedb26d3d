"""What `train` accepts of a prepared folder beyond readable split files (fault battery C,
cases C77-C81, C84, C85): each split agrees with manifest.json (dtype, steps, labels,
symbols, class balance), the manifest's values are sane, and each split file is the one
`prepare` wrote (splits.sha256). Each damaged folder is built here from a fixture prepared
by `prepare` and stops `train` with one line naming the file and what is wrong, before any
run folder exists. A folder without splits.sha256 or its manifest line (older psrnn's, or
the checksums deleted) is refused with the same `prepare` command, which writes the same
manifest.json again."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import re
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from psrnn import config as C
from psrnn.cli import main
from psrnn.errors import UserError
from psrnn.files import read_sha256sums
from psrnn.studies.private_shared.data import load_split, read_manifest
from psrnn.studies.private_shared.data import prepare as P
from psrnn.studies.private_shared.data.checks import CHECKSUMS, read_checksums
from psrnn.studies.private_shared.data.fixtures import write_fixtures
from psrnn.studies.private_shared.data.store import seal

# MNIST at 7 x 7 = 49 steps as in the battery; IMDB with an alphabet of 40 as in C85
OPTIONS = {
    "mnist": {"downsample": 7, "valid_size": 100, "train": 60, "test": 60},
    "imdb": {"valid_size": 50, "alphabet_size": 40, "max_length": 100, "train": 40, "test": 40},
}


def rerun(dataset: str) -> str:
    return f"re-run `python -m psrnn prepare {dataset} --config <suite.yaml>`"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> dict[str, Path]:
    """{dataset: folder} prepared from the fixture archives by the current `prepare`."""
    root = tmp_path_factory.mktemp("splits")
    write_fixtures(root / "fx", tuple(OPTIONS))
    for name, opts in OPTIONS.items():
        P.prepare(name, root / "fx" / name, root / "prepared" / name, opts)
    return {name: root / "prepared" / name for name in OPTIONS}


@pytest.fixture()
def mnist(fresh, tmp_path) -> Path:
    """A copy of the prepared MNIST folder to damage."""
    return Path(shutil.copytree(fresh["mnist"], tmp_path / "data" / "prepared" / "mnist"))


@pytest.fixture()
def imdb(fresh, tmp_path) -> Path:
    return Path(shutil.copytree(fresh["imdb"], tmp_path / "data" / "prepared" / "imdb"))


def train(data: Path, tmp_path: Path, capsys, dataset: str = "mnist") -> tuple[int, list[str]]:
    """`psrnn train` of a 4-unit model for one epoch on `data`: (rc, stderr lines)."""
    run_yaml = tmp_path / "run.yaml"
    settings = {"hidden": 4, "window": 3, "anchors": 1, "max_epochs": 1, "batch_size": 16}
    if dataset == "imdb":
        settings.update(window=2, tasks=["pred"])
    run_yaml.write_text(
        yaml.safe_dump({"dataset": dataset, "data_dir": str(data), "progress": "plain", **settings})
    )
    capsys.readouterr()
    rc = main(["train", "-q", "--config", str(run_yaml), "--out", str(tmp_path / "run" / "a")])
    return rc, capsys.readouterr().err.strip().splitlines()


def refused(data: Path, tmp_path: Path, capsys, dataset: str = "mnist") -> str:
    """The one line `train` stops with; no run folder (so no metrics.json) is written."""
    rc, lines = train(data, tmp_path, capsys, dataset)
    assert rc == 2 and len(lines) == 1 and "Traceback" not in lines[0], lines
    assert not (tmp_path / "run").exists()
    return lines[0].removeprefix("psrnn train: error: ")


def edit_manifest(data: Path, **changes) -> None:
    m = json.loads((data / "manifest.json").read_text())
    for key, value in changes.items():
        target = m
        *parents, last = key.split(".")
        for parent in parents:
            target = target[parent]
        target[last] = value
    (data / "manifest.json").write_text(json.dumps(m))


def load(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


# --- the battery's cases -----------------------------------------------------------------


def test_c77_test_rows_copied_onto_train_with_the_count_edited(mnist, tmp_path, capsys):
    shutil.copyfile(mnist / "test.pt", mnist / "train.pt")
    edit_manifest(mnist, **{"counts.train": len(load(mnist / "test.pt")["y"])})
    assert refused(mnist, tmp_path, capsys) == (
        f"{mnist / 'train.pt'} is not the file prepare wrote (sha256 differs from splits.sha256): "
        f"{rerun('mnist')}"
    )


def test_c78_train_replaced_by_test_rows_of_the_same_count(mnist, tmp_path, capsys):
    n = len(load(mnist / "train.pt")["y"])
    test = load(mnist / "test.pt")
    rows = torch.arange(n) % len(test["y"])  # the test rows (twice where train is larger)
    torch.save({"x": test["x"][rows].clone(), "y": test["y"][rows].clone()}, mnist / "train.pt")
    assert refused(mnist, tmp_path, capsys) == (
        f"{mnist / 'train.pt'} is not the file prepare wrote (sha256 differs from splits.sha256): "
        f"{rerun('mnist')}"
    )
    # with splits.sha256 rewritten over the swapped file too, the class balance still tells
    seal(mnist)
    line = refused(mnist, tmp_path, capsys)
    assert line.startswith(f"{mnist / 'train.pt'} is damaged (labels per class [")
    assert "but manifest.json's class_balance says [" in line and line.endswith(f"): {rerun('mnist')}")


def test_c79_images_not_uint8(mnist, tmp_path, capsys):
    split = load(mnist / "train.pt")
    split["x"] = split["x"].float() * 1000
    torch.save(split, mnist / "train.pt")
    assert refused(mnist, tmp_path, capsys) == (
        f"{mnist / 'train.pt'} is damaged (x is float32, not the prepared uint8): {rerun('mnist')}"
    )


def test_c80_images_of_other_steps_than_the_manifest(mnist, tmp_path, capsys):
    split = load(mnist / "train.pt")
    split["x"] = split["x"][:, :10].clone()
    torch.save(split, mnist / "train.pt")
    assert refused(mnist, tmp_path, capsys) == (
        f"{mnist / 'train.pt'} is damaged (x has 10 steps but manifest.json says 49): {rerun('mnist')}"
    )


def test_c81_labels_not_integers(mnist, tmp_path, capsys):
    split = load(mnist / "train.pt")
    split["y"] = split["y"].float()
    torch.save(split, mnist / "train.pt")
    assert refused(mnist, tmp_path, capsys) == (
        f"{mnist / 'train.pt'} is damaged (y is float32 of shape (60,), not the prepared 1-d int64): "
        f"{rerun('mnist')}"
    )


@pytest.mark.parametrize(
    "change, says",
    [
        ({"scale": 0}, "scale 0: expected a finite number > 0"),  # C84
        ({"scale": -255.0}, "scale -255.0: expected a finite number > 0"),
        ({"num_classes": 1}, "num_classes 1: expected an integer >= 2"),
        ({"features": 0}, "features 0: expected an integer >= 1"),
        ({"input": "pixels"}, "input 'pixels': expected 'continuous' or 'categorical'"),
    ],
)
def test_c84_manifest_values_training_cannot_use(change, says, mnist, tmp_path, capsys):
    edit_manifest(mnist, **change)
    assert (
        refused(mnist, tmp_path, capsys) == f"{mnist / 'manifest.json'} is damaged ({says}): {rerun('mnist')}"
    )


def test_c83_labels_beyond_the_manifests_classes(mnist, tmp_path, capsys):
    edit_manifest(mnist, num_classes=5, classes=list("01234"))
    assert refused(mnist, tmp_path, capsys) == (
        f"{mnist / 'train.pt'} is damaged (labels 0..9 outside 0..4 (manifest.json's num_classes 5)): "
        f"{rerun('mnist')}"
    )


@pytest.mark.parametrize(
    "change",
    [
        {"scale": 1.0},  # N40: 8-bit pixels fed as 0..255 (test_acc 0.08 against 0.065)
        {"num_classes": 11, "classes": [*"0123456789", "x"], "class_balance.train": [6] * 11},  # N42
        {"split_seed": 1},  # any value of the manifest prepare did not write
    ],
)
def test_a_hand_edited_manifest_is_not_the_one_prepare_wrote(change, mnist, tmp_path, capsys):
    """Battery N40/N42/N79: values of manifest.json that size or scale the model, edited by
    hand and consistent with each other, trained with exit 0; splits.sha256 holds the
    manifest's sha256 too now."""
    edit_manifest(mnist, **change)
    assert refused(mnist, tmp_path, capsys) == (
        f"{mnist / 'manifest.json'} is not the file prepare wrote (sha256 differs from {CHECKSUMS}): "
        f"{rerun('mnist')}"
    )


def test_an_edited_alphabet_is_not_the_manifest_prepare_wrote(imdb, tmp_path, capsys):
    m = read_manifest(imdb)
    edit_manifest(imdb, features=m["features"] + 1, alphabet=[*m["alphabet"], "~"])  # N79
    assert refused(imdb, tmp_path, capsys, "imdb") == (
        f"{imdb / 'manifest.json'} is not the file prepare wrote (sha256 differs from {CHECKSUMS}): "
        f"{rerun('imdb')}"
    )


@pytest.mark.parametrize(
    "change, says",
    [
        ({"num_classes": 11}, "num_classes 11 but 10 class names"),
        ({"num_classes": 11, "classes": [*"0123456789", "x"]}, None),
    ],
)
def test_classes_that_disagree_behind_rewritten_checksums(change, says, mnist, tmp_path, capsys):
    """With splits.sha256 rewritten over an edited manifest the manifest's class counts must
    still agree: num_classes with the class names and with each split's class_balance (a list
    of another length had been skipped)."""
    edit_manifest(mnist, **change)
    seal(mnist)
    if says:
        assert (
            refused(mnist, tmp_path, capsys)
            == f"{mnist / 'manifest.json'} is damaged ({says}): {rerun('mnist')}"
        )
    else:
        assert refused(mnist, tmp_path, capsys) == (
            f"{mnist / 'train.pt'} is damaged (manifest.json's class_balance lists 10 classes but "
            f"num_classes says 11): {rerun('mnist')}"
        )


def test_c85_a_symbol_outside_the_alphabet(imdb, tmp_path, capsys):
    assert read_manifest(imdb)["features"] == 40
    split = load(imdb / "train.pt")
    split["x"][5] = 200
    torch.save(split, imdb / "train.pt")
    assert refused(imdb, tmp_path, capsys, "imdb") == (
        f"{imdb / 'train.pt'} is damaged (symbol 200 outside manifest.json's alphabet of 40 (0..39)): "
        f"{rerun('imdb')}"
    )


def test_text_lengths_outside_the_manifests(imdb, tmp_path, capsys):
    split = load(imdb / "valid.pt")
    split["offsets"][1:] += 1000  # the first review 1000 symbols longer
    split["x"] = torch.cat([split["x"], torch.ones(1000, dtype=torch.uint8)])
    torch.save(split, imdb / "valid.pt")
    stats = read_manifest(imdb)["length"]["valid"]
    line = refused(imdb, tmp_path, capsys, "imdb")
    assert line.startswith(f"{imdb / 'valid.pt'} is damaged (sequences of ")
    assert f"steps but manifest.json's lengths run {stats['min']}..{stats['max']})" in line


def test_a_damaged_checksum_file_is_one_line(mnist, tmp_path, capsys):
    (mnist / CHECKSUMS).write_text("not a checksum\n")
    assert refused(mnist, tmp_path, capsys) == (
        f"{mnist / CHECKSUMS} is damaged (line 1 is not '<sha256>  <file>'): {rerun('mnist')}"
    )


@pytest.mark.parametrize("kind", ["folder", "a link to /dev/zero"])
def test_n52_a_split_that_is_no_file_is_named_as_what_it_is(kind, mnist, tmp_path, capsys):
    """Battery C, N52: a train.pt that exists was reported "prepared split not found"; a
    device is never read (/dev/zero has no end)."""
    (mnist / "train.pt").unlink()
    if kind == "folder":
        (mnist / "train.pt").mkdir()
        why = "is a folder, not a file"
    else:
        (mnist / "train.pt").symlink_to("/dev/zero")
        why = "is not a regular file (a device, FIFO or socket)"
    assert refused(mnist, tmp_path, capsys) == f"prepared split {mnist / 'train.pt'} {why}: {rerun('mnist')}"


class _Touch:
    """A pickle that runs a command when loaded without weights_only."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_n53_a_hostile_pickle_is_refused_in_one_line_and_never_run(mnist, tmp_path, capsys):
    """Battery C, N53: torch's two-line UserWarning about the pickle's protocol came before
    the refusal; the refusal is now the only output, and the pickle's code never runs."""
    marker = tmp_path / "ran"
    (mnist / "train.pt").write_bytes(pickle.dumps(_Touch(marker), protocol=4))
    with warnings.catch_warnings(record=True) as caught:  # pytest would keep them off stderr
        warnings.simplefilter("always")
        line = refused(mnist, tmp_path, capsys)
    assert line == (
        f"{mnist / 'train.pt'} is damaged (UnpicklingError: Weights only load failed): {rerun('mnist')}"
    )
    assert [str(w.message) for w in caught] == [] and not marker.exists()


# --- what still loads --------------------------------------------------------------------


def test_the_checksums_are_sha256sum_lines_beside_an_unchanged_manifest(fresh):
    for folder in fresh.values():
        assert read_checksums(folder) == {
            name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
            for name in ("train.pt", "valid.pt", "test.pt", "manifest.json")
        }
        assert (folder / CHECKSUMS).read_text().splitlines()[0].endswith("  train.pt")
        assert "sha256" not in (folder / "manifest.json").read_text()  # the data identity's bytes


MISSING = (
    "is missing (an older psrnn's folder, or deleted; loading checks each file against it, and "
    "prepare writes it beside the same manifest.json, so finished runs stay current)"
)


def test_n50_a_folder_without_checksums_is_refused(mnist, tmp_path, capsys):
    """Deleting splits.sha256 had switched every file check off without a word (battery C,
    N50); an older psrnn's folder has none either."""
    (mnist / CHECKSUMS).unlink()
    assert refused(mnist, tmp_path, capsys) == f"{mnist / CHECKSUMS} {MISSING}: {rerun('mnist')}"


@pytest.mark.parametrize(
    "kind, why",
    [
        ("folder", "is a folder, not a file"),
        ("/dev/zero", "is not a regular file (a device, FIFO or socket)"),
        ("nothing", "not found (a link to nothing)"),
    ],
)
def test_s15_s16_checksums_that_are_no_file_are_named_as_what_they_are(kind, why, mnist, tmp_path, capsys):
    """Battery C, S15/S16: a splits.sha256 that is a folder, or a link to /dev/zero, was
    reported "is missing"; it is named as what it is, and /dev/zero is never read."""
    (mnist / CHECKSUMS).unlink()
    if kind == "folder":
        (mnist / CHECKSUMS).mkdir()
    else:
        (mnist / CHECKSUMS).symlink_to("/dev/zero" if kind == "/dev/zero" else mnist / "gone")
    files = {p.name: p.read_bytes() for p in mnist.iterdir() if p.is_file()}  # all but splits.sha256
    assert refused(mnist, tmp_path, capsys) == f"{mnist / CHECKSUMS} {why}: {rerun('mnist')}"
    assert {p.name: p.read_bytes() for p in mnist.iterdir() if p.is_file()} == files and len(files) == 4
    if kind == "folder":
        assert list((mnist / CHECKSUMS).iterdir()) == []
    else:
        assert os.readlink(mnist / CHECKSUMS) == ("/dev/zero" if kind == "/dev/zero" else str(mnist / "gone"))
    with pytest.raises(ValueError, match=f"^{re.escape(why)}$"):
        read_checksums(mnist)


def test_n48_swapped_splits_with_counts_edited_and_checksums_deleted(mnist, tmp_path, capsys):
    """Battery C, N48: valid.pt as train.pt and back, the manifest's counts swapped to match
    and splits.sha256 deleted had trained on the validation rows. The swapped counts now
    disagree with the options first (W02 below); without them the missing checksums tell."""
    (mnist / "train.pt").rename(mnist / "t.pt")
    (mnist / "valid.pt").rename(mnist / "train.pt")
    (mnist / "t.pt").rename(mnist / "valid.pt")
    m = read_manifest(mnist)
    counts = m["counts"]
    edit_manifest(mnist, **{"counts.train": counts["valid"], "counts.valid": counts["train"]})
    (mnist / CHECKSUMS).unlink()
    assert refused(mnist, tmp_path, capsys) == (
        f"{mnist / 'manifest.json'} is damaged (counts.valid 60 but prepare's options give 100 "
        f"(valid_size 100)): {rerun('mnist')}"
    )
    edit_manifest(mnist, options={**m["options"], "valid_size": 60, "train": 100})
    assert refused(mnist, tmp_path, capsys) == f"{mnist / CHECKSUMS} {MISSING}: {rerun('mnist')}"


def test_w02_swapped_splits_with_counts_balance_and_checksums_rewritten(mnist, tmp_path, capsys):
    """Battery C, W02: N48 with splits.sha256 regenerated (sha256sum) instead of deleted, and
    the class balance swapped too, had trained on the 100 validation rows with rc 0. The
    manifest's options still say how many rows validation has: valid_size 100."""
    (mnist / "train.pt").rename(mnist / "t.pt")
    (mnist / "valid.pt").rename(mnist / "train.pt")
    (mnist / "t.pt").rename(mnist / "valid.pt")
    m = read_manifest(mnist)
    counts, balance = m["counts"], m["class_balance"]
    assert (counts["train"], counts["valid"]) == (60, 100)  # OPTIONS: valid_size 100, train at most 60
    edit_manifest(
        mnist,
        **{"counts.train": counts["valid"], "counts.valid": counts["train"]},
        **{"class_balance.train": balance["valid"], "class_balance.valid": balance["train"]},
    )
    seal(mnist)  # what sha256sum writes
    before = {p.name: p.read_bytes() for p in mnist.iterdir()}
    assert refused(mnist, tmp_path, capsys) == (
        f"{mnist / 'manifest.json'} is damaged (counts.valid 60 but prepare's options give 100 "
        f"(valid_size 100)): {rerun('mnist')}"
    )
    assert {p.name: p.read_bytes() for p in mnist.iterdir()} == before


@pytest.mark.parametrize(
    "dataset, change, says",
    [
        (
            "mnist",
            {"counts.train": 59},
            "counts.train 59 but prepare's options give 60 (1200 training "
            "samples less 100 for validation, at most 60)",
        ),
        (
            "mnist",
            {"counts.test": 61},
            "counts.test 61 but prepare's options give 60 (300 test samples, at most 60)",
        ),
        ("imdb", {"counts.valid": 49}, "counts.valid 49 but prepare's options give 50 (valid_size 50)"),
    ],
)
def test_counts_that_disagree_with_the_options_that_size_them(dataset, change, says, fresh, tmp_path):
    folder = Path(shutil.copytree(fresh[dataset], tmp_path / dataset))
    edit_manifest(folder, **change)
    seal(folder)
    with pytest.raises(UserError) as err:
        read_manifest(folder)
    assert str(err.value) == f"{folder / 'manifest.json'} is damaged ({says}): {rerun(dataset)}"


def test_checksums_without_the_manifests_line_are_refused(mnist, tmp_path, capsys):
    """The splits.sha256 of psrnn before 09277e7eb: split lines only."""
    lines = (mnist / CHECKSUMS).read_text().splitlines()
    kept = [line for line in lines if not line.endswith("manifest.json")]
    (mnist / CHECKSUMS).write_text("".join(f"{line}\n" for line in kept))
    assert refused(mnist, tmp_path, capsys) == (
        f"{mnist / CHECKSUMS} is damaged (no line for manifest.json) (an older psrnn's: prepare writes it "
        f"with that line): {rerun('mnist')}"
    )


def test_s13_a_file_named_on_two_lines_is_refused(mnist, tmp_path, capsys):
    """Battery C, S13: a wrong line for train.pt and the right one after it loaded (the last
    line won) where `sha256sum -c` says FAILED; no line is passed over now."""
    text = (mnist / CHECKSUMS).read_text()
    (mnist / CHECKSUMS).write_text(f"{'0' * 64}  train.pt\n{text}")
    assert refused(mnist, tmp_path, capsys) == (
        f"{mnist / CHECKSUMS} is damaged (line 2 names train.pt again): {rerun('mnist')}"
    )


def test_s04_an_upper_case_digest_is_read_as_sha256sum_reads_it(imdb, tmp_path, capsys):
    """Battery C, S04: `sha256sum -c` accepts a digest in upper case ("train.pt: OK"), and
    psrnn had refused it; a wrong one in upper case is still the file that differs."""
    lines = (imdb / CHECKSUMS).read_text().splitlines()
    upper = [line[:64].upper() + line[64:] if line.endswith("train.pt") else line for line in lines]
    (imdb / CHECKSUMS).write_text("".join(f"{line}\n" for line in upper))
    assert read_checksums(imdb)["train.pt"] == hashlib.sha256((imdb / "train.pt").read_bytes()).hexdigest()
    rc, lines = train(imdb, tmp_path, capsys, "imdb")
    assert rc == 0 and lines == [], lines
    wrong = ["F" * 64 + line[64:] if line.endswith("train.pt") else line for line in upper]
    (imdb / CHECKSUMS).write_text("".join(f"{line}\n" for line in wrong))
    shutil.rmtree(tmp_path / "run")
    assert refused(imdb, tmp_path, capsys, "imdb") == (
        f"{imdb / 'train.pt'} is not the file prepare wrote (sha256 differs from splits.sha256): "
        f"{rerun('imdb')}"
    )


D64, U64 = "0123456789abcdef" * 4, "0123456789ABCDEF" * 4


@pytest.mark.parametrize(
    "text, read",
    [
        (f"{D64}  train.pt\n{D64}  manifest.json\n", {"train.pt": D64, "manifest.json": D64}),
        (f"{U64} *train.pt\r\n", {"train.pt": D64}),  # sha256sum -b's marker, upper case, CRLF
        ("", {}),
        (f"{D64}  train.pt\n{D64}  train.pt\n", "line 2 names train.pt again"),
        (f"{D64}  ./train.pt\n{D64}  train.pt\n", {"./train.pt": D64, "train.pt": D64}),
        (f"\ufeff{D64}  train.pt\n", "line 1 is not '<sha256>  <file>'"),  # a BOM
        (f"{D64}   train.pt\n", "line 1 is not '<sha256>  <file>'"),
        (f"{D64[:63]}  train.pt\n", "line 1 is not '<sha256>  <file>'"),
        (f"{D64}  train.pt\n\n", "line 2 is not '<sha256>  <file>'"),
        (None, None),
        ("folder", "is a folder, not a file"),
    ],
)
def test_planning_and_training_read_splits_sha256_by_one_rule(text, read, tmp_path):
    """The Snakefile's planning (psrnn.files, torch-free) and training (the study's data
    checks) read a splits.sha256 to the same answer: a file that training refuses never
    vouches for an edited manifest.json at planning (battery A-2c's check), and no line
    planning passes over is read by training."""
    path = tmp_path / CHECKSUMS
    if text == "folder":
        path.mkdir()
    elif text is not None:
        path.write_bytes(text.encode())
    answers = []
    for reader in (lambda: read_sha256sums(path), lambda: read_checksums(tmp_path)):
        try:
            answers.append(reader())
        except ValueError as err:
            answers.append(str(err))
    assert answers == [read, read]


SWAP = (("train", "test"), ("test", "train"))


def test_w04_verify_names_a_swap_that_every_check_on_load_passes(fresh, mnist, tmp_path, capsys):
    """Battery C, W04: train.pt and test.pt of equal size swapped, the manifest's counts
    consistent and splits.sha256 written again pass every check on load (each file agrees
    with the others); `prepare --verify` prepares again from the archives and names them.
    It writes nothing in the folder, and leaves no temporary folder."""
    raw = fresh["mnist"].parents[1] / "fx" / "mnist"
    sets = [arg for k, v in OPTIONS["mnist"].items() for arg in ("--set", f"{k}={v}")]
    argv = ["prepare", "mnist", "--raw", str(raw), "--out", str(mnist), "--verify", *sets]
    capsys.readouterr()
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == (
        f"verified: {mnist} is what prepare writes from {raw} (train.pt, valid.pt, test.pt, manifest.json)"
    )
    m = read_manifest(mnist)
    assert m["counts"]["train"] == m["counts"]["test"] == 60  # equal sizes: the counts stay true
    (mnist / "train.pt").rename(mnist / "t")
    (mnist / "test.pt").rename(mnist / "train.pt")
    (mnist / "t").rename(mnist / "test.pt")
    per_split = {k: v for k, v in m.items() if isinstance(v, dict) and {"train", "test"} <= set(v)}
    edit_manifest(mnist, **{f"{k}.{a}": v[b] for k, v in per_split.items() for a, b in SWAP})
    seal(mnist)  # the checksums written again
    assert train(mnist, tmp_path, capsys)[0] == 0  # loads: nothing on load can tell
    before = {p.name: p.read_bytes() for p in mnist.iterdir()}
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"psrnn prepare: error: {mnist}: train.pt, test.pt, manifest.json not what prepare writes from "
        f"{raw} with these options (edited or swapped): prepare it again (without --verify)"
    )
    assert {p.name: p.read_bytes() for p in mnist.iterdir()} == before
    assert sorted(p.name for p in mnist.parent.iterdir()) == ["mnist"]


def test_verify_reads_a_read_only_folder_and_leaves_out_the_workflows_stamp(
    fresh, mnist, monkeypatch, capsys
):
    """Battery C of stop 62: V05, a prepared folder whose parent cannot be written (a read-only
    mount) could not be verified, and the line named a temporary folder that never existed;
    V07, a folder Snakemake's prepare stamped differs from one a `--set` prepares only in that
    stamp (the config that asked for it), and was called "edited or swapped"."""
    raw = fresh["mnist"].parents[1] / "fx" / "mnist"
    sets = [arg for k, v in OPTIONS["mnist"].items() for arg in ("--set", f"{k}={v}")]
    edit_manifest(mnist, workflow_spec="0123456789abcdef")
    seal(mnist)
    made = []
    real = tempfile.mkdtemp

    def mkdtemp(suffix=None, prefix=None, dir=None):
        if Path(dir or "/") == mnist.parent:
            raise OSError(errno.EROFS, "Read-only file system", str(dir))
        if dir is None and str(prefix).startswith("psrnn-verify-"):
            made.append(real(suffix, prefix))
            return made[-1]
        return real(suffix, prefix, dir)

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    capsys.readouterr()
    assert main(["prepare", "mnist", "--raw", str(raw), "--out", str(mnist), "--verify", *sets]) == 0
    assert capsys.readouterr().out.startswith(f"verified: {mnist} is what prepare writes from {raw}")
    assert [Path(m).name.startswith("psrnn-verify-mnist-") for m in made] == [True]
    assert not Path(made[0]).exists()  # removed
    assert sorted(p.name for p in mnist.parent.iterdir()) == ["mnist"]


def test_prepare_again_writes_the_same_manifest(fresh, tmp_path):
    """The remedy both lines give: preparing the same archives again writes the manifest.json
    bytes (the runs' data identity) and split files it wrote before, with splits.sha256."""
    again = tmp_path / "again"
    P.prepare("mnist", fresh["mnist"].parents[1] / "fx" / "mnist", again, OPTIONS["mnist"])
    for name in ("manifest.json", "train.pt", "valid.pt", "test.pt", CHECKSUMS):
        assert (again / name).read_bytes() == (fresh["mnist"] / name).read_bytes(), name


def test_an_intact_folder_trains(imdb, tmp_path, capsys):
    rc, lines = train(imdb, tmp_path, capsys, "imdb")
    assert rc == 0 and lines == [], lines
    assert (tmp_path / "run" / "a" / "metrics.json").is_file()


REAL = sorted(p.parent for p in (C.ROOT / "data").glob("*/prepared/*/manifest.json"))


@pytest.mark.skipif(not REAL, reason="no prepared data under data/ (prepare or `dvc pull` first)")
@pytest.mark.parametrize("folder", REAL, ids=lambda p: f"{p.parents[1].name}/{p.name}")
def test_the_prepared_folders_here_still_load(folder):
    for split in ("train", "valid", "test"):
        assert len(load_split(folder, split)) == read_manifest(folder)["counts"][split]
