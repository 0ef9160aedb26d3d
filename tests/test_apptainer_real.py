"""`snakemake --use-singularity` for real: Apptainer installed on this Debian 12 machine
(containers/install-apptainer.sh), the image built from containers/psrnn-debian.def with
`apptainer build` and checked by its %test, then the small config through Snakemake inside
it in a fresh clone, every number equal to tests/expected/small.json.

    uv run --frozen pytest tests/test_apptainer_real.py      # root on Debian 12; else skipped

The jobs provably run the image's Python: Snakemake runs from a host environment without
torch (snakemake, jsonschema, pyyaml, pandas and scipy at uv.lock's versions: the
Snakefile's imports and those of the paper job, which the Snakefile keeps on the host where
LaTeX is), so any other job that ran outside the image would fail importing torch. data/
and results/ are written in the clone on the host. The Snakefile adds --nv to every job
(the GPU path): on this machine without a GPU Apptainer only warns, which this run checks is harmless.

The image takes ~13 min to build here and holds only the locked Python environment (the jobs
run the clone's src/ through PYTHONPATH), so it is cached between runs on one machine
under ~/.cache/psrnn/apptainer/, named by psrnn.apptainer.env_digest (uv.lock and the
install scripts) and the recipe's own digest: any change to what goes into the image
builds a new one; a code change does not need one.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from psrnn import apptainer as A
from psrnn import config as C

pytestmark = pytest.mark.slow
ROOT = C.ROOT
RECIPE = ROOT / "containers" / "psrnn-debian.def"
CACHE = Path(os.environ.get("PSRNN_APPTAINER_CACHE", Path.home() / ".cache" / "psrnn" / "apptainer"))
ENV = {**os.environ, "APPTAINER_DROP_CAPS": "CAP_SYS_RESOURCE"}  # root here lacks CAP_SYS_RESOURCE
TIMES: dict[str, float] = {}
SNAKEMAKE_ARGS = ("--cores", "2", "--use-singularity", "--configfile", "config/small.yaml")


def debian_root() -> str | None:
    """Why this machine cannot run the test, or None."""
    if os.geteuid() != 0:
        return "needs root (Apptainer is installed as a Debian package and builds with debootstrap)"
    release = Path("/etc/os-release")
    if not release.exists() or "ID=debian" not in release.read_text():
        return "needs Debian (containers/install-apptainer.sh adapts Debian unstable's package)"
    if not shutil.which("apt-get"):
        return "needs apt"
    return None


@pytest.fixture(scope="module")
def apptainer():
    why = debian_root()
    if why:
        pytest.skip(f"Apptainer for real: {why}")
    t0 = time.monotonic()
    res = subprocess.run(
        ["bash", str(ROOT / "containers" / "install-apptainer.sh")], capture_output=True, text=True
    )
    TIMES["install_s"] = time.monotonic() - t0
    assert res.returncode == 0, res.stdout + res.stderr
    program = A.apptainer_program()
    assert program, res.stdout
    return program


def image_key() -> str:
    recipe = hashlib.sha256(RECIPE.read_bytes()).hexdigest()[:12]
    return f"psrnn-cpu-{A.env_digest(ROOT)}-{recipe}.sif"


@pytest.fixture(scope="module")
def image(apptainer):
    """The image from containers/psrnn-debian.def (the locked environment: PyPI's torch),
    built once per environment and recipe on this machine."""
    sif = CACHE / image_key()
    if not sif.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        ca = CACHE / "ca"  # %post does not see the host's CA bundle (a proxy's own authority here)
        ca.mkdir(exist_ok=True)
        shutil.copy("/etc/ssl/certs/ca-certificates.crt", ca / "host-ca.crt")
        uv_cache = subprocess.run(["uv", "cache", "dir"], capture_output=True, text=True).stdout.strip()
        env = {
            **ENV,
            "APPTAINERENV_PIP_CERT": "/mnt/host-ca.crt",
            "APPTAINERENV_SSL_CERT_FILE": "/mnt/host-ca.crt",
            **({"APPTAINERENV_UV_CACHE_DIR": "/srv"} if uv_cache else {}),
        }
        binds = ["--bind", f"{ca}:/mnt"] + (["--bind", f"{uv_cache}:/srv"] if uv_cache else [])
        partial = sif.with_suffix(".building")
        t0 = time.monotonic()
        res = subprocess.run(
            [apptainer, "build", "--force", *binds, str(partial), str(RECIPE)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        TIMES["build_s"] = time.monotonic() - t0
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        partial.rename(sif)  # a cut build never stands in for an image
    res = subprocess.run([apptainer, "test", str(sif)], env=ENV, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "psrnn 0.1.0 torch 2.14.1" in res.stdout  # the recipe's %test: the image's own Python
    return sif


@pytest.fixture(scope="module")
def host_env(tmp_path_factory):
    """A Python environment that can run Snakemake and read the suite's configs but has no
    torch: a job that ran on the host instead of in the image would fail (cached beside the
    image, by the environment's digest)."""
    locked = {}
    text = (ROOT / "uv.lock").read_text()
    # what the Snakefile imports, and scipy for the paper job, which the Snakefile keeps on
    # the host (LaTeX lives there, not in the image)
    for name in ("snakemake", "jsonschema", "pyyaml", "pandas", "scipy"):
        at = text.index(f'\nname = "{name}"\n')
        locked[name] = text[at:].split('version = "', 1)[1].split('"', 1)[0]
    venv = CACHE / f"hostenv-{A.env_digest(ROOT)}"
    if not (venv / "bin" / "snakemake").exists():
        subprocess.run(["uv", "venv", "-q", "--python", sys.executable, str(venv)], check=True)
        pins = [f"{k}=={v}" for k, v in locked.items()]
        subprocess.run(
            ["uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *pins], check=True
        )
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch"], capture_output=True)
    assert probe.returncode != 0  # no torch on the host side
    return venv


def test_snakemake_runs_the_small_config_in_the_real_image_with_every_number_exact(image, host_env, tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    (clone / "containers" / "psrnn-cpu.sif").symlink_to(image)  # the name config/small.yaml gives
    env = {**ENV, "PYTHONPATH": str(clone / "src"), "PATH": f"{host_env / 'bin'}:{os.environ['PATH']}"}
    t0, c0 = time.monotonic(), os.times()
    res = subprocess.run(
        [str(host_env / "bin" / "snakemake"), *SNAKEMAKE_ARGS],
        cwd=clone, env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    c1 = os.times()
    TIMES["snakemake_s"] = time.monotonic() - t0
    TIMES["snakemake_cpu_s"] = (c1.children_user - c0.children_user) + (
        c1.children_system - c0.children_system
    )
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-4000:]
    # every job but `paper` (kept on the host for LaTeX) and `all` ran in the image
    jobs = int(re.search(r"^total\s+(\d+)$", log, re.M)[1])
    assert log.count("Activating singularity image") >= jobs - 2 >= 40
    assert "Activating singularity image containers/psrnn-cpu.sif" in log
    # the GPU flag the Snakefile gives every job (W.apptainer_args, tested in test_workflow.py)
    # is accepted and harmless without a GPU
    probe = "import torch; print(torch.cuda.is_available())"
    nv = subprocess.run(
        [A.apptainer_program(), "exec", "--nv", str(image), "python", "-c", probe],
        env=ENV, capture_output=True, text=True,
    )  # fmt: skip
    assert nv.returncode == 0 and nv.stdout.strip() == "False", nv.stderr
    # written on the host, in the clone
    metrics = sorted((clone / "results" / "small" / "runs").glob("*/seed*/metrics.json"))
    assert len(metrics) == 30 and (clone / "data" / "small" / "prepared").is_dir()
    # every number equal to the committed expectation (the same check CI's other e2e test makes)
    # in a user's shell: without the kernel variables the tests' own process sets (conftest),
    # which `check` would read as another platform (its CPU capability DEFAULT)
    shell = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    check = subprocess.run(
        [sys.executable, "-m", "psrnn", "check", "--config", "config/small.yaml"],
        cwd=clone, env={**shell, "PYTHONPATH": str(clone / "src")}, capture_output=True, text=True,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert "exact (same platform)" in check.stdout and re.search(
        r"^check small: all \d+ runs match$", check.stdout, re.M
    ), check.stdout
    # the runs record the image's torch, and no job ran with the host's Python
    run = json.loads(metrics[0].read_text())
    assert run["torch_version"].startswith("2.14.1")
    (CACHE / "last-times.json").write_text(json.dumps(TIMES))  # for docs: wall and CPU seconds
    print(f"apptainer e2e times: {json.dumps({k: round(v) for k, v in TIMES.items()})}")


def test_an_image_of_another_environment_stops_snakemake_before_any_job(image, host_env, tmp_path):
    """A checkout whose uv.lock moved on from the image's: one line, nothing written."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    (clone / "containers" / "psrnn-cpu.sif").symlink_to(image)
    with (clone / "uv.lock").open("a") as f:
        f.write("\n")
    before = sorted(p for p in clone.rglob("*") if ".git" not in p.parts)
    env = {**ENV, "PYTHONPATH": str(clone / "src"), "PATH": f"{host_env / 'bin'}:{os.environ['PATH']}"}
    res = subprocess.run(
        [str(host_env / "bin" / "snakemake"), *SNAKEMAKE_ARGS],
        cwd=clone, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode != 0
    line = next(x for x in (res.stdout + res.stderr).splitlines() if "holds another Python environment" in x)
    assert "containers/psrnn-cpu.sif holds another Python environment (io.psrnn.env " in line
    after = sorted(p for p in clone.rglob("*") if ".git" not in p.parts and ".snakemake" not in p.parts)
    assert after == [p for p in before if ".snakemake" not in p.parts]  # nothing written


def test_a_job_failing_in_the_image_says_why_in_one_line_and_leaves_no_output(image, host_env, tmp_path):
    """The download job, in the image, finds archives whose md5 is not the config's: its log
    ends with psrnn's one-line error and download.json (the job's output) is not written."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    (clone / "containers" / "psrnn-cpu.sif").symlink_to(image)
    bad = {
        "extends": "small.yaml",
        "name": "badmd5",
        "fixtures": "data/badmd5/fixtures",
        "datasets": {
            "mnist": {
                "source": {
                    "mirrors": ["data/badmd5/fixtures/mnist"],
                    "md5": {"train-images-idx3-ubyte.gz": "0" * 32},
                }
            }
        },
    }
    bad_config = "config/badmd5.yaml"
    (clone / bad_config).write_text(json.dumps(bad))
    env = {**ENV, "PYTHONPATH": str(clone / "src"), "PATH": f"{host_env / 'bin'}:{os.environ['PATH']}"}
    target = "data/badmd5/raw/mnist/download.json"
    res = subprocess.run(
        # the target first: --configfile takes every word after it
        [str(host_env / "bin" / "snakemake"), target, *SNAKEMAKE_ARGS[:3], "--configfile", bad_config],
        cwd=clone, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    log = res.stdout + res.stderr
    assert res.returncode != 0 and "Activating singularity image containers/psrnn-cpu.sif" in log
    job_log = (clone / "results" / "badmd5" / "logs" / "download" / "mnist.log").read_text().splitlines()
    assert job_log[-1].startswith("psrnn download: error: ") and "md5" in job_log[-1], job_log[-3:]
    assert not (clone / target).exists() and not (clone / target).parent.exists()  # nothing half-written
