"""The command line and atomic writes: the plumbing every command relies on."""

import json
import os
import subprocess
import sys

import pytest

from psrnn import files
from psrnn.cli import COMMANDS, main


def test_every_command_has_help():
    for name in COMMANDS:
        with pytest.raises(SystemExit) as exc:
            main([name, "--help"])
        assert exc.value.code == 0, name


def test_user_errors_are_one_line_and_exit_2(tmp_path, capsys):
    missing = tmp_path / "nope.yaml"
    assert main(["config", str(missing)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert str(missing) in err[0] and err[0].startswith("psrnn config: error:")


def test_python_dash_m_entry_point():
    out = subprocess.run([sys.executable, "-m", "psrnn", "--version"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.startswith("psrnn ")


def test_write_json_is_stable_and_atomic(tmp_path):
    target = tmp_path / "sub" / "m.json"
    files.write_json(target, {"b": 1, "a": [1.5, None]})
    assert target.read_text() == '{\n  "a": [\n    1.5,\n    null\n  ],\n  "b": 1\n}\n'
    assert files.read_json(target) == {"a": [1.5, None], "b": 1}
    assert sorted(os.listdir(target.parent)) == ["m.json"]  # no temporary left behind


def test_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "m.json"
    files.write_json(target, {"v": 1})
    with pytest.raises(ValueError):
        files.write_json(target, {"v": float("nan")})  # NaN is not valid JSON
    assert json.loads(target.read_text()) == {"v": 1}
    assert os.listdir(tmp_path) == ["m.json"]


def test_md5sum(tmp_path):
    p = tmp_path / "x"
    p.write_bytes(b"abc")
    assert files.md5sum(p) == "900150983cd24fb0d6963f7d28e17f72"


def test_interrupted_atomic_path_leaves_target_untouched(tmp_path):
    target = tmp_path / "ckpt.pt"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt):
        with files.atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["ckpt.pt"]


def test_atomic_files_get_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        files.write_text(tmp_path / "t.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "t.txt").stat().st_mode & 0o777 == 0o644


def test_torch_save_is_byte_stable(tmp_path):
    import torch

    obj = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "step": 3}
    files.torch_save(tmp_path / "a.pt", obj)
    files.torch_save(tmp_path / "b.pt", obj)
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "b.pt").read_bytes()
    back = torch.load(tmp_path / "a.pt", weights_only=True)
    assert torch.equal(back["w"], obj["w"]) and back["step"] == 3
