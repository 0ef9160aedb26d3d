"""What a job depends on besides its files, and what its outputs are stamped with: the
settings specs of data and training jobs, their digests (SPEC_KEY), and a training job's
CPU threads.

    python -m psrnn select --config config/small.yaml --experiment mnist_ps   # stamps selected.json

The Snakefile helper (psrnn.workflow) hands these to Snakemake as params, and the jobs
themselves (select, restamp, download, prepare, train's threads) write or read the same
values. They live here, below both, so that the engine and the studies never import the
Snakefile helper (tests/test_style.py): the workflow imports the engine's code digest, and a
job's code importing the workflow back made the two one tangle.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from psrnn import config as C
from psrnn import registry
from psrnn.engine import codehash

# Keys of `resources.train` that are not Snakemake resources, and their defaults: the
# rule's `threads` (torch threads per job), and how many training jobs share one GPU of
# a local run (the `gpu` pool is the host's GPUs times this; psrnn.gpus places them).
TRAIN_SETTINGS = {"threads": 1, "jobs_per_gpu": 1}


def train_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The suite's `resources.train` ({} when it has none)."""
    return (cfg.get("resources") or {}).get("train") or {}


def train_threads(cfg: dict[str, Any]) -> int:
    """The `threads` of a search/train job: `resources.train.threads` (default 1). Snakemake
    caps it at --cores; `--set-threads train=N` overrides it."""
    return train_config(cfg).get("threads", TRAIN_SETTINGS["threads"])


def jobs_per_gpu(cfg: dict[str, Any]) -> int:
    """Training jobs that share one GPU of a local run: `resources.train.jobs_per_gpu`
    (default 1)."""
    return train_config(cfg).get("jobs_per_gpu", TRAIN_SETTINGS["jobs_per_gpu"])


def dataset_spec(cfg: dict[str, Any], dataset: str) -> str:
    """Everything a dataset's download and preparation depend on, as stable JSON: a Snakemake
    param, so editing it re-runs exactly that dataset's jobs and what follows. Its `settings`
    are run settings, not data: they reach each training job through its resolved settings,
    so choosing one (or rewording its evidence) re-prepares nothing."""
    entry = {k: v for k, v in cfg["datasets"][dataset].items() if k != "settings"}
    return json.dumps({"dataset": dataset, "name": cfg["name"], **entry}, sort_keys=True)


def experiment_spec(
    cfg: dict[str, Any],
    experiment: str,
    point: str | None = None,
    code: bool = True,
    digest: str | None = None,
) -> str:
    """Everything a training job depends on besides its files, as stable JSON: the jobs'
    environment, the digest of the code that trains it (psrnn.engine.codehash: comments and
    docstrings aside), the run's resolved settings (the seed aside) and its dataset's
    preparation.
    A search job's settings are its grid point's; a final run's (and the selection's) are
    the experiment's without the settings its grid chooses, plus the grid's points, whose
    choice arrives as selected.json.
    A Snakemake param: an edit re-runs exactly the jobs whose resolved settings it changes
    (a `defaults` value that an experiment or its grid overrides changes none)."""
    exp = cfg["experiments"][experiment]
    seed = C.search_seed(cfg)
    if point:
        settings = C.resolve_run(cfg, experiment, seed, point=point).to_dict()
    else:
        points = dict(C.grid_points(exp))
        chosen = {k for overrides in points.values() for k in overrides}
        settings = {
            k: v for k, v in C.resolve_run(cfg, experiment, seed).to_dict().items() if k not in chosen
        }
        settings["grid"] = points or None
    settings.pop("seed")
    spec = {
        "job_env": cfg.get("job_env", {}),
        "code": (digest or codehash.training_digest(registry.study_name(cfg))) if code else None,
        "run": settings,
        "data": json.loads(dataset_spec(cfg, exp["dataset"])),
    }
    return json.dumps(spec, sort_keys=True)


# --- the stamps: which inputs may be ancient() --------------------------------------------
#
# Snakemake does not re-run a job whose params changed when, in the same invocation, a job
# upstream of it re-runs and every file between them is ancient(): the upstream job masks
# the downstream one's own checks, and ancient() files do not pass the re-run on
# (snakemake/snakemake#4166, seen with 9.27). Editing a dataset's preparation would
# re-prepare it but train on the new data only at the next invocation. So the jobs
# that write download.json, manifest.json and selected.json stamp them with a digest of
# the settings they were made with (SPEC_KEY), and the Snakefile marks such a file
# ancient() only while its stamp matches the config (psrnn.workflow.is_current): a file
# about to be remade is a plain input, and its re-run reaches everything downstream.

SPEC_KEY = "workflow_spec"


def spec_digest(spec: str) -> str:
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def dataset_stamp(cfg: dict[str, Any], dataset: str) -> dict[str, str]:
    """What download and prepare (run from a suite config) record in their outputs."""
    return {SPEC_KEY: spec_digest(dataset_spec(cfg, dataset))}


def selection_stamp(cfg: dict[str, Any], experiment: str, digest: str | None = None) -> dict[str, str]:
    """What select records in selected.json: the settings and the training code's digest, so
    after a code change the selection is a plain input and one invocation re-runs search,
    select, final runs and compile (an ancient one masked the runs' params: #4166)."""
    spec = experiment_spec(cfg, experiment, digest=digest)  # digest: of other training code (restamp)
    if cfg.get("ties") == "draw":  # the draws map the final seeds to tied points
        spec = json.dumps({"spec": spec, "ties": "draw", "seeds": list(cfg["seeds"])}, sort_keys=True)
    return {SPEC_KEY: spec_digest(spec)}
