"""The container recipes: one recipe script (containers/install.sh) that the Dockerfile, both
Apptainer definitions and the local root-file-system build run; the Dockerfile lints clean,
the definitions have their sections and pinned bases, and every recipe pins the versions of
uv.lock / pyproject.toml. The image itself is built with Apptainer and the small config run
in it by tests/test_apptainer_real.py (root on Debian; containers/README.md); these checks
are fast and run everywhere."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from psrnn.config import ROOT

CONTAINERS = ROOT / "containers"
DOCKERFILE = CONTAINERS / "Dockerfile"
DEF = CONTAINERS / "psrnn.def"
DEBIAN_DEF = CONTAINERS / "psrnn-debian.def"
INSTALL = CONTAINERS / "install.sh"
# What every recipe copies into /opt/psrnn for install.sh.
RECIPE_FILES = [
    "pyproject.toml",
    "uv.lock",
    "README.md",
    "src",
    "config",
    "containers/install.sh",
    "containers/torch-variant.sh",
]


def locked_version(package: str) -> str:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    versions = {p["version"] for p in lock["package"] if p["name"] == package}
    assert len(versions) == 1, (package, versions)
    return versions.pop()


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def install_defaults() -> dict[str, str]:
    """install.sh's settings: `NAME="${NAME:-default}"`."""
    return dict(re.findall(r'^(\w+)="\$\{\1:-([^}]+)\}"$', INSTALL.read_text(), re.M))


def dockerfile_pins() -> dict[str, str]:
    text = DOCKERFILE.read_text()
    labels = dict(re.findall(r'io\.psrnn\.(\w+)="([^"]+)"', text))
    return {
        "base": re.search(r"^ARG BASE_IMAGE=(\S+)", text, re.M)[1],
        "uv_image": re.search(r"^FROM ghcr\.io/astral-sh/uv:(\S+) AS uv", text, re.M)[1],
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


def def_headers(text: str) -> list[tuple[str, str]]:
    """The header keywords (Bootstrap, From, ...) in order, before the first section."""
    return re.findall(r"^(\w+):\s*(\S+)$", text.split("\n%", 1)[0], re.M)


def def_pins(path: Path = DEF) -> dict[str, str]:
    text = path.read_text()
    froms = [v for k, v in def_headers(text) if k == "From"]
    labels = dict(re.findall(r"^\s+io\.psrnn\.(\w+)\s+(\S+)", def_sections(text)["labels"], re.M))
    pins = {"version": re.search(r"org\.opencontainers\.image\.version\s+(\S+)", text)[1], **labels}
    if froms:
        pins |= {"base": froms[-1], "uv_image": re.fullmatch(r"ghcr\.io/astral-sh/uv:(\S+)", froms[0])[1]}
    return pins


def def_files(path: Path) -> list[str]:
    return [line.split()[0] for line in def_sections(path.read_text())["files"].strip().splitlines()]


def commands(body: str) -> list[str]:
    return [ln.strip() for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_dockerfile_lints_clean():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    res = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip() == ""


def test_every_recipe_runs_the_one_install_script():
    """Dockerfile and both .def files leave Python, uv and the lock install to
    containers/install.sh: none installs them itself, each runs the script (the .def files
    then label the image with its environment's digest, psrnn.apptainer.env_digest)."""
    docker = DOCKERFILE.read_text()
    assert re.findall(r"^RUN (.*)$", docker, re.M) == [
        "bash containers/install.sh --no-install-project",  # dependencies: a layer that survives code edits
        "bash containers/install.sh",
    ]
    registry, debian = (def_sections(p.read_text())["post"] for p in (DEF, DEBIAN_DEF))
    label = (
        'cd /opt/psrnn && echo "io.psrnn.env $(cat uv.lock containers/install.sh containers/torch-variant.sh '
        '| sha256sum | cut -c1-16)" >> "${APPTAINER_LABELS:-$SINGULARITY_LABELS}"'
    )
    assert commands(registry) == ['TORCH="{{ TORCH }}" bash /opt/psrnn/containers/install.sh', label]
    assert commands(debian) == [
        'PSRNN_PYTHON=system TORCH="{{ TORCH }}" bash /opt/psrnn/containers/install.sh',
        label,
    ]
    for recipe in (docker, registry, debian):
        assert not re.search(r"^\s*(RUN )?(uv sync|uv python install|\S*pip3? install)", recipe, re.M)


def test_recipes_copy_the_same_files_into_the_image():
    for path in RECIPE_FILES:
        assert (ROOT / path).exists(), path
    assert def_files(DEF) == def_files(DEBIAN_DEF) == RECIPE_FILES
    for line in def_sections(DEF.read_text())["files"].strip().splitlines():
        src, dst = line.split()
        assert dst == f"/opt/psrnn/{src}"
    copied = [
        s
        for line in re.findall(r"^COPY (?!--from)(.*) \S+$", DOCKERFILE.read_text(), re.M)
        for s in line.split()
    ]
    assert sorted(copied) == sorted(RECIPE_FILES)
    # the build context (containers/Dockerfile.dockerignore) holds exactly what the COPYs name
    ignore = [ln for ln in (CONTAINERS / "Dockerfile.dockerignore").read_text().splitlines() if ln[:1] != "#"]
    assert ignore[0] == "*"
    assert {ln[1:].rstrip("/") for ln in ignore if ln.startswith("!")} == set(RECIPE_FILES)


def test_dockerfile_takes_the_recipe_settings_and_checks_health():
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG TORCH=lock$", text, re.M) and re.search(r"^ARG PSRNN_PYTHON$", text, re.M)
    assert re.search(r"^HEALTHCHECK .*import psrnn, torch.*torch\.cuda\.is_available\(\)", text, re.M | re.S)
    assert "PATH=/opt/psrnn/.venv/bin:" in re.search(r"^ENV (.*?)\n\n", text, re.M | re.S)[1]


@pytest.mark.parametrize("path", [DEF, DEBIAN_DEF], ids=["registry", "debootstrap"])
def test_apptainer_definitions_have_their_sections_and_a_pinned_base(path):
    text = path.read_text()
    sections = def_sections(text)
    for name in ("arguments", "labels", "help", "files", "environment", "post", "test", "runscript"):
        assert name in sections, name
    assert sections["arguments"].split() == ["TORCH=lock"]
    assert "torch.cuda.is_available()" in sections["test"] and "import psrnn" in sections["test"]
    assert "PATH=/opt/psrnn/.venv/bin:" in sections["environment"]
    headers = def_headers(text)
    if path == DEF:  # registries: NVIDIA's CUDA base, uv from its image
        assert [k for k, _ in headers] == ["Bootstrap", "From", "Stage"] * 2
        assert {v for k, v in headers if k == "Bootstrap"} == {"docker"}
        assert "files from uv" in sections
        for ref in (v for k, v in headers if k == "From"):  # a tag, never latest or a bare name
            assert re.fullmatch(r"[\w./-]+:\d[\w.-]*", ref), ref
    else:  # no registry: Debian 12 from a Debian mirror, uv from PyPI (install.sh)
        assert dict(headers) == {
            "Bootstrap": "debootstrap",
            "OSVersion": "bookworm",
            "MirrorURL": "http://deb.debian.org/debian",
        }
        assert "files from uv" not in sections and "UV_PYTHON" not in sections["environment"]


def test_base_images_are_pinned_cuda_13_0_matching_the_locked_torch():
    pins = dockerfile_pins()
    base = re.fullmatch(
        r"nvidia/cuda:(\d+)\.(\d+)\.(\d+)-(base|runtime|cudnn-runtime)-ubuntu(\d+\.\d+)", pins["base"]
    )
    assert base, pins["base"]
    # torch's CUDA wheels (uv.lock) decide the CUDA version: cuda-toolkit 13.0.x, *-cu13
    toolkit = locked_version("cuda-toolkit")
    assert toolkit.split(".")[:2] == [base[1], base[2]] == pins["cuda"].split(".")
    assert pins["cuda"] == "13.0" == def_pins(DEBIAN_DEF)["cuda"]


def in_requires_python(version: str) -> bool:
    major, minor, _ = (int(x) for x in version.split("."))
    low, high = re.fullmatch(r">=(\d+\.\d+),<(\d+\.\d+)", pyproject()["project"]["requires-python"]).groups()
    return tuple(map(int, low.split("."))) <= (major, minor) < tuple(map(int, high.split(".")))


def test_versions_agree_with_the_lock_and_with_each_other():
    d, a, deb, defaults = dockerfile_pins(), def_pins(), def_pins(DEBIAN_DEF), install_defaults()
    assert d == a  # Dockerfile and registry definition: same base, uv, Python, labels
    assert deb.pop("base") == "debian:bookworm"
    same = {k: v for k, v in d.items() if k not in ("base", "uv_image", "python")}
    assert same == {k: v for k, v in deb.items() if k != "python"}
    assert d["torch"] == locked_version("torch") == "2.14.1"
    assert d["torchvision"] == locked_version("torchvision")
    assert d["version"] == pyproject()["project"]["version"]
    # install.sh's Python is the registry images' label; both Pythons satisfy requires-python
    assert defaults["PSRNN_PYTHON"] == d["python"] and in_requires_python(d["python"])
    assert deb["python"] == "3.11.2" and in_requires_python(deb["python"])  # Debian 12's python3
    assert defaults["TORCH"] == "lock"
    # one uv version everywhere: images, labels, install.sh, CI
    ci = re.search(r"pip install -q --target \.tools uv==(\S+)", (ROOT / ".ci" / "run").read_text())[1]
    assert d["uv_image"] == d["uv"] == deb["uv"] == defaults["UV_VERSION"] == ci


STUB = """#!/bin/sh
echo "{name} $*" >> "$STUB_LOG"
{body}
"""


def run_install(tmp_path: Path, env: dict[str, str], *args: str, uv: bool = True):
    """containers/install.sh in a copy of the recipe files, with apt-get, python3, uv, rm and
    the venv's python stubbed (each logs its command line): (exit status, stderr, commands)."""
    project = tmp_path / "opt-psrnn"
    (project / "containers").mkdir(parents=True)
    for f in ("pyproject.toml", "uv.lock", "containers/install.sh", "containers/torch-variant.sh"):
        shutil.copy2(ROOT / f, project / f)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    uv_stub = STUB.format(
        name="uv", body='[ "$1" = --version ] && echo "uv ${STUB_UV:-0.13.8} (stub)"; exit 0'
    )
    bodies = {
        "apt-get": "exit 0",
        "rm": "exit 0",  # the apt lists here are the host's
        # `python3 -m pip install uv==X` installs the uv stub
        "python3": f'cat > "$(dirname "$0")/uv" <<\'EOF\'\n{uv_stub}EOF\nchmod +x "$(dirname "$0")/uv"',
    }
    for name, body in bodies.items():
        (stubs / name).write_text(STUB.format(name=name, body=body))
    if uv:
        (stubs / "uv").write_text(uv_stub)
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / ".venv" / "bin" / "python").write_text(STUB.format(name="venv-python", body="exit 0"))
    for f in [*stubs.iterdir(), project / ".venv" / "bin" / "python"]:
        f.chmod(0o755)
    log = tmp_path / "log"
    log.touch()
    env = {
        "PATH": f"{stubs}:/usr/bin:/bin",
        "STUB_LOG": str(log),
        "UV_PYTHON_INSTALL_DIR": str(tmp_path),
        **env,
    }
    res = subprocess.run(
        ["bash", str(project / "containers" / "install.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return res.returncode, res.stderr, log.read_text().splitlines()


def test_install_script_registry_images_take_uvs_python_and_exactly_the_lock(tmp_path):
    """What the Dockerfile's two RUNs and psrnn.def's %post run: uv's CPython at the pinned
    version, uv.lock --frozen without the dev and workflow groups, no apt."""
    status, err, ran = run_install(tmp_path / "deps", {}, "--no-install-project")
    assert status == 0, err
    assert ran == [
        "uv --version",
        "uv python install 3.11.7",
        "uv sync --frozen --no-default-groups --python 3.11.7 --no-install-project",
    ]
    status, err, ran = run_install(tmp_path / "project", {})
    assert status == 0, err
    assert ran[2] == "uv sync --frozen --no-default-groups --python 3.11.7"
    assert ran[3].startswith("venv-python -c import platform, psrnn, torch")  # the image imports


def test_install_script_debian_takes_the_os_python_and_uv_from_pypi(tmp_path):
    """psrnn-debian.def: Debian's python3 (apt), uv from PyPI with the OS's
    pip (removed again), then the same lock; nothing downloads a Python."""
    status, err, ran = run_install(tmp_path, {"PSRNN_PYTHON": "system"}, uv=False)
    assert status == 0, err
    ran[5] = re.sub(r"^rm -rf /var/lib/apt/lists/.*", "rm -rf /var/lib/apt/lists/*", ran[5])  # expanded
    assert ran[:8] == [
        "apt-get update -q",
        "apt-get install -y -q --no-install-recommends ca-certificates python3-pip",
        "python3 -m pip install -q --no-cache-dir --break-system-packages --root-user-action=ignore "
        "uv==0.13.8",
        "apt-get purge -y -q --autoremove python3-pip",
        "apt-get clean",
        "rm -rf /var/lib/apt/lists/*",
        "uv --version",
        "uv sync --frozen --no-default-groups --python /usr/bin/python3",
    ]
    assert not [c for c in ran if c.startswith("uv python")]


def test_install_script_refuses_another_uv_and_passes_torch_to_the_variant_script(tmp_path):
    status, err, _ = run_install(tmp_path / "a", {"STUB_UV": "0.9.0"})
    assert status == 2 and err.strip() == "install.sh: uv 0.9.0, expected 0.13.8"
    status, err, ran = run_install(tmp_path / "b", {"TORCH": "cpu", "DRY_RUN": "1"})
    assert status == 0, err
    syncs = [c for c in ran if c.startswith("uv sync")]
    assert len(syncs) == 1 and "--no-install-package torch " in syncs[0]
    assert syncs[0].endswith("--no-default-groups --python 3.11.7")


def test_ci_runs_exactly_the_readme_test_command():
    ci = ROOT / ".ci" / "run"
    assert ci.stat().st_mode & 0o111  # executable
    lines = [
        ln.split("  #")[0].strip() for ln in ci.read_text().splitlines() if ln and not ln.startswith("#")
    ]
    readme = (ROOT / "README.md").read_text().split("```bash\n")[1].splitlines()[1]  # the test command
    setup, test = (part.split("#")[0].strip() for part in readme.split(" && "))
    assert lines[-1] == test == ".tools/bin/uv run --frozen pytest"
    assert setup == "python3 -m pip install -q --target .tools uv==0.13.8" and setup in lines


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
