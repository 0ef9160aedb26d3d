"""DVC's params.yaml: a suite config resolved into the one file `dvc repro` runs
(`python -m psrnn config <config> --dvc-params params.yaml`), and the keys each DVC stage
tracks in it (dvc.yaml lists the same; tests/test_workflow_dvc.py checks them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from psrnn import config as C
from psrnn.errors import ConfigError
from psrnn.workflow import shown

# Top-level keys each DVC stage tracks in params.yaml (dvc.yaml lists the same; a test
# checks): the keys its Snakemake jobs read, so `dvc exp run -S experiments.x.window=...`
# leaves the data stage alone, as Snakemake would. The compile stage tracks the whole file.
DVC_STAGE_PARAMS = {
    "data": ["name", "fixtures", "datasets", "job_env"],
    "train": ["name", "seeds", "datasets", "defaults", "experiments", "resources", "job_env"],
}
# The protocol keys a suite config may set beside them (config/relreg.yaml sets them all):
# how the search seeds, ties and groups are run; a train stage tracks those its config sets
DVC_PROTOCOL_PARAMS = ["search_seed", "ties", "fused_search", "fused_finals"]
# Optional keys written even when the source config lacks them (their meaning when
# absent), because DVC stops on a tracked key that is missing from params.yaml.
DVC_ABSENT = {"fixtures": "", "job_env": {}, "resources": {}, "defaults": {}}


def train_stage_params(raw: dict[str, Any]) -> list[str]:
    """The keys a train stage tracks in its config file, `raw` as written (not resolved):
    `study` where it names one, `name` and `seeds`, the protocol keys it sets, then the rest
    of DVC_STAGE_PARAMS["train"] (dvc.yaml lists them so; tests/test_workflow_dvc.py)."""
    train = DVC_STAGE_PARAMS["train"]
    own = [*(["study"] if "study" in raw else []), *train[:2]]
    return [*own, *(k for k in DVC_PROTOCOL_PARAMS if k in raw), *train[2:]]


DVC_SUFFIX = "-dvc"  # DVC's pipeline runs a config under its own name (dvc_params)


def dvc_params(path: str | Path, name: str | None = None) -> str:
    """params.yaml for `dvc repro`: the suite config at `path` resolved (its `extends:`
    chain merged, every tracked key present), as YAML with a header naming its source.

    DVC tracks and sets (`dvc exp run -S defaults.lr=0.001`) keys of one YAML file and
    cannot follow `extends:`, so it gets the resolved config; the stages run Snakemake
    with `--configfile params.yaml`. Its name (data/<name>, results/<name>) is the
    config's + "-dvc" unless given: a DVC experiment rewrites its outputs in place, and
    must not rewrite what `snakemake --configfile <config>` built or git holds
    (results/small is committed). A name given must end in "-dvc" too: no suite config's
    name does, so no other name is sure to be free of every suite's folders (the committed
    configs', one's own under another name, the bench's and recipe's results/ folders).
    """
    import yaml

    if name is not None and not name.endswith(DVC_SUFFIX):
        raise ConfigError(
            f"--dvc-name {name}: DVC's name ends in {DVC_SUFFIX} ({name}{DVC_SUFFIX}, say), so that its "
            f"stages never rewrite a suite's own data/{name} and results/{name} (results/small is committed)"
        )
    cfg = C.load_suite(path)
    cfg.pop("catalogue", None)  # what the file says of itself (config/README.md), not a setting
    source = shown(path)
    old = f"{C.data_root(cfg)}/"
    cfg["name"] = name or cfg["name"] + DVC_SUFFIX
    new = f"{C.data_root(cfg)}/"

    def moved(value: Any) -> Any:
        """Paths the config names under its own data folder (small.yaml's fixtures and
        mirrors) move with its name: DVC's pipeline shares no file with the config's."""
        if isinstance(value, dict):
            return {k: moved(v) for k, v in value.items()}
        if isinstance(value, list):
            return [moved(v) for v in value]
        return new + value[len(old) :] if isinstance(value, str) and value.startswith(old) else value

    cfg = C.validate_suite(moved(cfg), source=f"{source} under the name {cfg['name']!r}")  # a folder name
    cfg.update({k: v for k, v in DVC_ABSENT.items() if k not in cfg})
    header = (
        f"# The suite config `dvc repro` runs: {source} under the name {cfg['name']}, resolved by\n"
        f"#   python -m psrnn config {source} --dvc-params params.yaml\n"
        f"# (comments and explanations live in {source}). Edit it here, or per experiment\n"
        f"# with `dvc exp run -S defaults.lr=0.001`; re-run the command above after editing\n"
        f"# {source}. dvc.yaml lists the keys each stage depends on. Its own name keeps DVC's\n"
        f"# runs and experiments in data/{cfg['name']} and results/{cfg['name']}, apart from\n"
        f"# what `snakemake --configfile {source}` builds (and git holds).\n"
    )
    return as_dvc_writes(header + yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False, width=100))


def as_dvc_writes(text: str) -> str:
    """The YAML as DVC writes it back after `dvc exp run -S key=value` (its own round-trip
    parse and dump, dvc.utils.serialize): written so, a -S changes the line of its key and
    nothing else (PyYAML's layout was re-flowed in 58 lines for one key)."""
    import io

    from dvc.utils.serialize import parse_yaml_for_update
    from dvc.utils.serialize._yaml import _dump

    out = io.StringIO()
    _dump(parse_yaml_for_update(text, "params.yaml"), out)
    return out.getvalue()
