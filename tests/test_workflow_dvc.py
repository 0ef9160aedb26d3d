"""dvc.yaml against the Snakefile: one DAG, two front ends. Every DVC stage asks Snakemake
for part of the DAG; its outs must hold exactly the files those Snakemake jobs write, its
deps the files they read from other stages, plus the code and config they run."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from psrnn import config as C
from psrnn import workflow as W

ROOT = C.ROOT
STAGE_CODE = {  # code each stage's commands run (besides workflow, config, Snakefile)
    "data": ["src/psrnn/data"],
    "train": ["src/psrnn/models.py", "src/psrnn/training.py", "src/psrnn/selection.py"],
    "compile": ["src/psrnn/results", "config/reference.yaml", "paper/main.tex"],
}
COMMON = ["Snakefile", "src/psrnn/workflow.py", "src/psrnn/config.py", "config/schema.yaml"]


def stages(suite_file: str, name: str) -> dict[str, dict]:
    """dvc.yaml's stages with params.yaml's variables filled in."""
    text = (ROOT / "dvc.yaml").read_text()
    text = text.replace("${suite.file}", suite_file).replace("${suite.name}", name)
    assert "${" not in text.split("plots:")[0]
    return yaml.safe_load(text)["stages"]


def paths(entries: list) -> list[str]:
    """DVC out/dep entries (a path, or {path: options}) -> paths."""
    return [next(iter(e)) if isinstance(e, dict) else e for e in entries]


def under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def dry_run_jobs(suite: Path, until: str | None, cwd: Path) -> list[tuple[list[str], list[str]]]:
    """[(inputs, outputs)] of every job `snakemake -n [--until X]` lists, from scratch."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
           str(cwd), "-n", "--configfile", str(suite)] + (["--until", until] if until else [])
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    jobs = []
    for block in re.split(r"^(?:local)?rule \w+:$", res.stdout, flags=re.M)[1:]:
        ins = re.search(r"^\s+input: (.*)$", block, re.M)
        outs = re.search(r"^\s+output: (.*)$", block, re.M)
        jobs.append(([s.strip() for s in ins[1].split(",")] if ins else [],
                     [s.strip() for s in outs[1].split(",")] if outs else []))
    return jobs


def test_params_name_the_config_file_and_its_name():
    params = yaml.safe_load((ROOT / "params.yaml").read_text())["suite"]
    assert C.load_suite(ROOT / params["file"])["name"] == params["name"]


def test_dvc_resolves_the_stages():
    res = subprocess.run([sys.executable, "-m", "dvc", "stage", "list"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert [ln.split()[0] for ln in res.stdout.splitlines()] == ["data", "train", "compile"]
    assert "results/small/runs" in res.stdout


def test_stages_delegate_to_snakemake_and_depend_on_their_code_and_config():
    st = stages("config/small.yaml", "small")
    untils = {}
    for name, stage in st.items():
        m = re.fullmatch(r"snakemake --cores all --configfile config/small\.yaml(?: --until (\w+))?",
                         stage["cmd"])
        assert m, stage["cmd"]
        untils[name] = m[1]
        deps = stage["deps"]
        for path in ["config/small.yaml", *COMMON, *STAGE_CODE[name]]:
            assert path in deps, (name, path)
            assert (ROOT / path).exists(), path
        assert stage["params"] == ["suite"]
    assert untils == {"data": "prepare", "train": "train", "compile": None}


def test_every_stage_outs_are_its_snakemake_targets(tmp_path):
    """Stage by stage: the files its Snakemake command writes (jobs new to this stage)
    lie under its outs, every out holds some of them, and the files its jobs read from
    other stages lie under its deps."""
    suite = ROOT / "config" / "small.yaml"
    cfg = C.load_suite(suite)
    st = stages("config/small.yaml", "small")
    seen: set[str] = set()
    producer: dict[str, str] = {}
    for name, stage in st.items():
        until = re.search(r"--until (\w+)", stage["cmd"])
        jobs = [j for j in dry_run_jobs(suite, until[1] if until else None, tmp_path)
                if not set(j[1]) <= seen]
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
    st = stages(f"config/{config}", cfg["name"])
    all_outs = [p for s in st.values() for p in paths(s["outs"]) + paths(s.get("metrics", []))]
    for f in W.all_jobs_outputs(cfg):
        assert sum(under(f, [o]) for o in all_outs) == 1, f


def test_plots_are_figures_that_compile_writes():
    plots = yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"]
    cfg = C.load_suite(ROOT / "config" / "small.yaml")
    written = set(W.compile_outputs(cfg))
    for p in plots:
        path = (next(iter(p)) if isinstance(p, dict) else p).replace("${suite.name}", "small")
        assert path in written, path
