"""Shared test set-up."""

import os
import shutil
from pathlib import Path

import pytest
import yaml

# In-process `main(["train", ...])` calls train as `python -m psrnn train` does: under the
# suite's job_env, in effect before torch loads (psrnn.cli.job_env_in_effect refuses a
# training command once torch is loaded without it). config/small.yaml's is every suite's.
for _key, _value in yaml.safe_load((Path(__file__).parents[1] / "config" / "small.yaml").read_text())[
    "job_env"
].items():
    os.environ[_key] = str(_value)

import torch  # noqa: E402 (after the job_env above)

# The README's test command runs `.tools/bin/uv run --frozen pytest`: uv is then not on PATH,
# but `uv run` names itself in UV. Tests that call `uv` (the real image's build, the torch
# variant script) find that one, as on a machine where uv is installed.
if shutil.which("uv") is None and os.environ.get("UV"):
    os.environ["PATH"] = os.pathsep.join([str(Path(os.environ["UV"]).parent), os.environ.get("PATH", "")])


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and the CPU cores here are shared."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
