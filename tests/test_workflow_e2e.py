"""The small config through Snakemake, for real (no containers), in a scratch directory:
every stage runs, the metrics match tests/expected/small.json, a second run does nothing,
an edited config re-runs what it changes (in one invocation), a deleted run is redone
alone, and a workflow killed mid-run finishes with nothing lost.

    uv run --frozen pytest tests/test_workflow_e2e.py      # a few minutes on 2 CPU cores

The tests share one scratch directory and run in file order.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from psrnn import config as C
from psrnn import workflow as W
from psrnn.engine import regression

pytestmark = pytest.mark.slow

ROOT = C.ROOT
SMALL = ROOT / "config" / "small.yaml"
CFG = C.load_suite(SMALL)
RESULTS = C.results_root(CFG)


def snakemake_cmd(workdir: Path, *args: str, config: Path = SMALL) -> list[str]:
    return [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(config),
        "--cores",
        "2",
        *args,
    ]


def snakemake(
    workdir: Path, *args: str, timeout: int = 1200, config: Path = SMALL, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        snakemake_cmd(workdir, *args, config=config),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def psrnn(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "psrnn", *args], cwd=workdir, capture_output=True, text=True, timeout=120
    )


def job_counts(out: str) -> dict[str, int]:
    table = out.split("Job stats:")[1] if "Job stats:" in out else out
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "total"}


def mtimes(workdir: Path) -> dict[str, int]:
    """Modification times of the final runs' metrics.json that exist."""
    return {f: (workdir / f).stat().st_mtime_ns for f in W.final_metrics(CFG) if (workdir / f).exists()}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The small config's whole DAG, run once for the module."""
    d = tmp_path_factory.mktemp("small")
    t0 = time.monotonic()
    # as on a host with two GPUs: the small config's CPU jobs do not care, the run
    # offers two `gpu` slots (the Snakefile counts the host's GPUs)
    res = snakemake(d, env={**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"})
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-5000:]
    print(f"small config, whole DAG: {took:.0f}s")
    (d / "first-run.log").write_text(res.stdout + res.stderr)
    return d


def test_the_whole_small_dag_runs_and_matches_the_expected_metrics(workdir):
    for f in W.all_jobs_outputs(CFG):
        assert (workdir / f).exists(), f
    res = psrnn(workdir, "check", "--config", str(SMALL))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"all {len(regression.run_ids(CFG))} runs match" in res.stdout
    # every output is labelled as not a reproduction
    report = (workdir / RESULTS / "REPORT.md").read_text()
    assert "not a reproduction" in report
    summary = json.loads((workdir / RESULTS / "metrics.json").read_text())
    assert summary  # dvc metrics show reads this
    # the search chose a point and the final runs used it
    sel = json.loads((workdir / W.selection(CFG, "mnist_ps30_predrec_a4")).read_text())
    run = json.loads((workdir / W.run_metrics(CFG, "mnist_ps30_predrec_a4", 1)).read_text())
    assert run["config"]["lr"] == sel["overrides"]["lr"]
    # every job left a log and a benchmark
    first = (workdir / "first-run.log").read_text()  # where the logs are, said before the first job
    assert first.index(f"each job logs to {RESULTS}/logs/<rule>/") < first.index("rule fixtures:")
    logs = list((workdir / RESULTS / "logs").rglob("*.log"))
    benchmarks = list((workdir / RESULTS / "benchmarks").rglob("*.tsv"))
    assert len(logs) == len(benchmarks) >= len(W.final_metrics(CFG)) + 10


def test_a_local_run_offers_one_gpu_slot_per_gpu_of_the_host(workdir):
    """The `gpu` resource is the host's GPU count times jobs_per_gpu (1 in the small config)."""
    assert 'Provided resources: gpu=Resource("gpu", 2)' in (workdir / "first-run.log").read_text()


def test_a_second_run_has_nothing_to_do(workdir):
    res = snakemake(workdir, "-n")
    assert res.returncode == 0, res.stderr
    assert "Nothing to be done" in res.stdout + res.stderr


def test_snakemakes_html_report_holds_the_report_tables_and_figures(workdir):
    res = snakemake(workdir, "--report", "report.html")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    html = (workdir / "report.html").read_text()
    for name in ("REPORT.md", "table2.csv", "fig2_shared_proportion.png", "curves_mnist_gru.png"):
        assert name in html, name
    assert (
        "Table 2 of the paper (main results)" in html
    )  # the labels (psrnn.studies.private_shared.results.captions)


@pytest.mark.parametrize(
    "edit, expected",
    [
        # a dataset's preparation: its download and preparation, and every run on it
        (
            ("datasets", "dbpedia", "prepare", "max_length", 90),
            {"download": 1, "prepare": 1, "train": 4, "compile": 1, "paper": 1, "all": 1},
        ),
        # an experiment with a grid: its search, the selection and its final runs
        (
            ("experiments", "mnist_ps30_predrec_a4", "window", 8),
            {"search": 2, "select": 1, "train": 2, "compile": 1, "paper": 1, "all": 1},
        ),
    ],
    ids=["dataset", "grid-experiment"],
)
def test_an_edited_config_reruns_exactly_what_it_changes_in_one_invocation(workdir, edit, expected):
    """Also where an upstream job re-runs: its consumers must not wait for a second
    invocation (psrnn.workflow, 'which inputs may be ancient()')."""
    import yaml

    cfg = yaml.safe_load(SMALL.read_text())
    *keys, last, value = edit
    node = cfg
    for k in keys:
        node = node[k]
    node[last] = value
    edited = workdir / "edited.yaml"
    edited.write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = snakemake(workdir, "-n", "--quiet", "rules", config=edited)
    assert res.returncode == 0, res.stderr
    assert job_counts(res.stdout) == expected


def test_a_defaults_edit_reruns_only_the_runs_whose_resolved_settings_change(workdir):
    """The README's `dvc exp run -S defaults.lr=0.01`: experiments that set their own lr,
    or search it in a grid, keep their settings and are not trained again."""
    import yaml

    raw = yaml.safe_load(SMALL.read_text())
    raw["defaults"]["lr"] = 0.01
    edited = workdir / "edited-lr.yaml"
    edited.write_text(yaml.safe_dump(raw, sort_keys=False))
    after = C.load_suite(edited)
    changed = [
        (exp, seed)
        for exp in C.enabled_experiments(CFG)
        for seed in CFG["seeds"]
        if C.resolve_run(CFG, exp, seed) != C.resolve_run(after, exp, seed) and not C.has_grid(CFG, exp)
    ]
    assert 0 < len(changed) < len(C.enabled_experiments(CFG)) * len(CFG["seeds"])
    res = snakemake(workdir, "-n", "--quiet", "rules", config=edited)
    assert res.returncode == 0, res.stderr
    assert job_counts(res.stdout) == {"train": len(changed), "compile": 1, "paper": 1, "all": 1}


def test_a_lost_split_tensor_is_prepared_again_before_training(workdir):
    """train.pt deleted, its manifest still there, a run on it to redo: the dataset is
    prepared again first, instead of the training job failing on the missing file.
    (With every run done, Snakemake lets a missing intermediate file be.)"""
    lost = [workdir / W.prepared_files(CFG, "mnist")[0], workdir / W.run_metrics(CFG, "mnist_gru", 1)]
    kept = [(f.read_bytes(), f.stat().st_mtime_ns) for f in lost]
    for f in lost:
        f.unlink()
    try:
        res = snakemake(workdir, "-n", "--quiet", "rules")
        assert res.returncode == 0, res.stderr
        counts = job_counts(res.stdout)
        # re-prepared data re-runs the dataset's search and training jobs too (Snakemake
        # passes the re-run on), never the download
        assert counts.get("prepare") == 1 and counts.get("train", 0) >= 1, counts
        assert "download" not in counts, counts
    finally:
        for f, (data, mtime) in zip(lost, kept):  # as they were, so nothing is newer
            f.write_bytes(data)
            os.utime(f, ns=(mtime, mtime))
    assert "Nothing to be done" in snakemake(workdir, "-n").stdout


def test_a_damaged_manifest_or_selection_stops_the_workflow_before_it_plans(workdir):
    """A cut manifest.json, or `{}`, or one whose stamp's value was edited (battery A-2c), made
    every run on the dataset re-run (its stamp unreadable, missing or other), and Snakemake
    deleted their finished metrics.json before each job failed; a
    cut selected.json, or `{}`, planned final runs, not select. Now: one line naming the file, and no
    job planned or run, whatever the target."""
    for path in (W.manifest(CFG, "mnist"), W.selection(CFG, "mnist_ps30_predrec_a4")):
        f = workdir / path
        assert f.is_file(), path
        kept = (f.read_bytes(), f.stat().st_mtime_ns)
        finished = mtimes(workdir)
        try:
            damages = [kept[0][: len(kept[0]) // 2], b"{}"]  # cut; JSON without its job's keys
            if path == W.manifest(CFG, "mnist"):  # battery A-2c: the stamp's value edited, keys kept
                damages.append(json.dumps({**json.loads(kept[0]), "workflow_spec": "0" * 16}).encode())
            for damage in damages:
                f.write_bytes(damage)
                for args in (("-n",), ()):
                    res = snakemake(workdir, *args)
                    assert res.returncode != 0
                    assert (
                        "psrnn: damaged (not JSON, without the keys its job writes, not the manifest.json a "
                        "sound splits.sha256 beside it names, or choosing what its grid does not hold): "
                        f"{path}; " in res.stderr
                    )
                assert mtimes(workdir) == finished  # no finished run touched
        finally:
            f.write_bytes(kept[0])
            os.utime(f, ns=(kept[1], kept[1]))
    assert "Nothing to be done" in snakemake(workdir, "-n").stdout


def test_deleting_one_run_redoes_that_run_and_what_depends_on_it(workdir):
    target = workdir / W.run_metrics(CFG, "imdb_gru", 1)
    target.unlink()
    res = snakemake(workdir, "-n", "--quiet", "rules")
    assert res.returncode == 0, res.stderr
    assert job_counts(res.stdout) == {"train": 1, "compile": 1, "paper": 1, "all": 1}
    res = snakemake(workdir, "-n")
    assert "results/small/runs/imdb_gru/seed1/metrics.json" in res.stdout
    assert res.stdout.count("rule train:") == 1


def test_a_checkout_with_fresh_mtimes_retrains_nothing(workdir):
    """DVC (or git) checkouts give files new mtimes in any order; here every file gets
    one, upstream files the newest. No data or training job may run again; only the
    cheap deterministic ones (select, compile, paper) and the run deleted above."""
    for i, f in enumerate(reversed(W.all_jobs_outputs(CFG))):
        if (workdir / f).exists():
            os.utime(workdir / f, ns=(time.time_ns() + i * 10**6,) * 2)
    res = snakemake(workdir, "-n", "--quiet", "rules")
    assert res.returncode == 0, res.stderr
    counts = job_counts(res.stdout)
    assert counts.pop("train") == 1
    assert set(counts) <= {"select", "compile", "paper", "all"}, counts


def test_a_killed_workflow_finishes_with_nothing_lost(workdir):
    """Kill Snakemake and its jobs (SIGKILL, as a crash would) while training runs are
    redone, unlock, start again: the runs finished before are untouched, the rest
    complete, and every metric is again exactly the expected one."""
    redo = ["mnist_fig3_h16"]  # with imdb_gru seed1 (deleted above): 3 runs to redo
    for exp in redo:
        for seed in CFG["seeds"]:
            (workdir / W.run_metrics(CFG, exp, seed)).unlink()
    before = mtimes(workdir)
    proc = subprocess.Popen(
        snakemake_cmd(workdir),
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # wait until at least one redone run has finished and another has started
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            done = [e for e in redo for s in CFG["seeds"] if (workdir / W.run_metrics(CFG, e, s)).exists()]
            if done:
                break
            time.sleep(0.5)
        assert proc.poll() is None, "the workflow finished before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    unfinished = [f for f in W.final_metrics(CFG) if not (workdir / f).exists()]
    assert unfinished  # the kill interrupted the work
    res = snakemake(workdir, "--unlock")
    assert res.returncode == 0, res.stderr
    res = snakemake(workdir)
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-5000:]
    after = mtimes(workdir)
    assert {f: after[f] for f in before} == before  # finished runs were not redone
    res = psrnn(workdir, "check", "--config", str(SMALL))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Nothing to be done" in snakemake(workdir, "-n").stdout


def test_an_edited_dataset_is_prepared_and_trained_on_again_in_one_run(workdir):
    """For real this time (the dry runs above only list the jobs): re-prepared DBpedia, its
    four runs trained again from scratch on it, nothing else touched."""
    import yaml

    cfg = yaml.safe_load(SMALL.read_text())
    cfg["datasets"]["dbpedia"]["prepare"]["max_length"] = 90
    edited = workdir / "edited.yaml"
    edited.write_text(yaml.safe_dump(cfg, sort_keys=False))
    before = mtimes(workdir)
    res = snakemake(workdir, config=edited)
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-5000:]
    after = mtimes(workdir)
    redone = sorted(f for f in before if after[f] != before[f])
    assert redone == sorted(
        W.run_metrics(CFG, e, s) for e in ("dbpedia_gru", "dbpedia_ps50_rec_a20") for s in CFG["seeds"]
    )
    manifest = json.loads((workdir / W.manifest(CFG, "dbpedia")).read_text())
    assert manifest["length"]["train"]["max"] == 90
    for f in redone:
        log = (
            workdir / RESULTS / "logs" / "train" / Path(f).parent.relative_to(RESULTS / "runs")
        ).with_suffix(".log")
        assert "starting over: " in log.read_text() and "prepared data" in log.read_text()
    assert "Nothing to be done" in snakemake(workdir, "-n", config=edited).stdout
