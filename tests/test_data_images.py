"""MNIST, Fashion-MNIST, CIFAR-10: fixture archive -> download -> prepared sequences."""

import gzip
import io
import pickle
import tarfile

import numpy as np
import pytest
import torch
import yaml
from torchvision.datasets.mnist import read_image_file, read_label_file

from psrnn import files
from psrnn.cli import UserError, main
from psrnn.config import ConfigError
from psrnn.studies.private_shared.data import load_split, read_manifest
from psrnn.studies.private_shared.data import prepare as P
from psrnn.studies.private_shared.data.download import download
from psrnn.studies.private_shared.data.fixtures import gzip_bytes, idx_bytes, tar_gz_bytes, write_fixtures


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    """{dataset: raw folder} filled by `download` from fixture archives (file:// mirror)."""
    root = tmp_path_factory.mktemp("img")
    write_fixtures(root / "fx", ("mnist", "fmnist", "cifar10"))
    out = {}
    for ds in ("mnist", "fmnist", "cifar10"):
        fx = root / "fx" / ds
        download(
            ds,
            root / "raw" / ds,
            {"mirrors": [fx.as_uri()], "md5": str(fx / "MD5SUMS"), "official": False},
            log=lambda m: None,
        )
        out[ds] = root / "raw" / ds
    return out


def idx(path, reader, tmp_path):
    plain = tmp_path / path.name.removesuffix(".gz")
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    return reader(str(plain))


def rows(x: torch.Tensor, y: torch.Tensor) -> list[tuple[bytes, int]]:
    return sorted((xi.numpy().tobytes(), int(yi)) for xi, yi in zip(x, y))


@pytest.mark.parametrize("ds", ["mnist", "fmnist"])
def test_mnist_like_end_to_end(raw, ds, tmp_path):
    out = tmp_path / "prep"
    m = P.prepare(ds, raw[ds], out, {"valid_size": 200})
    tr, va, te = (load_split(out, s) for s in ("train", "valid", "test"))
    assert (len(tr), len(va), len(te)) == (1000, 200, 300)
    assert tr.x.dtype == torch.uint8 and tuple(tr.x.shape) == (1000, 784, 1)
    assert tr.y.dtype == torch.int64 and te.offsets is None
    assert m["input"] == "continuous" and (m["features"], m["num_classes"], m["scale"]) == (1, 10, 255.0)
    assert m["counts"] == {"train": 1000, "valid": 200, "test": 300}
    assert m["length"]["test"] == {"mean": 784.0, "min": 784, "max": 784}
    assert sum(m["class_balance"]["valid"]) == 200
    assert m["sources"] == {n: files.md5sum(raw[ds] / n) for n in m["sources"]}
    # test: the official test set, pixels and labels unchanged, in order
    x_test = idx(raw[ds] / "t10k-images-idx3-ubyte.gz", read_image_file, tmp_path)
    y_test = idx(raw[ds] / "t10k-labels-idx1-ubyte.gz", read_label_file, tmp_path)
    assert torch.equal(te.x[:, :, 0], x_test.reshape(300, 784)) and torch.equal(te.y, y_test)
    # train + valid: exactly the official training images with their labels, none twice
    x_tr = idx(raw[ds] / "train-images-idx3-ubyte.gz", read_image_file, tmp_path)
    y_tr = idx(raw[ds] / "train-labels-idx1-ubyte.gz", read_label_file, tmp_path)
    assert rows(torch.cat([tr.x, va.x]), torch.cat([tr.y, va.y])) == rows(x_tr.reshape(1200, 784, 1), y_tr)
    # the loader scales to [0, 1]
    x, lengths, y = te.batch(torch.tensor([0, 5]))
    assert x.dtype == torch.float32 and tuple(x.shape) == (2, 784, 1)
    assert float(x.max()) <= 1.0 and float(x.max()) > 0.3 and lengths.tolist() == [784, 784]


def test_split_is_seeded(raw, tmp_path):
    a = P.prepare("mnist", raw["mnist"], tmp_path / "a", {"valid_size": 100})
    P.prepare("mnist", raw["mnist"], tmp_path / "b", {"valid_size": 100})
    P.prepare("mnist", raw["mnist"], tmp_path / "c", {"valid_size": 100, "seed": 1})
    va, vb, vc = (load_split(tmp_path / k, "valid") for k in "abc")
    assert torch.equal(va.x, vb.x) and torch.equal(va.y, vb.y)
    assert not torch.equal(va.x, vc.x)
    assert a["split_seed"] == 0 and read_manifest(tmp_path / "c")["split_seed"] == 1
    assert (tmp_path / "a" / "train.pt").read_bytes() == (tmp_path / "b" / "train.pt").read_bytes()


def test_downsample_and_caps(raw, tmp_path):
    out = tmp_path / "p"
    m = P.prepare(
        "mnist",
        raw["mnist"],
        out,
        {"downsample": 14, "valid_size": 200, "train": 50, "valid": 40, "test": 40},
    )
    te = load_split(out, "test")
    assert m["counts"] == {"train": 50, "valid": 40, "test": 40}
    assert tuple(te.x.shape) == (40, 196, 1) and m["steps"] == 196 and m["image_size"] == [14, 14]
    full = idx(raw["mnist"] / "t10k-images-idx3-ubyte.gz", read_image_file, tmp_path)[:40].numpy()
    blocks = full.reshape(40, 14, 2, 14, 2).astype(np.float64).mean(axis=(2, 4))  # 2 x 2 means
    assert np.array_equal(te.x[:, :, 0].numpy().reshape(40, 14, 14), np.round(blocks).astype(np.uint8))
    # the saved tensors hold only the kept rows (a view would save the whole storage)
    assert (out / "train.pt").stat().st_size < 50 * 196 + 20_000


def test_cifar10_pixel_order_and_split(raw, tmp_path):
    out = tmp_path / "c"
    m = P.prepare("cifar10", raw["cifar10"], out, {"valid_size": 100})
    tr, va, te = (load_split(out, s) for s in ("train", "valid", "test"))
    assert (len(tr), len(va), len(te)) == (1100, 100, 300)
    assert tuple(te.x.shape) == (300, 1024, 3) and te.x.dtype == torch.uint8
    assert m["features"] == 3 and m["steps"] == 1024 and m["classes"][0] == "airplane"
    with tarfile.open(raw["cifar10"] / "cifar-10-python.tar.gz") as tar:
        test = pickle.load(tar.extractfile("cifar-10-batches-py/test_batch"), encoding="bytes")
    # step t = row * 32 + column; the features are that pixel's R, G, B
    data = test[b"data"]  # (300, 3072) = R plane, G plane, B plane
    assert np.array_equal(te.x.numpy(), data.reshape(300, 3, 1024).transpose(0, 2, 1))
    assert te.y.tolist() == test[b"labels"]
    assert m["class_balance"]["test"] == np.bincount(test[b"labels"], minlength=10).tolist()
    assert any("45K" in n for n in m["notes"])


def test_cifar10_downsample_keeps_colour_features(raw, tmp_path):
    m = P.prepare("cifar10", raw["cifar10"], tmp_path / "c", {"valid_size": 100, "downsample": 16})
    x = load_split(tmp_path / "c", "train").x
    assert tuple(x.shape) == (1100, 256, 3) and m["steps"] == 256


def test_replacing_a_prepared_folder_leaves_no_leftovers(raw, tmp_path):
    out = tmp_path / "prepared" / "mnist"
    P.prepare("mnist", raw["mnist"], out, {"valid_size": 100, "train": 20})
    P.prepare("mnist", raw["mnist"], out, {"valid_size": 100, "train": 40})
    assert read_manifest(out)["counts"]["train"] == 40
    assert [p.name for p in out.parent.iterdir()] == ["mnist"]
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        "splits.sha256",
        "test.pt",
        "train.pt",
        "valid.pt",
    ]


def test_failure_while_writing_keeps_the_old_folder(raw, tmp_path, monkeypatch):
    out = tmp_path / "prepared" / "mnist"
    P.prepare("mnist", raw["mnist"], out, {"valid_size": 100, "train": 20})
    real = files.write_bytes

    def crash(target, data):
        if target.name == "test.pt":
            raise KeyboardInterrupt
        real(target, data)

    monkeypatch.setattr(files, "write_bytes", crash)
    with pytest.raises(KeyboardInterrupt):
        P.prepare("mnist", raw["mnist"], out, {"valid_size": 100, "train": 30})
    assert read_manifest(out)["counts"]["train"] == 20
    assert [p.name for p in out.parent.iterdir()] == ["mnist"]
    with pytest.raises(KeyboardInterrupt):
        P.prepare("mnist", raw["mnist"], tmp_path / "new", {"valid_size": 100})
    assert not (tmp_path / "new").exists()


def test_bad_options_stop_before_writing(raw, tmp_path):
    with pytest.raises(ConfigError, match="cannot move 5000 of 1200"):
        P.prepare("mnist", raw["mnist"], tmp_path / "o", {"valid_size": 5000})
    with pytest.raises(ConfigError, match="min_chars do not apply to mnist"):
        P.prepare("mnist", raw["mnist"], tmp_path / "o", {"min_chars": 3})
    with pytest.raises(ConfigError, match="downsample=1"):
        P.prepare("mnist", raw["mnist"], tmp_path / "o", {"downsample": 1})
    assert list(tmp_path.iterdir()) == []


def copy_raw(src, dst):
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def test_corrupt_truncated_and_missing_archives_are_named(raw, tmp_path):
    bad = copy_raw(raw["mnist"], tmp_path / "bad")
    (bad / "download.json").unlink()
    target = bad / "t10k-images-idx3-ubyte.gz"
    target.write_bytes(target.read_bytes()[:-200])  # truncated gzip
    with pytest.raises(UserError, match="t10k-images-idx3-ubyte.gz: corrupt or truncated"):
        P.prepare("mnist", bad, tmp_path / "o1", {"valid_size": 100})
    target.write_bytes(b"not a gzip file at all")
    with pytest.raises(UserError, match="t10k-images-idx3-ubyte.gz: corrupt or truncated"):
        P.prepare("mnist", bad, tmp_path / "o2", {"valid_size": 100})
    target.unlink()
    with pytest.raises(FileNotFoundError, match="t10k-images-idx3-ubyte.gz"):
        P.prepare("mnist", bad, tmp_path / "o3", {"valid_size": 100})
    cifar = copy_raw(raw["cifar10"], tmp_path / "cifar")
    (cifar / "download.json").unlink()
    arch = cifar / "cifar-10-python.tar.gz"
    arch.write_bytes(arch.read_bytes()[: arch.stat().st_size // 2])
    with pytest.raises(UserError, match="cifar-10-python.tar.gz: corrupt or truncated"):
        P.prepare("cifar10", cifar, tmp_path / "o4", {"valid_size": 100})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "cifar"]


def test_raw_file_changed_since_download_is_refused(raw, tmp_path):
    bad = copy_raw(raw["mnist"], tmp_path / "bad")
    gz = bad / "train-labels-idx1-ubyte.gz"
    gz.write_bytes(gzip.compress(gzip.decompress(gz.read_bytes()), mtime=1))
    with pytest.raises(UserError, match="differs from .* recorded by download"):
        P.prepare("mnist", bad, tmp_path / "o", {"valid_size": 100})


def test_cifar_tarball_without_a_batch_is_named(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("cifar-10-batches-py/batches.meta")
        data = pickle.dumps({b"label_names": [b"a"] * 10})
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(buf.getvalue())
    with pytest.raises(UserError, match="missing cifar-10-batches-py/data_batch_1"):
        P.prepare("cifar10", tmp_path, tmp_path / "o")


def test_cli_prepare_explicit_folders_and_set(raw, tmp_path, capsys):
    out = tmp_path / "o"
    assert (
        main(
            [
                "prepare",
                "fmnist",
                "--raw",
                str(raw["fmnist"]),
                "--out",
                str(out),
                "--set",
                "valid_size=300",
                "--set",
                "downsample=7",
            ]
        )
        == 0
    )
    m = read_manifest(out)
    assert m["counts"]["valid"] == 300 and m["steps"] == 49 and m["classes"][0] == "T-shirt/top"
    assert "fmnist: train 900, valid 300, test 300" in capsys.readouterr().out
    assert main(["prepare", "fmnist", "--raw", str(tmp_path / "none"), "--out", str(out)]) == 2
    assert "raw file not found" in capsys.readouterr().err


# --- bad input: a class missing from an archive or a split, damaged prepared files -------


def one_line_error(argv, capsys) -> str:
    """Run the CLI; it must fail with exit 2 and one line on stderr (no traceback)."""
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_mnist_labels_without_a_class_are_refused(raw, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (bad / name).write_bytes((raw["mnist"] / name).read_bytes())
    x = idx(raw["mnist"] / "train-images-idx3-ubyte.gz", read_image_file, tmp_path).numpy()
    y = idx(raw["mnist"] / "train-labels-idx1-ubyte.gz", read_label_file, tmp_path).numpy()
    keep = y != 7  # every training image of digit 7 lost
    (bad / "train-images-idx3-ubyte.gz").write_bytes(gzip_bytes(idx_bytes(x[keep])))
    (bad / "train-labels-idx1-ubyte.gz").write_bytes(gzip_bytes(idx_bytes(y[keep])))
    line = one_line_error(
        ["prepare", "mnist", "--raw", str(bad), "--out", str(tmp_path / "o"), "--set", "valid_size=100"],
        capsys,
    )
    assert line == (
        f"psrnn prepare: error: mnist: {bad / 'train-labels-idx1-ubyte.gz'} has no train examples of class 7"
    )
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o.*"))


def test_cifar_test_batch_without_a_class_is_refused(raw, tmp_path, capsys):
    with tarfile.open(raw["cifar10"] / "cifar-10-python.tar.gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    name = "cifar-10-batches-py/test_batch"
    test = pickle.loads(members[name], encoding="bytes")
    keep = np.array(test[b"labels"]) != 3  # no cat left in the test set
    test[b"data"] = test[b"data"][keep]
    test[b"labels"] = [v for v, k in zip(test[b"labels"], keep) if k]
    members[name] = pickle.dumps(test, protocol=2)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "cifar-10-python.tar.gz").write_bytes(tar_gz_bytes(members))
    with pytest.raises(UserError) as err:
        P.prepare("cifar10", bad, tmp_path / "o", {"valid_size": 100})
    assert str(err.value) == (
        f"cifar10: {bad / 'cifar-10-python.tar.gz'}: {name} has no test examples of class 3 (cat)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad"]


def test_a_cap_that_drops_a_class_names_the_split(raw, tmp_path, capsys):
    out = tmp_path / "prepared" / "mnist"
    P.prepare("mnist", raw["mnist"], out, {"valid_size": 200, "valid": 40})
    before = (out / "valid.pt").read_bytes()
    with pytest.raises(
        ConfigError,
        match=r"^prepare: mnist valid split \(20 sequences\) has no "
        r"examples of classes 2, 6; make it larger "
        r"\(options valid_size, valid\)$",
    ):
        P.prepare("mnist", raw["mnist"], out, {"valid_size": 200, "valid": 20})
    line = one_line_error(
        [
            "prepare",
            "mnist",
            "--raw",
            str(raw["mnist"]),
            "--out",
            str(out),
            "--set",
            "valid_size=200",
            "--set",
            "test=20",
        ],
        capsys,
    )
    assert "mnist test split (20 sequences) has no examples of" in line and "(options test)" in line
    # the folder prepared before is kept as it was, with no leftovers beside it
    assert (out / "valid.pt").read_bytes() == before
    assert [p.name for p in out.parent.iterdir()] == ["mnist"]


@pytest.fixture()
def prepared(raw, tmp_path):
    """A small prepared MNIST folder at data/x/prepared/mnist, as a config would place it."""
    out = tmp_path / "data" / "x" / "prepared" / "mnist"
    P.prepare("mnist", raw["mnist"], out, {"downsample": 7, "valid_size": 100, "train": 60, "test": 50})
    return out


RERUN = "re-run `python -m psrnn prepare mnist --config <suite.yaml>`"


def test_truncated_split_file_is_named(prepared):
    path = prepared / "train.pt"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(UserError) as err:
        load_split(prepared, "train")
    assert str(err.value).startswith(f"{path} is damaged (RuntimeError: ")
    assert str(err.value).endswith(f"): {RERUN}") and "\n" not in str(err.value)
    path.write_bytes(b"")
    with pytest.raises(UserError, match=r"train.pt is damaged \(EOFError\): re-run"):
        load_split(prepared, "train")
    # a whole file of another split: readable, but not what the manifest counts
    path.write_bytes((prepared / "valid.pt").read_bytes())
    with pytest.raises(UserError, match=r"damaged \(100 sequences but manifest.json counts 60\)"):
        load_split(prepared, "train")
    assert len(load_split(prepared, "valid")) == 100  # the other splits still load


def test_missing_split_file_is_named(prepared):
    (prepared / "train.pt").unlink()
    with pytest.raises(FileNotFoundError) as err:
        load_split(prepared, "train")
    assert str(err.value) == f"prepared split not found: {prepared / 'train.pt'}: {RERUN}"


def test_truncated_manifest_is_named(prepared):
    path = prepared / "manifest.json"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(UserError) as err:
        read_manifest(prepared)
    assert str(err.value).startswith(f"{path} is damaged (JSONDecodeError: ")
    assert str(err.value).endswith(f"): {RERUN}")
    with pytest.raises(UserError, match="manifest.json is damaged"):
        load_split(prepared, "test")
    path.write_text('{"dataset": "mnist", "counts": {}}\n')  # JSON, but not a manifest
    with pytest.raises(UserError, match=r"manifest.json is damaged \(no input, features, num_classes\)"):
        read_manifest(prepared)


def test_training_on_a_damaged_split_is_one_line(prepared, tmp_path, capsys):
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text(
        yaml.safe_dump(
            {
                "dataset": "mnist",
                "data_dir": str(prepared),
                "hidden": 4,
                "window": 3,
                "anchors": 1,
                "max_epochs": 1,
                "batch_size": 16,
                "progress": "plain",
            }
        )
    )
    path = prepared / "train.pt"
    path.write_bytes(path.read_bytes()[:-200])
    line = one_line_error(
        ["train", "--config", str(run_yaml), "--out", str(tmp_path / "run" / "a" / "b")], capsys
    )
    assert line.startswith(f"psrnn train: error: {path} is damaged (") and line.endswith(RERUN)
    assert not (tmp_path / "run").exists()  # every folder the run made, not only its own


class _RunsACommand:
    """What a hostile pickle holds: unpickling it calls os.system."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_cifar_batch_that_would_run_code_is_refused_before_it_runs(raw, tmp_path):
    """A CIFAR-10 tarball (say, in a mirror with its own MD5SUMS) whose data_batch_1 pickles
    os.system: prepare stops in one line naming the member and the function, the command
    never runs and no output is written. The official format (the fixture's batches, numpy
    arrays in dicts) still reads."""
    marker = tmp_path / "ran"
    with tarfile.open(raw["cifar10"] / "cifar-10-python.tar.gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    members["cifar-10-batches-py/data_batch_1"] = pickle.dumps({b"data": _RunsACommand(marker)}, protocol=2)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "cifar-10-python.tar.gz").write_bytes(tar_gz_bytes(members))
    with pytest.raises(UserError) as err:
        P.prepare("cifar10", bad, tmp_path / "out")
    line = str(err.value)
    assert "\n" not in line and "cifar-10-batches-py/data_batch_1: refused to unpickle posix.system" in line
    assert not marker.exists() and not (tmp_path / "out").exists()
    P.prepare("cifar10", raw["cifar10"], tmp_path / "good", {"valid_size": 100})
    assert len(load_split(tmp_path / "good", "train")) == 1100
