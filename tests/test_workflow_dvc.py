"""dvc.yaml against the Snakefile: one DAG, two front ends. Every DVC stage asks Snakemake
for part of the DAG of one suite config (params.yaml for the first study, config/relreg.yaml
for the second); its outs must hold exactly the files those Snakemake jobs write, its deps
the files they read from other stages, plus the code and config they run."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from psrnn import config as C
from psrnn import dvcparams as D
from psrnn import registry
from psrnn import workflow as W
from psrnn.engine import codehash
from psrnn.engine import groups as G
from psrnn.yamlfiles import read_yaml

ROOT = C.ROOT
NAME = C.load_suite(ROOT / "params.yaml")["name"]  # small-dvc: DVC's own folders (dvcparams.dvc_params)
# every stage runs the Snakefile over the whole package: the studies share the engine,
# config and results code, and Snakemake decides which jobs a code edit re-runs (none)
COMMON = ["Snakefile", "config/schema.yaml"]
CMD = re.compile(
    r"(?:python -m psrnn stale --config (?P<stale>[\w/.-]+) --forget && )?"
    r"(?:mkdir -p results/(?P<mkdir>[\w-]+)/search && )?"
    r"snakemake --cores all --configfile (?P<config>[\w/.-]+)(?: --until (?P<until>\w+(?: \w+)*))?"
)


def stages(name: str) -> dict[str, dict]:
    """dvc.yaml's stages with params.yaml's `name` filled in."""
    text = (ROOT / "dvc.yaml").read_text().replace("${name}", name)
    assert "${" not in text.split("plots:")[0]
    return yaml.safe_load(text)["stages"]


def stage_configs() -> dict[str, list[str]]:
    """Suite config -> its stages, upstream first, as dvc.yaml's commands name them (a
    study's stages end in -data, -train or -compile, the first study's are those words)."""
    out: dict[str, list[str]] = {}
    for name, stage in stages("name").items():
        if name != "code":
            out.setdefault(CMD.fullmatch(stage["cmd"])["config"], []).append(name)
    return out


STAGES = stage_configs()


def kind(stage: str) -> str:
    return stage.rpartition("-")[2]


def study_of(config: str) -> registry.Study:
    return registry.study_of(C.load_suite(ROOT / config))


def stage_files(config: str, stage: str) -> list[str]:
    """What a stage's commands read besides the common files: its study's schema overlay,
    and for compile its reference numbers and, with a paper job, the paper's source."""
    s = study_of(config)
    files = [s.schema] if s.schema else []
    if kind(stage) == "compile":
        files += [s.reference, *(["paper/main.tex"] if s.paper else [])]
    return files


def code(config: str, stage: str) -> str:
    """The digest of its code a stage depends on (the `code` stage writes them)."""
    return f"{study_of(config).name}-{kind(stage)}"


def paths(entries: list) -> list[str]:
    """DVC out/dep entries (a path, or {path: options}) -> paths."""
    return [next(iter(e)) if isinstance(e, dict) else e for e in entries]


def under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def dry_run_jobs(suite: Path, until: str | None, cwd: Path) -> list[tuple[list[str], list[str]]]:
    """[(inputs, outputs)] of every job `snakemake -n [--until X]` lists, from scratch."""
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(cwd),
        "-n",
        "--configfile",
        str(suite),
    ] + (["--until", *until.split()] if until else [])
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    jobs = []
    for block in re.split(r"^(?:local)?rule \w+:$", res.stdout, flags=re.M)[1:]:
        ins = re.search(r"^\s+input: (.*)$", block, re.M)
        outs = re.search(r"^\s+output: (.*)$", block, re.M)
        jobs.append(
            (
                [s.strip() for s in ins[1].split(",")] if ins else [],
                [s.strip() for s in outs[1].split(",")] if outs else [],
            )
        )
    return jobs


def test_dvc_resolves_the_stages():
    res = subprocess.run(
        [sys.executable, "-m", "dvc", "stage", "list"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert [ln.split()[0] for ln in res.stdout.splitlines()] == [
        "code",
        *(s for ss in STAGES.values() for s in ss),
    ]
    for config in STAGES:
        name = NAME if config == "params.yaml" else C.load_suite(ROOT / config)["name"]
        assert f"results/{name}/runs" in res.stdout, config


def test_stages_delegate_to_snakemake_and_depend_on_their_code_and_params():
    st = stages(NAME)
    for config, names in STAGES.items():
        cfg = C.load_suite(ROOT / config)
        for name in names:
            m = CMD.fullmatch(st[name]["cmd"])
            assert m and m["config"] == config, st[name]["cmd"]
            assert m["mkdir"] in (None, cfg["name"])
            # runs another experiment left (dvc exp apply) are trained again, not refused at compile
            assert m["stale"] == (config if (m["until"] or "").startswith("train") else None), name
            deps = st[name]["deps"]
            for path in [*COMMON, *stage_files(config, name)]:
                assert path in deps, (name, path)
                assert (ROOT / path).exists(), path
            assert f"results/code/{code(config, name)}.json" in deps and "src/psrnn" not in deps, name
            # Snakemake, not DVC, decides what a stage re-runs (dvc.yaml's header)
            assert st[name]["always_changed"] is True, name
            # DVC deletes a stage's outs before its command unless they persist: never
            for out in st[name]["outs"] + st[name].get("metrics", []):
                assert isinstance(out, dict) and next(iter(out.values()))["persist"] is True, out
                assert under(next(iter(out)), [str(C.data_root(cfg)), str(C.results_root(cfg))]), out
            # the data stage prepares, the train stage trains (the final runs fused where the
            # config says so: config/relreg.yaml), the compile stage builds everything else
            fused = "train final_group" if G.fused_finals(cfg) else "train"
            assert m["until"] == {"data": "prepare", "train": fused, "compile": None}[kind(name)], name
            # the keys each stage tracks are the ones its jobs read (psrnn.workflow says
            # which): params.yaml's by key, another config's as {file: keys}, compile the whole
            raw = C.load_yaml(ROOT / config)
            assert "extends" not in raw, config  # DVC cannot follow `extends:`
            keys = {
                "data": D.DVC_STAGE_PARAMS["data"],
                "train": D.train_stage_params(raw),
                "compile": None,
            }[kind(name)]
            params = keys if config == "params.yaml" and keys else [{config: keys}]
            assert st[name]["params"] == params, name


def test_the_code_stage_writes_the_digest_each_stage_depends_on(tmp_path):
    st = stages(NAME)["code"]
    assert st["deps"] == ["src/psrnn"] and st["outs"] == [{"results/code": {"cache": False, "persist": True}}]
    out = tmp_path / "code"
    res = subprocess.run(
        [sys.executable, "-m", "psrnn", "code-digest", "--out", str(out)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    written = {p.stem for p in out.iterdir()}
    assert written == set(codehash.jobs()) >= {code(c, n) for c, names in STAGES.items() for n in names}


def test_each_compile_stage_depends_on_its_studys_reference_and_schema():
    st = stages(NAME)
    for config, names in STAGES.items():
        study = registry.study_of(C.load_suite(ROOT / config))
        deps = st[names[-1]]["deps"]
        assert study.reference in deps and (study.schema is None or study.schema in deps), names[-1]


def test_an_experiment_edit_is_no_data_edit():
    """Snakemake's granularity, DVC's view: a dataset's keys are not an experiment's."""
    params = read_yaml(ROOT / "params.yaml")  # as DVC writes it: YAML 1.2 (`latex: off` is a string)
    data_view = {k: params[k] for k in D.DVC_STAGE_PARAMS["data"]}
    params["experiments"]["mnist_gru"]["window"] = 7
    params["defaults"]["lr"] = 0.01
    assert {k: params[k] for k in D.DVC_STAGE_PARAMS["data"]} == data_view
    cfg = C.validate_suite(params)
    assert W.dataset_spec(cfg, "mnist") == W.dataset_spec(C.load_suite(ROOT / "params.yaml"), "mnist")


@pytest.mark.parametrize("config", list(STAGES))
def test_every_stage_outs_are_its_snakemake_targets(tmp_path, config):
    """Stage by stage: the files its Snakemake command writes (jobs new to this stage)
    lie under its outs, every out holds some of them, and the files its jobs read from
    other stages lie under its deps."""
    suite = ROOT / config
    cfg = C.load_suite(suite)
    st = {name: stage for name, stage in stages(NAME).items() if name in STAGES[config]}
    seen: set[str] = set()
    producer: dict[str, str] = {}
    for name, stage in st.items():
        until = CMD.fullmatch(stage["cmd"])["until"]
        jobs = [j for j in dry_run_jobs(suite, until, tmp_path) if not set(j[1]) <= seen]
        written = {f for _, outs in jobs for f in outs}
        outs = paths(stage["outs"]) + paths(stage.get("metrics", []))
        assert written and all(under(f, outs) for f in written), (name, sorted(written))
        for out in outs:
            assert any(under(f, [out]) for f in written), (name, out)
        for other, o_stage in st.items():
            if other != name:
                assert not any(under(f, paths(o_stage["outs"])) for f in written)
        read = {f for ins, _ in jobs for f in ins if f in producer}
        assert all(under(f, stage["deps"]) for f in read), (name, sorted(read))
        for f in written:
            producer[f] = name
        seen |= written
    # together the stages build exactly the DAG psrnn.workflow describes
    assert seen == set(W.all_jobs_outputs(cfg))


@pytest.mark.parametrize("config", ["paper.yaml", "paper-dbpedia.yaml"])
def test_stage_outs_cover_the_paper_dag(config):
    """The same stages serve the paper configs: every job output lies under one stage."""
    cfg = C.load_suite(ROOT / "config" / config)
    st = stages(cfg["name"])
    all_outs = [p for s in st.values() for p in paths(s["outs"]) + paths(s.get("metrics", []))]
    for f in W.all_jobs_outputs(cfg):
        assert sum(under(f, [o]) for o in all_outs) == 1, f


def test_plots_are_figures_that_compile_writes():
    plots = yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"]
    written = {f for config in STAGES for f in W.compile_outputs(C.load_suite(ROOT / config))}
    for p in plots:
        key, spec = next(iter(p.items())) if isinstance(p, dict) else (p, {})
        if isinstance(spec.get("y"), dict):  # x/y data from tables
            files = [f.replace("${name}", NAME) for f in spec["y"]]
        elif key.endswith("/curves"):  # a folder of learning curves: every file in it is compiled
            folder = key.replace("${name}", NAME) + "/"
            files = [f for f in written if f.startswith(folder)]
            assert files and all(f.endswith(".csv") for f in files), key
        else:
            files = [(next(iter(p)) if isinstance(p, dict) else p).replace("${name}", NAME)]
        for path in files:
            assert path in written, path


# --- dvc repro for real, in a scratch git repository ------------------------------------------

# the small config cut to MNIST, one seed, one experiment without a grid (search/ stays
# empty: the grid's jobs are checked against the stages by the dry runs above)
DVC_EXPERIMENTS = ["mnist_gru"]


@pytest.fixture(scope="module")
def dvc_repo(tmp_path_factory):
    """A git repository holding this checkout's workflow files and the committed results of
    the small config (no data, no runs): a fresh clone, with params.yaml made from a
    cut-down small config."""
    import shutil

    repo = tmp_path_factory.mktemp("dvc") / "repo"
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for f in tracked:
        top = f.split("/")[0]
        if (
            top
            in {
                "Snakefile",
                "dvc.yaml",
                ".dvcignore",
                ".dvc",
                ".gitignore",
                "config",
                "src",
                "paper",
                "profiles",
            }
            or f.startswith("results/small/")
        ) and (ROOT / f).is_file():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, repo / f)
    cfg = yaml.safe_load((ROOT / "config" / "small.yaml").read_text())
    cfg["seeds"] = [0]
    cfg["datasets"] = {"mnist": cfg["datasets"]["mnist"]}
    cfg["experiments"] = {e: cfg["experiments"][e] for e in DVC_EXPERIMENTS}
    (repo / "config" / "small.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (repo / "params.yaml").write_text(D.dvc_params(repo / "config" / "small.yaml"))
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "DVC_NO_ANALYTICS": "1",
    }
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=repo, env=env, check=True)
    return repo, env


def sh(repo_env, *cmd: str, ok: bool = True, timeout: int = 900) -> subprocess.CompletedProcess:
    repo, env = repo_env
    res = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    if ok:
        assert res.returncode == 0, (cmd, res.stdout[-4000:], res.stderr[-4000:])
    return res


def outputs(repo: Path) -> dict[str, int]:
    """mtime of every file under data/ and the results' runs and search folders."""
    files = [
        p
        for top in (f"data/{NAME}", f"results/{NAME}/runs", f"results/{NAME}/search")
        for p in (repo / top).rglob("*")
        if p.is_file()
    ]
    return {str(p.relative_to(repo)): p.stat().st_mtime_ns for p in files}


def committed(repo: Path) -> dict[str, bytes]:
    """The small config's committed results (README's main job), byte for byte."""
    return {
        str(p.relative_to(repo)): p.read_bytes()
        for p in (repo / "results" / "small").rglob("*")
        if p.is_file()
    }


@pytest.mark.slow
def test_dvc_repro_dry_and_status_work_in_a_fresh_clone(dvc_repo):
    """Before anything ran: the dry run lists every stage's command (DVC would stop at the
    first dependency an earlier stage makes, treeverse/dvc#9021, were the stages not
    always_changed), status names what is missing, and neither writes a file."""
    repo = dvc_repo[0]
    assert not (repo / "data").exists() and not (repo / "results" / NAME).exists()
    before = committed(repo)
    dry = sh(dvc_repo, sys.executable, "-m", "dvc", "repro", "--dry")
    for name in ["code", *(s for ss in STAGES.values() for s in ss)]:
        assert f"Running stage '{name}'" in dry.stdout, (name, dry.stdout[-3000:])
    status = sh(dvc_repo, sys.executable, "-m", "dvc", "status").stdout
    assert (
        "always changed" in status and "deleted:            results/code/private_shared-data.json" in status
    ), status
    assert not (repo / "data").exists() and not (repo / "results" / NAME).exists()
    assert not (repo / "results" / "code").exists() and committed(repo) == before


@pytest.mark.slow
def test_dvc_repro_keeps_what_snakemake_built_and_survives_a_code_edit(dvc_repo):
    """The issue's case: Snakemake built everything, there is no dvc.lock yet; `dvc repro`
    must neither delete nor redo anything, and again after a comment-only code edit."""
    repo = dvc_repo[0]
    sh(dvc_repo, sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", "params.yaml")
    built = outputs(repo)
    assert any(f.endswith("metrics.json") for f in built) and any(f.endswith("train.pt") for f in built)
    sh(dvc_repo, sys.executable, "-m", "dvc", "repro", "compile")
    assert outputs(repo) == built
    assert (repo / "dvc.lock").is_file()
    source = repo / "src" / "psrnn" / "studies" / "private_shared" / "data" / "sources.py"
    source.write_text(source.read_text() + "\n# a comment\n")
    status = sh(dvc_repo, sys.executable, "-m", "dvc", "status", "compile", "--with-deps").stdout
    assert "code:" in status and "modified:" in status
    # the comment changes no digest: the code stage runs, and Snakemake, asked by every stage
    # after it, has nothing to do
    res = sh(dvc_repo, sys.executable, "-m", "dvc", "repro", "compile")
    assert "Running stage 'code'" in res.stdout and "Running stage 'data'" in res.stdout
    assert (res.stdout + res.stderr).count("Nothing to be done") == 3, res.stderr[-3000:]
    assert outputs(repo) == built
    status = sh(dvc_repo, sys.executable, "-m", "dvc", "status", "compile", "--with-deps").stdout
    assert "code:" not in status and "always changed" in status


@pytest.mark.slow
def test_dvc_exp_run_sets_a_default_and_retrains_only_the_runs(dvc_repo):
    repo = dvc_repo[0]
    sh(dvc_repo, "git", "add", "-A")
    sh(dvc_repo, "git", "commit", "-qm", "results")
    before, kept = outputs(repo), committed(repo)
    res = sh(dvc_repo, sys.executable, "-m", "dvc", "exp", "run", "compile", "-S", "defaults.lr=0.01")
    assert "Running stage 'train'" in res.stdout
    after = outputs(repo)
    assert committed(repo) == kept and kept  # results/small (git's) untouched: DVC runs small-dvc
    assert {f: t for f, t in after.items() if f.startswith("data/")} == {
        f: t for f, t in before.items() if f.startswith("data/")
    }
    run = json.loads((repo / f"results/{NAME}/runs/mnist_gru/seed0/metrics.json").read_text())
    assert run["config"]["lr"] == 0.01
    # -S rewrote params.yaml as DVC writes YAML, which is how dvcparams writes it: one line moved
    changed = sh(dvc_repo, "git", "diff", "-U0", "--", "params.yaml").stdout
    moved = [x for x in changed.splitlines() if x[:1] in "+-" and not x.startswith(("+++", "---"))]
    assert moved == ["-  lr: 0.03", "+  lr: 0.01"], changed
    diff = sh(dvc_repo, sys.executable, "-m", "dvc", "params", "diff").stdout
    assert re.search(r"params\.yaml\s+defaults\.lr\s+0\.03\s+0\.01", diff), diff
    assert "acc" in sh(dvc_repo, sys.executable, "-m", "dvc", "metrics", "diff").stdout
    plots = sh(dvc_repo, sys.executable, "-m", "dvc", "plots", "diff", "--json").stdout
    assert "shared_proportion" in plots and "acc_mean" in plots and "paper_acc" in plots


@pytest.mark.slow
def test_dvc_push_and_pull_round_trip_through_a_local_remote(dvc_repo, tmp_path):
    repo = dvc_repo[0]
    sh(
        dvc_repo,
        sys.executable,
        "-m",
        "dvc",
        "remote",
        "add",
        "--local",
        "-d",
        "scratch",
        str(tmp_path / "store"),
    )
    sh(dvc_repo, sys.executable, "-m", "dvc", "push", "compile", "--with-deps")
    metrics = repo / f"results/{NAME}/runs/mnist_gru/seed0/metrics.json"
    want = metrics.read_bytes()
    import shutil

    shutil.rmtree(repo / f"results/{NAME}/runs")
    shutil.rmtree(repo / f"data/{NAME}")
    sh(dvc_repo, sys.executable, "-m", "dvc", "pull", "compile", "--with-deps")
    assert metrics.read_bytes() == want
    assert (repo / f"data/{NAME}/prepared/mnist/train.pt").is_file()
