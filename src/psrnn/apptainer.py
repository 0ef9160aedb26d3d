"""The workflow's jobs in the config's Apptainer image (`snakemake --use-singularity`): which
image, how to build a missing one, and the --apptainer-args the jobs need.

    snakemake --cores all --use-singularity      # the config's `container:` (containers/README.md)

The Snakefile calls these through psrnn.workflow, before any job starts.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from psrnn import config as C


def container(cfg: dict[str, Any]) -> str | None:
    """Image for `--use-singularity`: the config's `container:` (a .sif path or a URI)."""
    return cfg.get("container")


IMAGE_BUILD = {  # how to build the images the configs name (containers/README.md)
    "containers/psrnn.sif": "apptainer build containers/psrnn.sif containers/psrnn.def "
    "(or, without a container registry, sudo apptainer build containers/psrnn.sif "
    "containers/psrnn-debian.def)",
    "containers/psrnn-cpu.sif": "apptainer build --build-arg TORCH=cpu "
    "containers/psrnn-cpu.sif containers/psrnn.def",
}


def uses_apptainer(workflow: Any) -> bool:
    """Whether Snakemake runs jobs in the config's image (--use-singularity/--sdm apptainer)."""
    from snakemake_interface_executor_plugins.settings import DeploymentMethod

    return DeploymentMethod.APPTAINER in workflow.deployment_settings.deployment_method


# the files that make an image's Python environment (containers/*.def label the image with
# the same digest: `io.psrnn.env`); the jobs run the checkout's src/ (PYTHONPATH), so a
# code change needs no new image, a change of these does
ENV_FILES = ("uv.lock", "containers/install.sh", "containers/torch-variant.sh")
ENV_LABEL = "io.psrnn.env"


def env_digest(basedir: str | Path) -> str:
    """The digest the image recipes write into ENV_LABEL: sha256 of ENV_FILES' bytes, in
    order (the recipes' `cat ... | sha256sum`), its first 16 hex digits."""
    h = hashlib.sha256()
    for name in ENV_FILES:
        h.update((Path(basedir) / name).read_bytes())
    return h.hexdigest()[:16]


def apptainer_program() -> str | None:
    return shutil.which("apptainer") or shutil.which("singularity")


def image_labels(program: str, image: Path) -> dict[str, str]:
    """The image's labels (`apptainer inspect --json --labels`), or a one-line ConfigError."""
    res = subprocess.run(
        [program, "inspect", "--json", "--labels", str(image)], capture_output=True, text=True
    )
    if res.returncode:
        why = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise C.ConfigError(f"--use-singularity: {image} is not an image Apptainer can read ({why})")
    try:
        data = json.loads(res.stdout)
        return dict(data.get("data", {}).get("attributes", {}).get("labels") or {})
    except (ValueError, AttributeError):
        raise C.ConfigError(f"--use-singularity: {image}: apptainer inspect gave no labels") from None


def check_image(image: str | None, basedir: str | Path) -> None:
    """Raise a one-line ConfigError when the config's local image file does not exist, when
    no Apptainer is on PATH, or when the image's Python environment (its ENV_LABEL) is not
    the one the checkout locks."""
    if not image or "://" in image:
        return  # no container, or one Apptainer pulls itself (docker://, library://, oras://)
    path = Path(basedir) / image if (Path(basedir) / image).is_file() else Path(image)
    if not path.is_file():
        build = IMAGE_BUILD.get(image, "see containers/README.md")
        raise C.ConfigError(
            f"--use-singularity / --sdm apptainer: image {image} not found; build it first: "
            f"{build} (needs Apptainer >= 1.2; containers/README.md)"
        )
    program = apptainer_program()
    if program is None:
        raise C.ConfigError(
            "--use-singularity: no apptainer (or singularity) on PATH; on Debian 12: sudo bash "
            "containers/install-apptainer.sh (containers/README.md)"
        )
    built = image_labels(program, path).get(ENV_LABEL)
    want = env_digest(basedir)
    if built != want:
        build = IMAGE_BUILD.get(image, "see containers/README.md")
        raise C.ConfigError(
            f"--use-singularity: {image} holds another Python environment ({ENV_LABEL} "
            f"{built or 'missing'}, this checkout's uv.lock and install scripts: {want}); "
            f"rebuild it: {build}"
        )


def source_folders(cfg: dict[str, Any]) -> list[Path]:
    """The local folders the download jobs read: each enabled dataset's `source.local_dir`,
    its mirrors that are folder paths and the folder of an md5sum file (as written, so
    relative to the working directory: the checkout)."""
    out = []
    for dataset in C.enabled_datasets(cfg):
        src = cfg["datasets"][dataset].get("source") or {}
        md5 = src.get("md5")
        folders = [src.get("local_dir"), *(src.get("mirrors") or [])]
        folders += [str(Path(md5).parent)] if isinstance(md5, str) else []
        out += [Path(f).expanduser() for f in folders if f and "://" not in f]
    return out


def apptainer_args(args: str, cfg: dict[str, Any]) -> str:
    """The user's --apptainer-args plus what the jobs need: --nv (the host's GPUs and
    driver; only a warning on a host without) and a --bind for data/ and results/
    folders that are links to places outside the checkout, and for the datasets' local
    archive folders outside it (config/quick-imdb.yaml's ../shared/data/imdb), which
    Apptainer would not see."""
    words = shlex.split(args or "")
    if "--nv" not in words:
        words.append("--nv")
    here = Path.cwd().resolve()
    roots = (C.data_root(cfg), C.results_root(cfg), C.data_root(cfg).parent, C.results_root(cfg).parent)
    for root in (*roots, *source_folders(cfg)):
        real = root.resolve()
        if root.exists() and not real.is_relative_to(here) and str(real) not in words:
            words += ["--bind", str(real)]
    return shlex.join(words)
