"""`python -m psrnn restamp` (psrnn.engine.restamp) on a copy of the committed second-study
runs and on runs trained here: runs re-trained by today's code must give their recorded
numbers before any stamp is rewritten; only those runs (and the final runs that took their
records) are re-stamped, a selection once its whole search is, with the proof written
first; a run that differs is named, and nothing is written; a damaged proof file or a
second restamp of the folder stops it before anything trains."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from psrnn import config as C
from psrnn import workflow as W
from psrnn.engine import codehash
from psrnn.engine.stale import stale_runs
from psrnn.errors import UserError
from psrnn.files import read_json, write_json

OLD = "f" * 64  # the digest of some other training code
EXPERIMENT = "lstm_l2"


@pytest.fixture
def suite(tmp_path, monkeypatch):
    """relreg.yaml with one experiment, over a copy of its committed runs stamped as made by
    other training code (runs and selection), as the working folder."""
    raw = yaml.safe_load((C.ROOT / "config" / "relreg.yaml").read_text())
    raw["experiments"] = {EXPERIMENT: raw["experiments"][EXPERIMENT]}
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(raw))
    results = tmp_path / "results" / "relreg"
    for part in ("runs", "search"):
        shutil.copytree(C.ROOT / "results" / "relreg" / part / EXPERIMENT, results / part / EXPERIMENT)
    monkeypatch.chdir(tmp_path)
    cfg = C.load_suite(path)
    for metrics in results.rglob("metrics.json"):
        write_json(metrics, {**read_json(metrics), "training_code": OLD})
    selected = results / "search" / EXPERIMENT / "selected.json"
    write_json(selected, {**read_json(selected), **W.selection_stamp(cfg, EXPERIMENT, digest=OLD)})
    return path, cfg, results


def restamp(path, *options):
    """`python -m psrnn restamp` as a user runs it: it applies the suite's job_env (the
    kernel variables the runs were trained under) before torch starts."""
    return subprocess.run(
        [sys.executable, "-m", "psrnn", "restamp", "--config", str(path), *options],
        capture_output=True,
        text=True,
    )


def snapshot(results):
    """Every file under `results` but restamp's lock (proofs.LOCK_NAME: a refused restamp
    takes it, before it reads restamp.json, and it holds no result)."""
    return {
        p: p.read_bytes() for p in sorted(results.rglob("*")) if p.is_file() and p.name != ".restamp.lock"
    }


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_restamp_refuses_a_run_that_today_s_code_trains_otherwise_and_writes_nothing(suite, jobs):
    """In this process, or with other groups re-training beside it in their own processes."""
    path, cfg, results = suite
    tampered = results / "runs" / EXPERIMENT / "seed3" / "metrics.json"  # a member of the proof's group
    record = read_json(tampered)
    write_json(tampered, {**record, "best_epoch": record["best_epoch"] + 1})
    before = snapshot(results)
    done = restamp(path, "--jobs", jobs)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    name = tampered.relative_to(results.parents[1])
    assert f"{name}: re-trained by today's code, best_epoch: recorded {record['best_epoch'] + 1}" in line
    assert "the code change moves numbers" in line
    assert snapshot(results) == before  # no stamp rewritten, no proof recorded


def test_restamp_re_trains_and_re_stamps_every_stale_run_and_the_selection(suite):
    """Two re-trainings at a time (--jobs 2), each in its own process; the runs' numbers are
    those they recorded, as in one process (the other tests here)."""
    path, cfg, results = suite
    now = codehash.training_digest("relreg")
    stale = stale_runs(cfg, code=True)
    assert len(stale) == len(list(results.rglob("metrics.json"))) > 20
    assert restamp(path, "--jobs", "0").stderr.strip() == "psrnn restamp: error: --jobs 0: must be at least 1"
    done = restamp(path, "--jobs", "2")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"same numbers: results/relreg/runs/{EXPERIMENT}/seed" in out  # a final run and its group
    assert stale_runs(cfg, code=True) == []
    assert all(read_json(p)["training_code"] == now for p in results.rglob("metrics.json"))
    selected = results / "search" / EXPERIMENT / "selected.json"
    assert W.is_current(selected, W.selection_stamp(cfg, EXPERIMENT))
    [proof] = read_json(results / "restamp.json")["restamps"]
    assert proof["from"] == [OLD] and proof["to"] == now and proof["restamped_runs"] == len(stale)
    assert proof["command"] == f"python -m psrnn restamp --config {path} --jobs 2"
    every = {str(p.relative_to(results.parents[1])) for p in results.rglob("metrics.json")}
    assert set(proof["retrained"]) == every  # every stale run, each with its fused group
    assert proof["left_stale"] == 0
    assert proof["restamped_selections"] == [str(selected.relative_to(results.parents[1]))]
    again = restamp(path)  # nothing left: it says so and writes nothing
    assert again.returncode == 0 and "every finished run records today's training code" in again.stdout


# --- what a restamp may stamp, on runs trained here ---------------------------------------------------

# config/relreg-ci.yaml's slice, trained by Snakemake in a scratch folder: seed 0 is the search
# seed and the final seed, so each final run takes its selected point's search run's record
CI_CONFIGS = {
    "ci": {},  # one process per run; proto_both's grid holds noise 0.0 and 0.1
    "ci-fused": {"fused_search": True, "fused_finals": True},  # groups whose finals all reused
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A folder with both configs' runs, search and final, trained by Snakemake."""
    root = tmp_path_factory.mktemp("restamp-ci")
    for name, extra in CI_CONFIGS.items():
        cfg = {"extends": str(C.ROOT / "config" / "relreg-ci.yaml"), "name": f"restamp-{name}", **extra}
        (root / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
        done = snakemake(str(root / f"{name}.yaml"), "--cores", "2", "--directory", str(root))
        assert done.returncode == 0, done.stderr[-2000:]
    return root


@pytest.fixture
def ci(trained, tmp_path, monkeypatch):
    """A copy of the trained folder with every run and selection stamped as made by other code,
    each file keeping its time: as the old code left them, older than the compiled outputs
    (a record rewritten now would be newer, and Snakemake would compile again by time)."""
    shutil.copytree(trained, tmp_path / "w", ignore=shutil.ignore_patterns("log", "locks", "incomplete"))
    monkeypatch.chdir(tmp_path / "w")

    def rewrite(path: Path, obj: dict) -> None:
        st = path.stat()
        write_json(path, obj)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    cfgs = {}
    for name in CI_CONFIGS:
        cfg = C.load_suite(f"{name}.yaml")
        cfgs[name] = cfg
        for metrics in C.results_root(cfg).rglob("metrics.json"):
            rewrite(metrics, {**read_json(metrics), "training_code": OLD})
        for exp in C.enabled_experiments(cfg):
            selected = C.selection_path(cfg, exp)
            rewrite(selected, {**read_json(selected), **W.selection_stamp(cfg, exp, digest=OLD)})
    return cfgs


def test_a_sample_stamps_only_the_runs_it_re_trained(ci):
    """The issue's case: a change in a branch only noisy runs take. A sample of one run per
    experiment re-trains proto_both's final run (noise 0.0, through its search run), which
    never takes that branch; it stamps that run and its search run, and the noise-0.1 search
    run stays stale, with proto_both's selection: `stale --code` still lists it."""
    cfg = ci["ci"]
    noisy = next(p for p, _, _ in stale_runs(cfg, code=True) if "noise-0.1" in str(p))
    done = subprocess.run(
        [sys.executable, "-m", "psrnn", "restamp", "--config", "ci.yaml", "--per-experiment", "1"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    left = [p for p, _, _ in stale_runs(cfg, code=True)]
    assert noisy in left and all(read_json(p)["training_code"] == OLD for p in left)
    [proof] = read_json(C.results_root(cfg) / "restamp.json")["restamps"]
    assert proof["restamped_runs"] + proof["left_stale"] == 2 + 4  # 2 finals, 2 x 2 search runs
    assert proof["left_stale"] == len(left) >= 1 and str(noisy) not in proof["retrained"]
    assert str(C.selection_path(cfg, "proto_both")) not in proof["restamped_selections"]
    assert not W.is_current(C.selection_path(cfg, "proto_both"), W.selection_stamp(cfg, "proto_both"))
    assert f"{len(left)} stale run(s) not re-trained stay stale" in done.stdout
    # the whole proof re-trains the rest and then stamps it: nothing stale, two proofs
    again = subprocess.run(
        [sys.executable, "-m", "psrnn", "restamp", "--config", "ci.yaml"], capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr
    assert stale_runs(cfg, code=True) == []
    assert [p["left_stale"] for p in read_json(C.results_root(cfg) / "restamp.json")["restamps"]] == [
        len(left),
        0,
    ]


def test_an_edited_record_outside_a_sample_is_never_stamped_and_the_whole_proof_names_it(ci):
    cfg = ci["ci"]
    noisy = next(p for p, _, _ in stale_runs(cfg, code=True) if "noise-0.1" in str(p))
    record = read_json(noisy)
    write_json(noisy, {**record, "valid_main_loss": record["valid_main_loss"] + 1e-6})
    subprocess.run(
        [sys.executable, "-m", "psrnn", "restamp", "--config", "ci.yaml", "--per-experiment", "1"],
        check=True,
        capture_output=True,
    )
    assert read_json(noisy)["training_code"] == OLD  # outside the sample: not stamped
    before = snapshot(C.results_root(cfg))
    done = subprocess.run(
        [sys.executable, "-m", "psrnn", "restamp", "--config", "ci.yaml"], capture_output=True, text=True
    )
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert f"{noisy}: re-trained by today's code, valid_main_loss: recorded" in line
    assert snapshot(C.results_root(cfg)) == before


def test_fused_final_runs_that_all_took_their_search_runs_are_proven_by_them(ci):
    """restamp read the first record of an empty group (IndexError): every final run of a
    fused group took its search run's record, so no final trained. Each is now proven by
    re-training the search run (its group) it took, and stamped with it."""
    cfg = ci["ci-fused"]
    finals = [p for p in C.results_root(cfg).glob("runs/*/seed*/metrics.json")]
    assert finals and all(read_json(p).get("reused_from") for p in finals)
    done = subprocess.run(
        [sys.executable, "-m", "psrnn", "restamp", "--config", "ci-fused.yaml"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert stale_runs(cfg, code=True) == []
    [proof] = read_json(C.results_root(cfg) / "restamp.json")["restamps"]
    assert all("/search/" in p for p in proof["retrained"]) and proof["restamped_runs"] == len(finals) + 4


def test_a_damaged_proof_file_or_a_second_restamp_stops_before_anything_trains(ci, tmp_path):
    from psrnn.engine import restamp as R

    cfg = ci["ci"]
    proof = C.results_root(cfg) / "restamp.json"
    proof.write_text('{"restamps": [')
    before = snapshot(C.results_root(cfg))
    done = subprocess.run(
        [sys.executable, "-m", "psrnn", "restamp", "--config", "ci.yaml"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{proof}: not a JSON file" in done.stderr and "same numbers" not in done.stdout
    assert snapshot(C.results_root(cfg)) == before
    proof.unlink()
    held = R.lock(cfg)  # another restamp of this folder is running
    other_tmp = tmp_path / "other-tmp"  # N25: the lock once lived in TMPDIR, and both ran
    other_tmp.mkdir()
    try:
        lines = [
            subprocess.run(
                [sys.executable, "-m", "psrnn", "restamp", "--config", "ci.yaml"],
                capture_output=True,
                text=True,
                env={**os.environ, **env},
            )
            for env in ({}, {"TMPDIR": str(other_tmp)})
        ]
    finally:
        held.close()
    for done in lines:
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            f"psrnn restamp: error: another restamp of {C.results_root(cfg)} is running: wait for it to end"
        ], done.stderr
    assert all(read_json(p)["training_code"] == OLD for p in C.results_root(cfg).rglob("metrics.json"))


def snakemake(config: str, *args: str) -> subprocess.CompletedProcess:
    """Snakemake on this checkout's Snakefile with the suite `config`, from the working folder."""
    argv = [sys.executable, "-m", "snakemake", "-s", str(C.ROOT / "Snakefile"), "--configfile", config, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=900)


def snakemake_plan(config: str) -> str:
    done = snakemake(config, "--cores", "1", "-n")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_after_a_sound_restamp_snakemake_re_runs_nothing_and_checkpoints_resume(ci):
    """After a no-op refactor Snakemake's records of the training jobs hold the old digest in
    their params ("Params have changed"), so it planned every job again though restamp had
    proven them; and ckpt_last.pt kept the old digest, so a proven run whose metrics.json is
    lost could not resume. Here both are as a refactor leaves them; restamp re-stamps the
    checkpoints, drops Snakemake's records of the jobs it proved and keeps the files' times."""
    import torch

    cfg = ci["ci-fused"]
    now = codehash.training_digest("relreg")
    for record in Path(".snakemake", "metadata").iterdir():  # the jobs as the old code ran them
        record.write_text(record.read_text().replace(now, OLD))
    ckpts = sorted(C.results_root(cfg).rglob("ckpt_last.pt"))
    assert ckpts
    for ckpt in ckpts:
        torch.save({**torch.load(ckpt, weights_only=True), "code": OLD}, ckpt)
    assert "Params have changed since last execution" in snakemake_plan("ci-fused.yaml")
    times = {p: p.stat().st_mtime_ns for p in C.results_root(cfg).rglob("*.json")}
    done = subprocess.run(
        [sys.executable, "-m", "psrnn", "restamp", "--config", "ci-fused.yaml"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert f"re-stamped {len(ckpts)} checkpoint(s)" in done.stdout
    assert "Nothing to be done" in snakemake_plan("ci-fused.yaml")
    assert all(torch.load(c, weights_only=True)["code"] == now for c in ckpts)
    assert [p for p, ns in times.items() if p.stat().st_mtime_ns != ns] == []  # stamps keep files' times
    assert (C.results_root(cfg) / "restamp.json").is_file()


def test_verify_re_trains_what_an_earlier_sample_stamped_and_names_a_record_that_differs(ci):
    """Before a restamp re-trained every run it stamped, one run per experiment vouched for
    the rest. `--verify` re-trains the runs that today's digest reached by such a stamp (in
    no proof's re-trained list) and adds their proof; an edited one is named, nothing written."""
    cfg = ci["ci"]
    now = codehash.training_digest("relreg")
    runs = sorted(C.results_root(cfg).glob("*/*/*/metrics.json"))  # runs/<exp>/seed<k>, search/<exp>/<point>
    assert len(runs) == 6
    for path in runs:
        write_json(path, {**read_json(path), "training_code": now})
    sampled = str(next(p for p in runs if "/runs/" in str(p)))
    old_rule = {"from": [OLD], "to": now, "retrained": [sampled], "restamped_runs": len(runs)}
    proof = C.results_root(cfg) / "restamp.json"
    write_json(proof, {"restamps": [old_rule]})
    noisy = next(p for p in runs if "noise-0.1" in str(p))
    record = read_json(noisy)
    write_json(noisy, {**record, "best_epoch": record["best_epoch"] + 1})
    before = snapshot(C.results_root(cfg))
    verify = [sys.executable, "-m", "psrnn", "restamp", "--config", "ci.yaml", "--verify"]
    done = subprocess.run(verify, capture_output=True, text=True)
    assert (
        done.returncode == 2 and f"{noisy}: re-trained by today's code, best_epoch: recorded" in done.stderr
    )
    # the proof is written experiment by experiment: lstm_l2 (before proto_both) keeps its
    # proof, the edited run's experiment adds nothing, and no record is touched
    [_, first] = read_json(proof)["restamps"]
    assert sorted(first["verified"]) == sorted(
        str(p) for p in runs if "lstm_l2" in str(p) and str(p) != sampled
    )
    assert {p: b for p, b in snapshot(C.results_root(cfg)).items() if p != proof} == {
        p: b for p, b in before.items() if p != proof
    }
    write_json(noisy, record)
    done = subprocess.run(verify, capture_output=True, text=True)  # goes on from there
    assert done.returncode == 0, done.stderr
    rest = [p for p in runs if "proto_both" in str(p) and str(p) != sampled]
    assert f"{len(rest)} of the {len(rest)} run(s) stamped by a sample are proven" in done.stdout
    [_, first, added] = read_json(proof)["restamps"]
    assert sorted(first["verified"] + added["verified"]) == sorted(str(p) for p in runs if str(p) != sampled)
    again = subprocess.run(verify, capture_output=True, text=True).stdout
    assert "every run stamped by a restamp was re-trained by one" in again


# a write that fails part-way: the third metrics.json restamp writes (paths under the working
# folder; a run re-trained in the scratch folder writes an absolute path) raises ENOSPC
FAIL_THIRD_STAMP = """
import errno, os
import psrnn.files as F
_write, _count = F.write_json, [0]
def write_json(target, obj):
    if str(target).endswith("metrics.json") and not os.path.isabs(str(target)):
        _count[0] += 1
        if _count[0] == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))
    _write(target, obj)
F.write_json = write_json
"""


def stale_code(config: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "psrnn", "stale", "--config", config, "--code"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()


def test_a_write_failure_part_way_leaves_the_stamped_runs_proven_and_the_next_restamp_finishes(ci, tmp_path):
    """Issue 51 case 3a: the third stamp fails (no space left). The command says so in one
    line; the proof, written first, names every run it stamps (and is marked incomplete);
    the runs stamped carry today's digest, the rest stay stale, exactly what `stale --code`
    lists; the same command proves and stamps the rest, with a second proof record."""
    import os

    cfg = ci["ci"]
    now = codehash.training_digest("relreg")
    runs = sorted(C.results_root(cfg).glob("*/*/*/metrics.json"))
    assert len(runs) == 6
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FAIL_THIRD_STAMP)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "psrnn", "restamp", "--config", "ci.yaml"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "No space left on device; re-stamped 2 of 6 run(s)" in line
    assert "run the same command again to finish" in line
    proof = C.results_root(cfg) / "restamp.json"
    [first] = read_json(proof)["restamps"]
    stamped = [p for p in runs if read_json(p)["training_code"] == now]
    unstamped = [p for p in runs if p not in stamped]
    assert len(stamped) == 2 and first["complete"] is False
    assert {str(p) for p in stamped} <= set(first["restamped"]) and first["to"] == now
    assert all(read_json(p)["restamped_from"] == OLD for p in stamped)
    assert all(read_json(p)["training_code"] == OLD for p in unstamped)
    listed = [ln.split(": ")[0] for ln in stale_code("ci.yaml") if "trained by other code" in ln]
    assert sorted(listed) == sorted(str(p) for p in unstamped)
    again = subprocess.run(argv, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert all(read_json(p)["training_code"] == now for p in runs)
    first, second = read_json(proof)["restamps"]
    assert first["complete"] is True and second["complete"] is True
    assert sorted(second["restamped"]) == sorted(str(p) for p in unstamped)
    for exp in C.enabled_experiments(cfg):
        assert W.is_current(C.selection_path(cfg, exp), W.selection_stamp(cfg, exp))
    assert stale_runs(cfg, code=True) == []


def test_a_deleted_proof_is_named_and_restamp_verify_proves_the_runs_again(ci):
    """Issue 51 case 3c: a restamp keeps each stamped run's old digest (`restamped_from`), so
    with restamp.json deleted its runs are not taken for today's code's: `stale --code` names
    them and says to restore the file from git, restamp refuses in one line (its new record
    would replace the lost ones), and `restamp --verify` re-trains them and writes a proof.
    A run trained by today's code (no `restamped_from`) needs no proof and is not named."""
    cfg = ci["ci"]
    now = codehash.training_digest("relreg")
    runs = sorted(C.results_root(cfg).glob("*/*/*/metrics.json"))
    trained_today = next(p for p in runs if "lstm_l2" in str(p) and "/search/" in str(p))
    for path in runs:  # as a restamp leaves them, its restamp.json then deleted
        extra = {} if path == trained_today else {"restamped_from": OLD}
        write_json(path, {**read_json(path), "training_code": now, **extra})
    proof = C.results_root(cfg) / "restamp.json"
    assert not proof.exists()
    lines = stale_code("ci.yaml")
    named = [ln.split(": ")[0] for ln in lines if "does not name" in ln and ln.startswith("results/")]
    assert sorted(named) == sorted(str(p) for p in runs if p != trained_today)
    assert f"restore it from git (git checkout -- {proof})" in lines[-1]
    refused = subprocess.run(
        [sys.executable, "-m", "psrnn", "restamp", "--config", "ci.yaml"], capture_output=True, text=True
    )
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert f"{len(named)} run(s) were re-stamped by a restamp that {proof} does not name" in line
    assert not proof.exists()
    verify = subprocess.run(
        [sys.executable, "-m", "psrnn", "restamp", "--config", "ci.yaml", "--verify"],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stderr
    [record] = read_json(proof)["restamps"]
    assert sorted(record["verified"]) == sorted(named)
    assert not any("does not name" in ln for ln in stale_code("ci.yaml"))


def test_only_a_proof_to_todays_digest_proves_a_run_that_records_it(ci):
    """The confirming pass of stop 62, 3i/3j: run names were pooled over the proofs of every
    digest, so a run stamped by hand to today's digest, or one whose proof to it was deleted
    while an older proof named it, passed as proven."""
    from psrnn.engine.proofs import unproven

    cfg = ci["ci"]
    now = codehash.training_digest("relreg")
    runs = sorted(C.results_root(cfg).glob("*/*/*/metrics.json"))
    for path in runs:  # stamped to today's digest by hand, an older digest kept
        write_json(path, {**read_json(path), "training_code": now, "restamped_from": OLD})
    names = [str(p) for p in runs]
    older = {"from": [OLD], "to": OLD, "retrained": names, "restamped": names, "complete": True}
    assert sorted(map(str, unproven(cfg, [older], now))) == sorted(names)
    today = {**older, "from": [OLD], "to": now}
    assert unproven(cfg, [older, today], now) == []


# a GPU host as torch sees it, on this CPU: CUDA "available", an H100 (nothing is run on it)
FAKE_H100 = """
import torch
torch.cuda.is_available = lambda: True
torch.cuda.get_device_name = lambda *a: "NVIDIA H100 80GB HBM3"
"""


def test_a_run_is_trained_again_on_the_kind_of_device_it_trained_on(ci, tmp_path, monkeypatch):
    """On a GPU host a CPU run whose `device:` is `auto` was re-trained on the GPU (other
    numbers: a false "the code change moves numbers"); a GPU run is trained again only on
    the GPU model and torch it recorded, and elsewhere refused in one line naming both."""
    import os

    import torch

    from psrnn.engine import fit, retrain

    cfg = ci["ci"]
    runs = sorted(C.results_root(cfg).glob("*/*/*/metrics.json"))
    cpu_run = next(p for p in runs if "/search/lstm_l2/" in str(p))
    record = read_json(cpu_run)  # as the first study's configs leave it: `auto`, a GPU where there is one
    write_json(cpu_run, {**record, "config": {**record["config"], "device": "auto"}})
    with monkeypatch.context() as mp:  # a GPU host, as torch sees it
        mp.setattr(torch.cuda, "is_available", lambda: True)
        mp.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
        for k, v in cfg["job_env"].items():
            mp.setenv(k, v)
        asked = []
        mp.setattr(fit, "fit", lambda run, out_dir, meta, log: asked.append(run.device) or record)
        assert retrain.retrain(cfg, [cpu_run], tmp_path / "scratch") == {cpu_run: []}
    assert asked == ["cpu"]

    on_gpu = {"device": "cuda", "device_name": "NVIDIA H200", "torch_version": "2.11.0+cu130"}
    for path in runs:  # a folder of GPU runs (the refusal comes before anything trains)
        write_json(path, {**read_json(path), **on_gpu})
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FAKE_H100)
    hooked = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}
    before = snapshot(C.results_root(cfg))
    for env, here in ((hooked, "NVIDIA H100 80GB HBM3"), (os.environ, "no GPU")):
        done = subprocess.run(
            [sys.executable, "-m", "psrnn", "restamp", "--config", "ci.yaml"],
            capture_output=True,
            text=True,
            env=env,
        )
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert (
            line.startswith("psrnn restamp: error: results/restamp-ci/")
            and (
                f": trained on NVIDIA H200 under torch 2.11.0+cu130, this machine has {here} under "
                f"torch {torch.__version__}: a GPU run is trained again on its GPU model and torch only"
            )
            in line
        )
        assert snapshot(C.results_root(cfg)) == before
    # with --jobs N the check comes before the workers start (they had each loaded torch and
    # the data first, then refused one by one)
    monkeypatch.setattr(retrain, "retrain_all", lambda *a: pytest.fail("workers started before the check"))
    with pytest.raises(UserError, match="this machine has no GPU under torch"):
        retrain.prove(cfg, runs, {p: read_json(p) for p in runs}, "ci.yaml", jobs=2)


@pytest.mark.parametrize(
    "text,message",
    [
        ('{"restamps": [1, "x"]}', "restamps[0] is int 1, not a proof record"),
        (
            '{"restamps": [{"to": 5, "complete": false, "restamped": 3}]}',
            "restamps[0].restamped is 3, not a list of paths",
        ),
        ('{"restamps": [{"to": 5}]}', "restamps[0].to is 5, not str"),
        ('{"restamps": [{"restamped_runs": true}]}', "restamps[0].restamped_runs is True, not a count"),
        (None, "not a file (restamp writes its proof there): move it away and run again"),
        # 51.3c: a truncated proof file said "delete it to make it again", losing its proofs
        ('{"restamps": [', "not a JSON file (Expecting value: line 1 column 15 (char 14))"),
        ('{"restamps": [], "restamps": []}', "key 'restamps' appears twice in one object (edited)"),
    ],
)
def test_a_damaged_proof_record_is_one_line_before_anything_trains(suite, text, message):
    """Battery cases: proof records of the wrong shape ended in an AttributeError or a
    TypeError stack, and a folder in the proof file's place was found only after every run
    had trained again."""
    path, cfg, results = suite
    proof = results / "restamp.json"
    if text is None:
        proof.mkdir()
    else:
        proof.write_text(text)
    before = snapshot(results)
    done = restamp(path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"psrnn restamp: error: results/relreg/restamp.json: {message}")
    if text is not None:
        assert line.endswith(
            "restore it from git (git checkout -- results/relreg/restamp.json) and run again"
        )
    assert "same numbers" not in done.stdout  # refused before anything trained
    assert snapshot(results) == before


def test_the_committed_proofs_read():
    from psrnn.engine.proofs import earlier_proofs

    for name in ("relreg", "relreg-full", "mnist-real"):
        assert len(earlier_proofs(C.ROOT / "results" / name / "restamp.json")) >= 4


def test_a_killed_restamp_leaves_no_worker_training(suite):
    """`kill -9` of restamp --jobs 2 left its workers re-training for minutes, re-parented to
    init: each now ends with it (the parent-death signal)."""
    import signal
    import time

    path, cfg, results = suite
    proc = subprocess.Popen(
        [sys.executable, "-m", "psrnn", "restamp", "--config", str(path), "--jobs", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def children(pid: int) -> set[int]:
        try:
            text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        except FileNotFoundError:
            return set()
        return {int(c) for c in text.split()}

    def workers() -> set[int]:  # the pool's spawned processes (beside the resource tracker)
        return {c for c in children(proc.pid) if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()}

    deadline = time.monotonic() + 300
    while len(workers()) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3)  # both re-training
    training = workers()
    assert len(training) == 2 and proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(3)
    alive = [
        w
        for w in training
        if Path(f"/proc/{w}").exists() and b"Z" not in Path(f"/proc/{w}/stat").read_bytes().split()[2]
    ]
    assert alive == []
    assert not (results / "restamp.json").exists()  # no proof: nothing was compared to the end
