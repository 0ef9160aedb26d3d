"""The workflow: file lists and job parameters (psrnn.workflow), and the Snakefile as
Snakemake sees it (lint, dry runs of the paper, small and SLURM configs)."""

import hashlib
import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from suites import TINY

from psrnn import catalogue as K
from psrnn import config as C
from psrnn import dvcparams as D
from psrnn import registry
from psrnn import workflow as W
from psrnn.cli import main
from psrnn.errors import UserError
from psrnn.studies.private_shared import settings as S

ROOT = C.ROOT
PAPER, SMALL = ROOT / "config" / "paper.yaml", ROOT / "config" / "small.yaml"
PAPER_DBPEDIA = ROOT / "config" / "paper-dbpedia.yaml"


def every_study(configs: list[str]) -> list[str]:
    """`configs` (files of config/), and for each study none of them is of its first suite
    config in the catalogue (config/README.md): a new study's are checked as well."""
    suites, _ = K.entries()
    covered = {s.study for s in suites if s.file in configs}
    first = {}
    for s in suites:
        if s.study not in covered:
            first.setdefault(s.study, s.file)
    return [*configs, *first.values()]


# --- psrnn.workflow: which config, which files --------------------------------------------


def test_suite_path_is_the_last_configfile_else_the_default():
    assert W.suite_path([], "config/paper.yaml") == Path("config/paper.yaml")
    assert W.suite_path([Path("/a/x.yaml"), Path("/b/y.yaml")], "config/paper.yaml") == Path("/b/y.yaml")


def test_suite_path_refuses_command_line_config_values():
    with pytest.raises(C.ConfigError, match="dbpedia"):
        W.suite_path([], "config/paper.yaml", {"dbpedia": True})


def test_small_config_file_lists():
    cfg = C.load_suite(SMALL)
    assert W.fixture_files(cfg) == [f"data/small/fixtures/{d}/MD5SUMS" for d in S.DATASETS]
    assert W.download_inputs(cfg, "imdb") == ["data/small/fixtures/imdb/MD5SUMS"]
    n_exp = len(C.enabled_experiments(cfg))
    finals = W.final_metrics(cfg)
    assert len(finals) == n_exp * 2 and len(set(finals)) == len(finals)
    assert "results/small/runs/mnist_gru/seed1/metrics.json" in finals
    grid = W.search_metrics(cfg, "mnist_ps30_predrec_a4")
    assert grid == [
        "results/small/search/mnist_ps30_predrec_a4/lr-0.01/metrics.json",
        "results/small/search/mnist_ps30_predrec_a4/lr-0.03/metrics.json",
    ]
    assert W.search_metrics(cfg, "mnist_gru") == []
    outs = W.all_jobs_outputs(cfg)
    assert len(outs) == len(set(outs))
    assert outs.index(W.manifest(cfg, "mnist")) < outs.index(grid[0]) < outs.index(finals[0])
    assert W.targets(cfg)[-1] == "results/small/paper/build.json"
    assert "results/small/metrics.json" in W.targets(cfg)


def test_paper_config_needs_no_fixtures_and_skips_disabled_dbpedia():
    cfg = C.load_suite(PAPER)
    assert W.fixture_files(cfg) == [] and W.download_inputs(cfg, "mnist") == []
    outs = W.all_jobs_outputs(cfg)
    assert not any("dbpedia" in f for f in outs)
    assert any("dbpedia" in f for f in W.all_jobs_outputs(C.load_suite(PAPER_DBPEDIA)))


def test_train_inputs_add_the_selection_only_for_grids():
    cfg = C.load_suite(SMALL)
    splits = {s: f"data/small/prepared/imdb/{s}.pt" for s in ("train", "valid", "test")}
    assert W.train_inputs(cfg, "imdb_gru") == {"data": "data/small/prepared/imdb/manifest.json", **splits}
    assert W.train_inputs(cfg, "mnist_ps30_predrec_a4") == {
        "data": "data/small/prepared/mnist/manifest.json",
        **{s: f.replace("imdb", "mnist") for s, f in splits.items()},
        "selected": "results/small/search/mnist_ps30_predrec_a4/selected.json",
    }


def test_an_input_is_current_while_its_stamp_matches_the_config(tmp_path):
    cfg = C.validate_suite(json.loads(json.dumps(TINY)))
    stamp = W.dataset_stamp(cfg, "mnist")
    path = tmp_path / "manifest.json"
    assert W.is_current(path, stamp)  # missing: its job runs anyway
    path.write_text(json.dumps({"counts": {}, **stamp}))
    assert W.is_current(path, stamp)
    path.write_text(json.dumps({"counts": {}}))  # made before stamps, or by hand
    assert not W.is_current(path, stamp)
    path.write_text("{not json")
    assert not W.is_current(path, stamp)
    # what changes the stamps: the dataset's settings; an experiment's for its selection
    edited = json.loads(json.dumps(TINY))
    edited["datasets"]["mnist"]["prepare"]["downsample"] = 14
    other = C.validate_suite(edited)
    assert W.dataset_stamp(other, "mnist") != stamp
    assert W.train_input_stamps(other, "ps")["selected"] != W.train_input_stamps(cfg, "ps")["selected"]
    edited = json.loads(json.dumps(TINY))
    edited["experiments"]["base"]["hidden"] = 5
    other = C.validate_suite(edited)
    assert W.dataset_stamp(other, "mnist") == stamp
    assert W.train_input_stamps(other, "ps") == W.train_input_stamps(cfg, "ps")
    assert set(W.train_input_stamps(cfg, "base")) == {"data"}


def test_experiment_spec_changes_only_for_the_edited_experiment():
    cfg = C.load_suite(SMALL)
    before = {e: W.experiment_spec(cfg, e) for e in cfg["experiments"]}
    cfg["experiments"]["imdb_gru"]["lr"] = 0.5
    after = {e: W.experiment_spec(cfg, e) for e in cfg["experiments"]}
    assert [e for e in before if before[e] != after[e]] == ["imdb_gru"]
    # a dataset's preparation reaches its experiments' specs (they re-train on new data)
    cfg["datasets"]["fmnist"]["prepare"]["train"] = 300
    changed = [e for e in before if W.experiment_spec(cfg, e) != after[e]]
    assert changed == ["fmnist_gru", "fmnist_ps50_predrec_a5"]
    points = {W.experiment_spec(cfg, "mnist_ps30_predrec_a4", p) for p in ("lr-0.01", "lr-0.03")}
    assert len(points) == 2


def test_job_env_is_exported_and_part_of_every_training_spec():
    cfg = C.load_suite(SMALL)
    assert W.job_env(cfg) == "export ATEN_CPU_CAPABILITY=default; export MKL_CBWR=COMPATIBLE; "
    assert W.job_env({"job_env": {"A_B": "x y"}}) == "export A_B='x y'; "
    assert W.job_env(C.load_suite(PAPER)) == ""
    before = W.experiment_spec(cfg, "mnist_gru")
    cfg["job_env"]["MKL_CBWR"] = "AUTO"
    assert W.experiment_spec(cfg, "mnist_gru") != before  # numerics changed: re-train


def test_train_resources_come_from_the_config():
    assert W.train_resources(C.load_suite(PAPER), "dbpedia") == {"gpu": 1, "mem_mb": 16000, "runtime": 1020}
    assert W.train_resources(C.load_suite(SMALL))["gpu"] == 0
    assert W.train_resources({"name": "x"}) == W.TRAIN_RESOURCES


def test_train_threads_and_jobs_per_gpu_come_from_the_config_not_the_resources():
    paper, small = C.load_suite(PAPER), C.load_suite(SMALL)
    assert W.train_threads(paper) == 4 and W.jobs_per_gpu(paper) > 1  # shared GPUs
    assert (W.train_threads(small), W.jobs_per_gpu(small)) == (1, 1)  # the defaults
    assert W.jobs_per_gpu({"resources": {"train": {"jobs_per_gpu": 3}}}) == 3
    assert not set(W.TRAIN_SETTINGS) & set(W.train_resources(paper, "mnist"))


# --- Snakemake's view ----------------------------------------------------------------------------


def snakemake(
    *args, cwd: Path, timeout: int = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Snakemake on the repository's Snakefile from a scratch working directory; `env`
    adds to the environment (e.g. CUDA_VISIBLE_DEVICES for a host's GPU count)."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(cwd), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def job_counts(out: str) -> dict[str, int]:
    """The 'job count' table of `snakemake -n --quiet rules`."""
    table = out.split("Job stats:")[1] if "Job stats:" in out else out
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "total"}


@pytest.mark.parametrize("config", every_study(["paper.yaml", "small.yaml", "relreg.yaml"]))
def test_snakemake_lint_is_clean(tmp_path, config):
    res = snakemake("--lint", "--configfile", str(ROOT / "config" / config), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Congratulations, your workflow is in a good condition!" in res.stdout + res.stderr


def test_the_data_and_paper_rules_are_those_of_the_configs_study(tmp_path):
    """fixtures, download, prepare and paper are the study's own jobs (Study.job_commands):
    the Snakefile defines those its config's study has, each running the command it names
    (the first study's its data jobs and paper, the second's none)."""
    own = {"fixtures", "download", "prepare", "paper"}
    for config in every_study(["small.yaml", "relreg.yaml"]):
        path = ROOT / "config" / config
        res = snakemake("--list-rules", "--configfile", str(path), cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        rules = {line.split()[0] for line in res.stdout.splitlines() if line and not line[0].isspace()}
        jobs = registry.study_of(C.load_suite(path)).job_commands
        assert rules & own == set(jobs) and {"all", "train", "compile"} <= rules, config
    res = snakemake("-n", "-p", "--until", "prepare", "--configfile", str(SMALL), cwd=tmp_path)
    assert 'python -m psrnn prepare mnist --config "$PSRNN_CONFIG"' in res.stdout, res.stdout[-2000:]


def test_dry_run_of_the_paper_config_lists_the_whole_grid(tmp_path):
    t0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = snakemake("-n", "--quiet", "rules", "--configfile", str(PAPER), cwd=tmp_path)
    t1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (t1.ru_utime - t0.ru_utime) + (t1.ru_stime - t0.ru_stime)  # load-proof "seconds"
    assert res.returncode == 0, res.stderr
    cfg = C.load_suite(PAPER)
    exps = C.enabled_experiments(cfg)
    grids = [e for e in exps if C.has_grid(cfg, e)]
    assert job_counts(res.stdout) == {
        "download": 4,
        "prepare": 4,
        "search": sum(len(C.grid_points(cfg["experiments"][e])) for e in grids),  # 72 (18 rows x 4 rates)
        "select": len(grids),  # 18
        "train": len(exps) * 3,  # 75
        "compile": 1,
        "paper": 1,
        "all": 1,
    }
    assert cpu_s < 30, cpu_s  # ~5 s of CPU on a laptop
    # Snakemake picked up the workflow profile by itself
    assert f"Using workflow specific profile {ROOT}/profiles/default" in res.stderr


def test_without_a_configfile_snakemake_runs_the_small_config_and_says_so(tmp_path):
    """A bare `snakemake` must not start the paper's 106 H200-hours: it plans the small
    config, the same jobs as `--configfile config/small.yaml`, and names it in one line."""
    bare = snakemake("-n", "--quiet", "rules", cwd=tmp_path)
    named = snakemake("-n", "--quiet", "rules", "--configfile", str(SMALL), cwd=tmp_path)
    assert bare.returncode == 0 == named.returncode, bare.stderr[-3000:]
    assert job_counts(bare.stdout) == job_counts(named.stdout)
    assert job_counts(bare.stdout)["fixtures"] == 1  # the paper config has none
    notice = [line for line in bare.stderr.splitlines() if line.startswith("psrnn: ")]
    assert notice == [
        "psrnn: no --configfile: running config/small.yaml (toy models, a few CPU-minutes); "
        "the paper's grid: --configfile config/paper.yaml; every config: config/README.md"
    ]
    assert "psrnn: no --configfile" not in named.stderr


def test_configfile_small_selects_only_the_small_config(tmp_path):
    """Snakemake merges the --configfile files into one `config`; the workflow must
    still see the small config alone: its jobs, its folders, nothing of the paper's."""
    res = snakemake("-n", "--configfile", str(SMALL), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    cfg = C.load_suite(SMALL)
    counts = job_counts(res.stdout)
    assert counts["fixtures"] == 1 and counts["download"] == 5
    assert counts["train"] == len(C.enabled_experiments(cfg)) * 2
    assert counts["search"] == 2 and counts["select"] == 1
    assert "results/paper" not in res.stdout and "data/paper" not in res.stdout
    assert "cifar10_gru_large" not in res.stdout  # a paper-only experiment
    # profiles/default's printshellcmds applies: the jobs read the suite file from the prefix
    assert '--config "$PSRNN_CONFIG"' in res.stdout


def test_configfile_paper_dbpedia_adds_only_dbpedia(tmp_path):
    res = snakemake("-n", "--quiet", "rules", "--configfile", str(PAPER_DBPEDIA), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    counts = job_counts(res.stdout)
    assert counts["download"] == 5 and counts["train"] == 75 + 4 * 3 and counts["search"] == 72 + 16


def test_configfile_quick_is_one_seed_of_table2s_mnist_fmnist_imdb_rows(tmp_path):
    res = snakemake(
        "-n", "--quiet", "rules", "--configfile", str(ROOT / "config" / "quick.yaml"), cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert job_counts(res.stdout) == {
        "download": 3,
        "prepare": 3,
        "search": 52,
        "select": 13,
        "train": 13,
        "compile": 1,
        "paper": 1,
        "all": 1,
    }  # each row's lr searched (4 points), the selected run reused by its final run


def test_bad_config_stops_before_any_job_with_the_key_named(tmp_path):
    bad = C.load_yaml(SMALL)
    bad["experiments"]["mnist_gru"]["shared"] = 1.5
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    res = snakemake("--cores", "1", "--configfile", str(path), cwd=tmp_path)
    assert res.returncode != 0
    assert "experiments.mnist_gru.shared" in res.stderr + res.stdout
    assert not (tmp_path / "data").exists() and not (tmp_path / "results").exists()


def test_command_line_config_values_are_refused(tmp_path):
    res = snakemake("-n", "--config", "dbpedia=true", cwd=tmp_path)
    assert res.returncode != 0
    assert "--config dbpedia: not supported" in res.stderr + res.stdout
    assert 'File "' not in res.stderr + res.stdout  # one line, no stack frames (battery B63)


# --- job shell prefix, resources, containers, report -------------------------------------------


def test_shell_prefix_survives_quotes_and_braces_in_paths(tmp_path):
    """A config path with an apostrophe (and braces, which Snakemake's format would eat)
    reaches the job as it is; so does a checkout path with a space."""
    suite = tmp_path / "it's {mine}.yaml"
    prefix = W.shell_prefix(suite, tmp_path / "my checkout", C.load_suite(SMALL))
    formatted = prefix.format()  # what Snakemake's str.format leaves of it
    out = subprocess.run(
        ["bash", "-c", formatted + 'echo "$PSRNN_CONFIG|$PYTHONPATH|$MKL_CBWR|$PSRNN_JOBS_PER_GPU"'],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{suite.resolve()}|{tmp_path}/my checkout/src|COMPATIBLE|1"
    paper = C.load_suite(PAPER)
    assert f"export PSRNN_JOBS_PER_GPU={W.jobs_per_gpu(paper)}; " in W.shell_prefix(suite, tmp_path, paper)


def test_training_runtime_may_differ_by_dataset():
    cfg = C.load_suite(PAPER)
    minutes = {d: W.train_resources(cfg, d)["runtime"] for d in S.DATASETS}
    assert minutes["dbpedia"] > minutes["cifar10"] > minutes["mnist"] >= minutes["imdb"] > 0
    assert W.train_resources(cfg, "mnist")["gpu"] == 1
    assert W.train_resources(C.load_suite(SMALL), "mnist") == {"gpu": 0, "mem_mb": 2000, "runtime": 10}
    assert W.train_resources({"resources": {"train": {"runtime": {"default": 7}}}}, "imdb")["runtime"] == 7


def test_compiled_figures_tables_and_report_are_in_snakemakes_report():
    cfg = C.load_suite(SMALL)
    shown = {Path(f).name: i for f, i in W.report_items(cfg).items()}
    assert shown["REPORT.md"][0] == "Report"
    assert shown["fig2_shared_proportion.png"] == (
        "Figures",
        {
            "file": "fig2_shared_proportion.png",
            "shows": "Figure 2: accuracy and losses against the shared proportion (CIFAR-10)",
        },
    )
    assert shown["table2.csv"][1]["shows"].startswith("Table 2 of the paper (main results): test accuracy")
    assert shown["curves_mnist_gru.png"][1]["shows"].startswith(
        "Learning curves of mnist_gru (mnist; the paper's row table2/mnist/gru)"
    )
    assert {n for n, i in shown.items() if i[0] == "Tables"} == {f"table{k}.csv" for k in range(1, 5)}
    # one format of each: no PDF/SVG twins, no .md/.tex tables
    assert not any(n.endswith((".pdf", ".svg", ".tex")) for n in shown)
    assert all((ROOT / "paper" / "report" / f"{c.lower()}.rst").is_file() for c, _ in shown.values())


@pytest.mark.parametrize(
    "config", every_study(["small.yaml", "paper.yaml", "relreg.yaml", "relreg-full.yaml"])
)
def test_every_compiled_output_of_each_study_has_its_own_caption(config):
    """Every file compile writes has a caption saying what it shows (the study's captions
    function, psrnn.registry.Study.captions), and no two files shown in the report share
    one (each learning curve names its experiment); a study without captions shows none."""
    cfg = C.load_suite(ROOT / "config" / config)
    if registry.study_of(cfg).captions is None:
        assert W.report_items(cfg) == {}
        return
    captions = W.report_captions(cfg)
    stems = {Path(f).stem for f in W.compile_outputs(cfg)}
    assert stems <= set(captions), stems - set(captions)
    shown = W.report_items(cfg)
    labels = [labels["shows"] for _, labels in shown.values()]
    assert len(set(labels)) == len(labels) == len({Path(f).stem for f in shown})
    assert all(len(text) > 20 for text in labels)


def test_relreg_outputs_are_in_snakemakes_report_with_the_thesis_tables():
    shown = {
        Path(f).name: i for f, i in W.report_items(C.load_suite(ROOT / "config" / "relreg.yaml")).items()
    }
    assert sorted(shown) == [
        "REPORT.md",
        "ablations.csv",
        "fig41_lstm_vs_proto.png",
        "fig42_regularizers.png",
        "fig43_loading_steps.png",
        "fig44_loading_epochs.png",
        "table45.csv",
        "table45_thesis.csv",
        "verdicts_forest.png",
    ]
    assert shown["table45.csv"][1]["shows"].startswith("Table 4.5 of the thesis as our grid search selects")
    assert shown["table45_thesis.csv"][1]["shows"].startswith("Table 4.5 of the thesis with each row trained")
    assert shown["fig43_loading_steps.png"] == (
        "Figures",
        {
            "file": "fig43_loading_steps.png",
            "shows": "Figure 4.3: loading probability of each proto-LSTM cell at each step "
            "(inference, two 9-bit examples)",
        },
    )


def test_an_output_without_a_caption_stops_the_workflow():
    with pytest.raises(ValueError, match="table9.csv: no caption"):
        W.report_item("results/small/tables/table9.csv", {"table1": "Table 1"})
    assert W.report_item("results/small/tables/table9.tex", {}) is None


def test_a_missing_image_is_one_line_naming_it_and_the_build_command(tmp_path):
    with pytest.raises(C.ConfigError) as err:
        W.check_image("containers/psrnn.sif", tmp_path)
    assert str(err.value) == (
        "--use-singularity / --sdm apptainer: image containers/psrnn.sif not found; build it "
        "first: apptainer build containers/psrnn.sif containers/psrnn.def "
        "(or, without a container registry, sudo apptainer build containers/psrnn.sif "
        "containers/psrnn-debian.def) (needs Apptainer >= 1.2; containers/README.md)"
    )
    W.check_image("docker://ghcr.io/x/psrnn:0.1.0", tmp_path)  # Apptainer pulls these


def test_no_apptainer_and_an_image_of_another_environment_are_one_line_errors(tmp_path, monkeypatch):
    """The image must hold the Python environment this checkout locks: its io.psrnn.env label
    (written by the recipes' %post) is the digest of uv.lock and the install scripts."""
    import shutil

    from psrnn import apptainer as A

    (tmp_path / "containers").mkdir()
    for name in A.ENV_FILES:
        shutil.copy(C.ROOT / name, tmp_path / name)
    (tmp_path / "containers" / "psrnn.sif").write_bytes(b"sif")
    monkeypatch.setattr(A, "apptainer_program", lambda: None)
    with pytest.raises(C.ConfigError) as err:
        W.check_image("containers/psrnn.sif", tmp_path)
    assert str(err.value) == (
        "--use-singularity: no apptainer (or singularity) on PATH; on Debian 12: sudo bash "
        "containers/install-apptainer.sh (containers/README.md)"
    )
    fake = tmp_path / "apptainer"  # answers `inspect --json --labels` with the label given
    monkeypatch.setattr(A, "apptainer_program", lambda: str(fake))
    for label in ("0123456789abcdef", A.env_digest(tmp_path)):
        labels = json.dumps({"data": {"attributes": {"labels": {A.ENV_LABEL: label}}}})
        fake.write_text(f"#!/bin/sh\necho '{labels}'\n")
        fake.chmod(0o755)
        if label == "0123456789abcdef":
            with pytest.raises(C.ConfigError) as err:
                W.check_image("containers/psrnn.sif", tmp_path)
            assert str(err.value).startswith(
                "--use-singularity: containers/psrnn.sif holds another Python environment (io.psrnn.env "
                f"0123456789abcdef, this checkout's uv.lock and install scripts: {A.env_digest(tmp_path)}); "
                "rebuild it: "
            )
        else:
            W.check_image("containers/psrnn.sif", tmp_path)
    # a file Apptainer cannot read as an image
    fake.write_text("#!/bin/sh\necho 'FATAL:   could not open image: not a SIF' >&2; exit 255\n")
    with pytest.raises(
        C.ConfigError, match=r"psrnn.sif is not an image Apptainer can read \(FATAL: +could not"
    ):
        W.check_image("containers/psrnn.sif", tmp_path)
    # the recipes compute the same digest with sha256sum over the same files
    import subprocess

    out = subprocess.run(
        ["bash", "-c", f"cd {tmp_path} && cat {' '.join(A.ENV_FILES)} | sha256sum | cut -c1-16"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == A.env_digest(tmp_path)
    for recipe in ("psrnn.def", "psrnn-debian.def"):
        text = (C.ROOT / "containers" / recipe).read_text()
        assert f"cat {' '.join(A.ENV_FILES)} | sha256sum | cut -c1-16" in text and A.ENV_LABEL in text


def test_apptainer_args_keep_nv_and_bind_data_linked_out_of_the_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = C.load_suite(SMALL)
    assert W.apptainer_args("", cfg) == "--nv"
    assert W.apptainer_args("--bind /x --cleanenv", cfg) == "--bind /x --cleanenv --nv"
    scratch = tmp_path.parent / f"{tmp_path.name}-scratch"
    (scratch / "small").mkdir(parents=True)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "small").symlink_to(scratch / "small")
    assert W.apptainer_args("--nv", cfg) == f"--nv --bind {scratch / 'small'}"


def test_apptainer_args_bind_local_archive_folders_outside_the_checkout(tmp_path, monkeypatch):
    """config/quick-imdb.yaml reads the reviews from ../shared/data/imdb: the download job
    in the container must see that folder; folders inside the checkout, missing folders
    and URLs need no bind."""
    checkout, archives = tmp_path / "checkout", tmp_path / "shared" / "imdb"
    (checkout / "fx" / "mnist").mkdir(parents=True)
    archives.mkdir(parents=True)
    monkeypatch.chdir(checkout)
    cfg = C.load_suite(ROOT / "config" / "quick-imdb.yaml")
    cfg["datasets"]["imdb"]["source"]["mirrors"] = ["../shared/imdb", "../nowhere", "https://example.org/x/"]
    mnist = {"local_dir": "fx/mnist", "md5": "fx/mnist/MD5SUMS"}
    cfg["datasets"]["mnist"] = {"enabled": True, "source": mnist}
    assert W.source_folders(cfg)[:2] == [Path("fx/mnist"), Path("fx/mnist")]
    assert W.apptainer_args("", cfg) == f"--nv --bind {archives}"
    cfg["datasets"]["imdb"]["enabled"] = False
    assert W.apptainer_args("", cfg) == "--nv"


def test_local_gpu_slots_are_the_hosts_gpus_times_jobs_per_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert W.local_gpu_slots(C.load_suite(SMALL)) == 4
    assert W.local_gpu_slots({"resources": {"train": {"jobs_per_gpu": 3}}}) == 12
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert W.local_gpu_slots(C.load_suite(PAPER)) == 1  # a CPU host still runs GPU-asking jobs, one at a time


def train_blocks(out: str) -> list[str]:
    """The search/train jobs of a dry run's printed plan (profiles' printshellcmds)."""
    return [b for b in out.split("\nrule ")[1:] if b.split(":", 1)[0] in ("train", "search")]


def test_local_run_gives_training_jobs_the_configs_threads_and_shared_gpu_slots(tmp_path):
    """The paper config on a host with two GPUs: every search/train job has the config's
    threads (torch's and OpenMP's), and the `gpu` pool is 2 GPUs x jobs_per_gpu;
    `--set-threads` and `--resources gpu=N` override them."""
    cfg, two_gpus = C.load_suite(PAPER), {"CUDA_VISIBLE_DEVICES": "0,1"}
    paper = ("--configfile", str(PAPER))
    res = snakemake("-n", "--cores", "8", *paper, cwd=tmp_path, env=two_gpus, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    blocks = train_blocks(res.stdout)
    assert len(blocks) == len(W.final_metrics(cfg)) + 72  # every search and train job
    threads = W.train_threads(cfg)
    for block in blocks:
        assert f"threads: {threads}\n" in block and f"--threads {threads} " in block, block
        assert f"OMP_NUM_THREADS={threads} python -m psrnn train" in block
    res = snakemake(
        "-n", "--cores", "8", "--set-threads", "train=2", *paper, cwd=tmp_path, env=two_gpus, timeout=300
    )
    assert all("--threads 2 " in b for b in train_blocks(res.stdout) if b.startswith("train"))
    # the pool is printed when jobs start; a --touch run starts one and runs nothing
    touched = ("--touch", "--cores", "1", W.download_marker(cfg, "mnist"), *paper)
    res = snakemake(*touched, cwd=tmp_path, env=two_gpus)
    pool = 2 * W.jobs_per_gpu(cfg)
    assert f'Provided resources: gpu=Resource("gpu", {pool})' in res.stderr, res.stderr[-3000:]
    res = snakemake(*touched, "--resources", "gpu=3", cwd=tmp_path, env=two_gpus)
    assert 'Provided resources: gpu=Resource("gpu", 3)' in res.stderr, res.stderr[-3000:]


def test_dvc_params_is_the_config_resolved_with_every_tracked_key(tmp_path):
    out = tmp_path / "params.yaml"
    assert main(["config", str(ROOT / "config" / "quick.yaml"), "--dvc-params", str(out)]) == 0
    params = yaml.safe_load(out.read_text())
    quick = C.load_suite(ROOT / "config" / "quick.yaml")
    quick.pop("catalogue")  # what the file says of itself (config/README.md), not a setting
    # DVC runs it under its own name: its runs and experiments never rewrite quick's
    assert C.load_suite(out) == {**quick, "name": "quick-dvc", "fixtures": "", "job_env": {}}
    for keys in D.DVC_STAGE_PARAMS.values():
        assert set(keys) <= set(params)
    assert "extends" not in params
    argv = ["config", str(ROOT / "config" / "quick.yaml"), "--dvc-params", str(out), "--dvc-name"]
    assert main([*argv, "mine-dvc"]) == 0
    assert C.load_suite(out)["name"] == "mine-dvc"
    # a name of its own: not Snakemake's quick (nor small, whose results git holds)
    for name in ("quick", "small", "a/b-dvc"):
        assert main([*argv, name]) == 2
    assert C.load_suite(out)["name"] == "mine-dvc"  # left as it was
    # ... which "-dvc" makes sure of: no suite config's name ends so
    names = [C.load_yaml(path).get("name") for path in (ROOT / "config").glob("*.yaml")]
    assert "small" in names and not [n for n in names if str(n).endswith(D.DVC_SUFFIX)]


def test_dvc_params_moves_the_paths_under_the_configs_data_folder_with_its_name():
    """small.yaml's fixtures and mirrors live in data/small/: DVC's small-dvc writes its own."""
    params = yaml.safe_load(D.dvc_params(SMALL))
    assert params["name"] == "small-dvc" and params["fixtures"] == "data/small-dvc/fixtures"
    assert params["datasets"]["mnist"]["source"] == {
        "mirrors": ["data/small-dvc/fixtures/mnist"],
        "md5": "data/small-dvc/fixtures/mnist/MD5SUMS",
        "official": False,
    }
    assert "data/small/" not in D.dvc_params(SMALL).split("\nname:")[1]


def test_committed_params_yaml_is_the_small_config_resolved():
    """dvc repro runs params.yaml: it must not drift from config/small.yaml."""
    assert (ROOT / "params.yaml").read_text() == D.dvc_params("config/small.yaml")


def test_slurm_profile_dry_runs_unedited_with_per_dataset_runtimes_and_retries(tmp_path):
    """The SLURM profile plans the paper config without edits (no partition placeholders),
    each training job asks for its dataset's runtime and one CPU per torch thread, and
    search/train are re-submitted (resuming their checkpoint) when killed at the walltime.
    (`--cores 8`: a dry run's default of 1 core would cap the threads.)"""
    profile = ("--workflow-profile", str(ROOT / "profiles" / "slurm"), "--configfile", str(PAPER))
    # squeue, not sacct: the plugin's sacct path hangs on a cancelled job and without slurmdbd
    assert yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())[
        "slurm-status-command"
    ] == ("squeue")
    res = snakemake("-n", "--cores", "8", *profile, cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    cfg = C.load_suite(PAPER)
    seen = {}
    for block in res.stdout.split("\nrule ")[1:]:
        rule = block.split(":", 1)[0]
        exp = re.search(r"experiment=(\w+)", block)
        if rule in ("train", "search"):
            runtime = int(re.search(r"runtime=(\d+)", block)[1])
            dataset = W.experiment_dataset(cfg, exp[1])
            assert runtime == W.train_resources(cfg, dataset)["runtime"], (exp[1], runtime)
            threads = W.train_threads(cfg)
            assert re.search(r"\bgpu=1\b", block) and f"cpus_per_task={threads}" in block
            assert f"threads: {threads}\n" in block and f"--threads {threads} " in block
            seen[dataset] = runtime
    assert seen == {"mnist": 120, "fmnist": 60, "cifar10": 240, "imdb": 60}  # DBpedia is off
    assert "slurm_partition" not in res.stdout + res.stderr
    res = snakemake("-n", "--cores", "8", *profile, "--set-threads", "train=2", cwd=tmp_path, timeout=300)
    trains = [b for b in train_blocks(res.stdout) if b.startswith("train")]
    assert trains and all("cpus_per_task=2" in b and "--threads 2 " in b for b in trains)
    compiled = snakemake("--print-compilation", cwd=tmp_path).stdout
    retried = [
        rule.split("'")[1]
        for rule in compiled.split("@workflow.rule(name=")[1:]
        if "@workflow.retries( W . TRAIN_RETRIES" in rule
    ]
    assert sorted(retried) == ["final_group", "search", "search_group", "train"] and W.TRAIN_RETRIES >= 2


REFERENCE = re.compile(r"(?<![\w/.-])((?:config|src|tests|containers|profiles|paper|\.ci)/[\w./-]*[\w])")


@pytest.mark.parametrize(
    "doc",
    [
        "README.md",
        "Snakefile",
        "dvc.yaml",
        "config/README.md",
        "containers/README.md",
        "data/README.md",
        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "config").glob("*.yaml")),
        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "profiles").glob("*/config.yaml")),
    ],
)
def test_every_path_a_document_names_exists(doc):
    """Files and folders the README, the configs and the workflow files point a reader to."""
    text = (ROOT / doc).read_text()
    named = {m for m in REFERENCE.findall(text) if not m.endswith(".sif")}  # images are built
    missing = sorted(
        m
        for m in named - {"config/mine.yaml"}  # the README's example of yours
        if not (ROOT / m).exists()
    )
    assert missing == [], missing


def test_an_unknown_experiment_as_a_target_is_no_rule_not_a_traceback(tmp_path):
    target = "results/small/runs/nosuch_exp/seed0/metrics.json"
    res = snakemake("-n", target, "--configfile", str(ROOT / "config" / "small.yaml"), cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and f"No rule to produce {target}" in out
    assert "Traceback" not in out and "KeyError" not in out


def test_jobs_run_the_python_that_runs_snakemake_outside_a_container(tmp_path):
    """`.venv/bin/snakemake` with the venv not activated (here: no `python` on PATH at all):
    the jobs' `python` is the one running Snakemake (its folder first on PATH)."""
    target = "results/relreg-ci/search/lstm_l2/hidden-8_l2-0.0_lr-0.05/metrics.json"
    config = str(ROOT / "config" / "relreg-ci.yaml")
    res = snakemake(
        "--cores", "1", target, "--configfile", config, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert (tmp_path / target).is_file()
    prefix = W.shell_prefix("config/small.yaml", ROOT, C.load_suite(ROOT / "config" / "small.yaml"))
    assert "export PATH" not in prefix  # in a container: the image's python


def test_the_reports_caption_carries_its_verdict_counts(tmp_path, monkeypatch):
    report = tmp_path / "REPORT.md"
    assert W.verdicts(report) is None  # not compiled yet
    report.write_text(
        "# R\n\n## Findings\n\n- **Table 2 accuracies** (22 of 22 rows run): 5 reproduced, 17 inconclusive.\n"
        "- **The paper's orderings** (6 comparisons): 4 unresolved, 2 the paper's order holds.\n\n"
        "> one seed\n\n## Deviations\n\n- **reproduced** (5 of 30): a list, not the summary\n"
    )
    assert W.verdicts(report) == (
        "Table 2 accuracies: 5 reproduced, 17 inconclusive; "
        "The paper's orderings: 4 unresolved, 2 the paper's order holds"
    )
    report.write_text("# R\n\n## Deviations\n\n- **reproduced** (5 of 30): a\n")
    assert W.verdicts(report) is None  # a small config's report sums up no verdicts
    monkeypatch.chdir(ROOT)  # Snakemake's working directory: the committed second-study results
    committed = W.verdicts(Path("results/relreg/REPORT.md"))
    assert committed == (
        "Table 4.5 as the thesis trained it: each row at its bolded settings: 15 inconclusive, "
        "5 not reproduced, ours higher, 5 not reproduced, ours lower; Table 4.5 as our grid search "
        "selects it: 16 inconclusive, 13 not reproduced, ours lower, 1 not reproduced, ours higher"
    )
    captions = W.report_captions(C.load_suite(ROOT / "config" / "relreg.yaml"))
    assert captions["REPORT"].endswith(f"its verdicts: {committed}")


def test_a_config_error_under_snakemake_is_one_line(tmp_path):
    """A bad suite config stops Snakemake with the CLI's one line (it had been followed by
    three frames of our code) and a failing exit status; nothing is written."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (ROOT / "config" / "small.yaml").read_text().replace("seeds: [0, 1]", "seeds: [0, 1]\nbogus: 1", 1)
    )
    res = snakemake("-n", "--configfile", str(bad), cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "Traceback" not in out and 'File "' not in out
    assert f"psrnn: {bad}: (top level): Additional properties are not allowed ('bogus' was unexpected)" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_damaged_stamped_files_are_named_before_anything_is_planned(tmp_path, monkeypatch):
    """manifest.json and selected.json carry the stamps that keep finished jobs finished; a
    cut one, or one without the keys its job writes (`{}` made Snakemake delete finished
    runs: its missing stamp read as settings changed), is named in one line (the Snakefile
    stops on it) instead of re-running jobs."""
    cfg = C.load_suite(C.ROOT / "config" / "small.yaml")
    monkeypatch.chdir(tmp_path)
    assert W.damaged_stamped_files(cfg) == []  # nothing there yet: nothing damaged
    good, cut = Path(W.manifest(cfg, "mnist")), Path(W.selection(cfg, "mnist_ps30_predrec_a4"))
    manifest = {"workflow_spec": "0" * 16, "dataset": "mnist", "counts": {"train": 1}, "num_classes": 10}
    for p, text in ((good, json.dumps(manifest)), (cut, '{"overrides": {"lr"')):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (good.parent / W.CHECKSUMS).write_text(
        f"{hashlib.sha256(good.read_bytes()).hexdigest()}  manifest.json\n"
    )
    assert W.damaged_stamped_files(cfg) == [str(cut)]  # a stale stamp is not damage: its job re-runs
    msg = (
        r"^damaged \(not JSON, without the keys its job writes, not the manifest.json a sound splits.sha256 "
        rf"beside it names, or choosing what its grid does not hold\): {re.escape(str(cut))}; delete them"
    )
    with pytest.raises(UserError, match=msg):
        W.check_stamped_files(cfg)
    for text in ("[1, 2]", "{}", json.dumps({k: v for k, v in manifest.items() if k != "counts"})):
        good.write_text(text)  # JSON, but not what prepare writes
        assert W.damaged_stamped_files(cfg) == [str(good), str(cut)], text
    cut.write_text(json.dumps({"workflow_spec": "0" * 16}))  # a stamp alone is no selection
    assert str(cut) in W.damaged_stamped_files(cfg)


def test_a2c_a_manifest_that_is_not_the_one_its_checksums_name_is_damaged(tmp_path, monkeypatch):
    """Battery A-2c: a manifest.json whose stamp's value was edited, every key kept, planned
    every run on its data again without prepare, and each job's refusal deleted a finished
    metrics.json. Its splits.sha256 line (prepare's) now tells it apart from a manifest that
    is only stale (its config changed: prepare re-runs), before anything is planned."""
    cfg = C.load_suite(C.ROOT / "config" / "small.yaml")
    monkeypatch.chdir(tmp_path)
    path = Path(W.manifest(cfg, "mnist"))
    path.parent.mkdir(parents=True)
    manifest = {"workflow_spec": "1" * 16, "dataset": "mnist", "counts": {"train": 1}, "num_classes": 10}
    path.write_text(json.dumps(manifest))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    for line in (f"{digest}  manifest.json", f"{digest.upper()} *manifest.json"):  # as sha256sum -c reads
        (path.parent / W.CHECKSUMS).write_text(f"{'0' * 64}  train.pt\n{line}\n")
        assert W.damaged_stamped_files(cfg) == []
    path.write_text(json.dumps({**manifest, "workflow_spec": "0" * 16}))
    assert W.damaged_stamped_files(cfg) == [str(path)]
    for text in (  # a splits.sha256 that training refuses vouches for no edited manifest
        f"{'0' * 64}  train.pt\n",  # stop 62's pass, M-4: the manifest's line removed
        f"{'0' * 64}  manifest.json\n{hashlib.sha256(path.read_bytes()).hexdigest()}  manifest.json\n",
        f"not a line\n{hashlib.sha256(path.read_bytes()).hexdigest()}  manifest.json\n",
    ):
        (path.parent / W.CHECKSUMS).write_text(text)
        assert W.damaged_stamped_files(cfg) == [str(path)], text
    (path.parent / W.CHECKSUMS).unlink()  # deleted, or an older psrnn's folder: training refuses it
    assert W.damaged_stamped_files(cfg) == [str(path)]
    (path.parent / W.CHECKSUMS).mkdir()  # no file at all where it should be
    assert W.damaged_stamped_files(cfg) == [str(path)]


@pytest.mark.parametrize(
    "point, overrides, draws, damaged",
    [
        ("lr-0.03", {"lr": 0.03}, None, False),  # what select writes
        ("lr-0.5", {"lr": 0.5}, None, True),  # battery A-2d: a point outside the grid
        ("lr-0.03", {"lr": 0.01}, None, True),  # A-2e: another point's settings under this id
        ("lr-0.01", {"lr": 0.03}, None, True),
        ("lr-0.03", {"lr": 0.03}, [{"seed": 1, "point": "lr-0.01", "overrides": {"lr": 0.01}}], False),
        ("lr-0.03", {"lr": 0.03}, [{"seed": 1, "point": "lr-0.01", "overrides": {"lr": 0.5}}], True),
    ],
)
def test_a_selection_outside_its_grid_is_damaged(point, overrides, draws, damaged, tmp_path, monkeypatch):
    """A selected.json with every key but a point the grid does not hold, or another point's
    settings, had trained the final runs there with rc 0 (the confirming pass of stop 60,
    A-2d/A-2e); the Snakefile now stops on it before planning, as on a cut one."""
    cfg = C.load_suite(C.ROOT / "config" / "small.yaml")
    monkeypatch.chdir(tmp_path)
    assert [pid for pid, _ in C.grid_points(cfg["experiments"]["mnist_ps30_predrec_a4"])] == [
        "lr-0.01",
        "lr-0.03",
    ]
    sel = Path(W.selection(cfg, "mnist_ps30_predrec_a4"))
    sel.parent.mkdir(parents=True)
    chosen = {"workflow_spec": "0" * 16, "experiment": "mnist_ps30_predrec_a4", "point": point}
    chosen |= {"overrides": overrides, "best_valid_acc": 0.62, **({"draws": draws} if draws else {})}
    sel.write_text(json.dumps(chosen))
    assert W.damaged_stamped_files(cfg) == ([str(sel)] if damaged else [])


def test_a_training_code_change_makes_the_selection_a_plain_input(tmp_path, monkeypatch):
    """Issue: after a real training-code change, one invocation re-trained the search but
    left the final runs and the compile on the old code (the ancient selected.json masked
    their params). The selection's stamp now holds the code's digest: under other code it
    is not current, so train_inputs hands it over plain and what follows re-runs."""
    from psrnn.engine import codehash
    from psrnn.files import write_json

    cfg = C.load_suite(C.ROOT / "config" / "small.yaml")
    path = tmp_path / "selected.json"
    write_json(path, {"overrides": {"lr": 0.03}, **W.selection_stamp(cfg, "mnist_ps30_predrec_a4")})
    assert W.is_current(path, W.selection_stamp(cfg, "mnist_ps30_predrec_a4"))
    monkeypatch.setattr(codehash, "training_digest", lambda study: "0" * 64)  # other training code
    assert not W.is_current(path, W.selection_stamp(cfg, "mnist_ps30_predrec_a4"))


def test_the_batch_profile_sends_short_runs_to_the_cluster_eight_at_a_time(tmp_path):
    """profiles/batch beside profiles/slurm: the small config's runs go to the cluster in 4
    SLURM jobs instead of 32. An experiment's search, selection and final runs are one
    piece of the DAG and share a batch (mnist_ps30_predrec_a4: 2 search runs, its
    selection, 2 final runs); every other final run is a piece of its own; 8 pieces a
    batch: 29 pieces, 4 batches, each capped at the profile's 2 CPUs."""
    profiles = (
        "--workflow-profile",
        str(ROOT / "profiles" / "slurm"),
        "--profile",
        str(ROOT / "profiles" / "batch"),
    )
    res = snakemake("-n", "--configfile", str(SMALL), *profiles, cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    batches = re.split(r"\] Group job ", res.stdout)[1:]
    assert [b.split(" ", 1)[0] for b in batches] == ["batch"] * 4
    # a batch's jobs are printed indented under it ("    rule train:"), other jobs are not
    rules = [re.findall(r"^[ \t]+rule (\w+):", b, re.M) for b in batches]
    cfg = C.load_suite(SMALL)
    assert sum(r.count("train") for r in rules) == len(W.final_metrics(cfg)) == 30
    grid = [r for r in rules if "search" in r]
    assert len(grid) == 1 and grid[0].count("search") == 2 and grid[0].count("select") == 1
    pieces = [r.count("train") - (2 if r is grid[0] else 0) + (r is grid[0]) for r in rules]
    assert sorted(pieces) == [5, 8, 8, 8]
    profile = yaml.safe_load((ROOT / "profiles" / "batch" / "config.yaml").read_text())
    assert profile["cores"] == 2 and profile["group-components"] == ["batch=8"]
