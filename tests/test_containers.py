"""The container recipes: the Dockerfile lints clean, the Apptainer definition has its
sections and a pinned base, and both pin the same versions as uv.lock / pyproject.toml
(images cannot be built here; these checks keep the recipes honest)."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from psrnn.config import ROOT

DOCKERFILE = ROOT / "containers" / "Dockerfile"
DEF = ROOT / "containers" / "psrnn.def"


def locked_version(package: str) -> str:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    versions = {p["version"] for p in lock["package"] if p["name"] == package}
    assert len(versions) == 1, (package, versions)
    return versions.pop()


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def dockerfile_pins() -> dict[str, str]:
    text = DOCKERFILE.read_text()
    labels = dict(re.findall(r'io\.psrnn\.(\w+)="([^"]+)"', text))
    return {
        "base": re.search(r"^ARG BASE_IMAGE=(\S+)", text, re.M)[1],
        "uv_image": re.search(r"^FROM ghcr\.io/astral-sh/uv:(\S+) AS uv", text, re.M)[1],
        "python_arg": re.search(r"^ARG PYTHON_VERSION=(\S+)", text, re.M)[1],
        "version": re.search(r'org\.opencontainers\.image\.version="([^"]+)"', text)[1],
        **labels,
    }


def def_sections(text: str) -> dict[str, str]:
    """%section -> body of an Apptainer definition (the last stage's, for repeats)."""
    parts = re.split(r"^%(\w+)(.*)$", text, flags=re.M)
    out = {}
    for i in range(1, len(parts), 3):
        out[(parts[i] + parts[i + 1]).strip()] = parts[i + 2]
    return out


def def_pins() -> dict[str, str]:
    text = DEF.read_text()
    headers = re.findall(r"^(Bootstrap|From|Stage):\s*(\S+)", text, re.M)
    froms = [v for k, v in headers if k == "From"]
    labels = dict(re.findall(r"^\s+io\.psrnn\.(\w+)\s+(\S+)", def_sections(text)["labels"], re.M))
    post = def_sections(text)["post"]
    return {
        "base": froms[-1],
        "uv_image": re.fullmatch(r"ghcr\.io/astral-sh/uv:(\S+)", froms[0])[1],
        "python_arg": re.search(r"PYTHON_VERSION=(\S+)", post)[1],
        "version": re.search(r"org\.opencontainers\.image\.version\s+(\S+)", text)[1],
        **labels,
    }


def test_dockerfile_lints_clean():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    res = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip() == ""


def test_dockerfile_installs_exactly_the_lock_and_checks_health():
    text = DOCKERFILE.read_text()
    syncs = re.findall(
        r"^RUN if \[ \"\$\{TORCH\}\" = lock \]; then uv sync (.*?); \\\n"
        r"\s+else bash containers/torch-variant\.sh \"\$\{TORCH\}\" (.*?); fi$",
        text,
        re.M,
    )
    assert len(syncs) == 2 and all("--frozen" in lock for lock, _ in syncs)
    assert "--no-install-project" in syncs[0][0] and "--no-install-project" not in syncs[1][0]
    for lock, variant in syncs:  # the variant gets the same sync options
        assert lock.replace("--frozen ", "") == variant
    assert re.search(r"^ARG TORCH=lock$", text, re.M)
    assert re.search(r"^HEALTHCHECK .*import psrnn, torch.*torch\.cuda\.is_available\(\)", text, re.M | re.S)
    assert re.search(r"^COPY pyproject\.toml uv\.lock README\.md \./$", text, re.M)


def test_apptainer_definition_has_its_sections_and_a_pinned_base():
    text = DEF.read_text()
    sections = def_sections(text)
    for name in (
        "arguments",
        "labels",
        "help",
        "files",
        "files from uv",
        "environment",
        "post",
        "test",
        "runscript",
    ):
        assert name in sections, name
    assert re.search(r"^Bootstrap: docker$", text, re.M)
    froms = re.findall(r"^From:\s*(\S+)$", text, re.M)
    for ref in froms:  # a tag, never latest or a bare name
        assert re.fullmatch(r"[\w./-]+:\d[\w.-]*", ref), ref
    assert "uv sync --frozen" in sections["post"]
    assert sections["arguments"].split() == ["TORCH=lock"]
    assert 'bash containers/torch-variant.sh "{{ TORCH }}"' in sections["post"]
    assert "torch.cuda.is_available()" in sections["test"] and "import psrnn" in sections["test"]
    files = {line.split()[0] for line in sections["files"].strip().splitlines()}
    assert files == {"pyproject.toml", "uv.lock", "README.md", "src", "config", "containers/torch-variant.sh"}
    assert "/opt/psrnn/.venv/bin" in sections["environment"]


def test_base_images_are_pinned_cuda_13_0_matching_the_locked_torch():
    pins = dockerfile_pins()
    base = re.fullmatch(
        r"nvidia/cuda:(\d+)\.(\d+)\.(\d+)-(base|runtime|cudnn-runtime)-ubuntu(\d+\.\d+)", pins["base"]
    )
    assert base, pins["base"]
    # torch's CUDA wheels (uv.lock) decide the CUDA version: cuda-toolkit 13.0.x, *-cu13
    toolkit = locked_version("cuda-toolkit")
    assert toolkit.split(".")[:2] == [base[1], base[2]] == pins["cuda"].split(".")
    assert pins["cuda"] == "13.0"


def test_versions_agree_with_the_lock_and_with_each_other():
    d, a = dockerfile_pins(), def_pins()
    assert d == a  # Dockerfile and Apptainer definition: same base, uv, Python, labels
    assert d["torch"] == locked_version("torch") == "2.14.1"
    assert d["torchvision"] == locked_version("torchvision")
    assert d["version"] == pyproject()["project"]["version"]
    # the pinned Python satisfies requires-python, and label and build arg agree
    assert d["python"] == d["python_arg"]
    major, minor, _ = (int(x) for x in d["python"].split("."))
    low, high = re.fullmatch(r">=(\d+\.\d+),<(\d+\.\d+)", pyproject()["project"]["requires-python"]).groups()
    assert tuple(map(int, low.split("."))) <= (major, minor) < tuple(map(int, high.split(".")))
    # one uv version everywhere: images, label, CI
    ci = re.search(r"pip install -q uv==(\S+)", (ROOT / ".ci" / "run").read_text())[1]
    assert d["uv_image"] == d["uv"] == ci


@pytest.mark.parametrize("recipe", [DOCKERFILE, DEF])
def test_recipes_copy_only_what_the_lock_install_needs(recipe):
    """The build context files the recipes name exist in the repository."""
    for path in ("pyproject.toml", "uv.lock", "README.md", "src/psrnn", "config/schema.yaml"):
        assert (ROOT / path).exists(), path
    assert "uv.lock" in recipe.read_text()


def test_ci_runs_exactly_the_readme_test_command():
    ci = ROOT / ".ci" / "run"
    assert ci.stat().st_mode & 0o111  # executable
    lines = [ln for ln in ci.read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines[-1] == "uv run --frozen pytest"
    assert "python3 -m pip install -q uv==0.13.8" in lines


@pytest.mark.parametrize("variant", ["cpu", "cu126"])
def test_torch_variant_installs_the_lock_without_its_cuda_wheels(tmp_path, variant):
    """containers/torch-variant.sh, dry run (offline): everything of uv.lock but torch,
    torchvision and the CUDA 13 runtime, then the locked torch pair from PyTorch's index."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv not on PATH")
    for f in ("pyproject.toml", "uv.lock", "README.md", "containers/torch-variant.sh"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, tmp_path / f)
    shutil.copytree(ROOT / "src", tmp_path / "src")
    res = subprocess.run(
        ["bash", "containers/torch-variant.sh", variant, "--no-default-groups"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DRY_RUN": "1", "UV_OFFLINE": "1"},
    )
    assert res.returncode == 0, res.stdout + res.stderr
    planned = re.findall(r"^ \+ ([\w.-]+)==", res.stdout + res.stderr, re.M)
    assert "numpy" in planned and "scipy" in planned
    assert not [p for p in planned if p.startswith(("torch", "nvidia", "cuda", "triton"))], planned
    pip = re.search(r"^would run: uv pip install (.*)$", res.stdout, re.M)[1].split()
    assert f"https://download.pytorch.org/whl/{variant}" in pip
    assert f"torch=={locked_version('torch')}+{variant}" in pip
    assert f"torchvision=={locked_version('torchvision')}+{variant}" in pip
    assert ("--no-deps" in pip) == (variant == "cpu")


def test_torch_variant_refuses_an_unknown_build():
    res = subprocess.run(
        ["bash", str(ROOT / "containers" / "torch-variant.sh"), "cu999"], capture_output=True, text=True
    )
    assert res.returncode == 2
    assert res.stderr.strip() == ("containers/torch-variant.sh: unknown variant 'cu999' (cpu, cu126, cu128)")


def test_license_and_citation_match_pyproject():
    import yaml

    project = pyproject()["project"]
    assert project["license"] == {"text": "MIT"}
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    assert (cff["version"], cff["license"]) == (project["version"], "MIT")
    assert any("Private and Shared" in r["title"] for r in cff["references"])
