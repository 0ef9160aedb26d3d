"""House rules the tools check: ruff's lint rules and formatting (pyproject.toml's
[tool.ruff]) over src/ and tests/, so CI fails on a new unused import or an unformatted file;
and mypy over src/psrnn (pyproject.toml's [tool.mypy]), so it fails on a type error."""

import subprocess
import sys
from pathlib import Path

import pytest

from psrnn.config import ROOT

RUFF = Path(sys.executable).parent / "ruff"


@pytest.mark.parametrize("args", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_passes(args):
    res = subprocess.run([str(RUFF), *args, "src", "tests"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy_passes():
    # the files and settings are [tool.mypy]'s; about 20 s from a cold cache, 1 s warm
    res = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
