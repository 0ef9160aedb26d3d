"""`python -m psrnn explain`: the runs behind one table cell of the committed results, with the
cell's value and verdict recomputed from them, the commands the Snakefile runs to make them,
and one line listing the valid tables, rows or columns when one is wrong."""

import ast
import re
from types import SimpleNamespace

import pytest

from psrnn import config as C
from psrnn.cli import main
from psrnn.explain import commands
from psrnn.files import read_json

ROOT = C.ROOT


def explain(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["explain", *args])
    out = capsys.readouterr()
    return status, out.out, out.err


def run_lines(out: str) -> dict[int, str]:
    """seed -> its line of the runs' table."""
    return {int(m[1]): m[0] for m in re.finditer(r"^(\d+) +\S+ +results/.*$", out, re.M)}


def test_a_table_45_cell_of_relreg_full_lists_its_18_runs_and_recomputes_its_verdict(capsys):
    """lstm_l2 at 14 bits (Table 4.5 as our search selects it): 18 counted runs, one per tied
    point drawn (seeds 19 and 20 drew two points again and are not counted), 84.74 % with its
    interval, not reproduced, the same as the committed table45.csv."""
    status, out, err = explain(
        capsys,
        "--config",
        "config/relreg-full.yaml",
        "--table",
        "table45",
        "--row",
        "LSTM (with L2)",
        "--column",
        "14",
    )
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert (
        lines[0]
        == "Table 4.5 as our grid search selects it (table45), row lstm_l2 (LSTM (with L2)), column 14 bits"
    )
    assert lines[1] == "  thesis 99.49 %; equivalence margin ±0.74 pp"
    assert lines[2].startswith("  ours 84.74 [68.94, 94.14] over 18 runs") and "11/18 [36, 83]" in lines[2]
    assert lines[3].startswith("  verdict: not reproduced (ours lower); cause: our selection: ")
    assert lines[4] == (
        "  compiled results/relreg-full/tables/table45.csv: 84.74 [68.94, 94.14], "
        "not reproduced (ours lower): the same"
    )
    runs = run_lines(out)
    assert sorted(runs) == list(range(1, 19))
    assert runs[1].split() == [
        "1",
        "0.10",
        "results/relreg-full/runs/lstm_l2/seed1",
        "hidden-6_l2-0.01_lr-0.01",
        "(draw",
        "1",
        "of",
        "20:",
        "tied",
        "point",
        "1",
        "of",
        "18)",
        digest("results/relreg-full/runs/lstm_l2/seed1"),
        "AMD",
        "EPYC",
        "(cpu),",
        "torch",
        "2.14.1+cu130",
    ]
    assert all(
        digest(f"results/relreg-full/runs/lstm_l2/seed{k}") in line and "draw" in line
        for k, line in runs.items()
    )
    # the mean of the 18 values printed is the cell's
    values = [float(line.split()[1]) for line in runs.values()]
    assert sum(values) / 18 == pytest.approx(84.74, abs=0.01)
    assert (
        "  seed 19 (results/relreg-full/runs/lstm_l2/seed19, hidden-6_l2-0.01_lr-0.01 (draw 19 of 20: tied "
        "point 1 of 18)): a tied point drawn again" in out
    )
    every = " ".join(str(k) for k in range(1, 21))
    assert lines[-1] == (
        "  export ATEN_CPU_CAPABILITY=default; export MKL_CBWR=COMPATIBLE; OMP_NUM_THREADS=1 python -m psrnn "
        f"train-group --config config/relreg-full.yaml --experiment lstm_l2 --seeds {every} --selected "
        "results/relreg-full/search/lstm_l2/selected.json --restart-on-change --threads 1"
    )
    assert lines[-2].startswith(
        "  snakemake --cores all --configfile config/relreg-full.yaml "
        "results/relreg-full/runs/lstm_l2/seed1/metrics.json"
    )


def digest(run: str) -> str:
    """The training digest a committed run records, as explain prints it (12 digits): a
    restamp changes it, not what explain shows of it."""
    return str(read_json(C.ROOT / run / "metrics.json")["training_code"])[:12]


def test_a_table_2_cell_of_mnist_real_lists_its_3_runs_and_their_train_commands(capsys):
    """mnist_gru: 86.52, 87.92 and 87.94 % give 87.46 ± 0.81 [85.44, 89.48]; at reduced scale
    the verdict is "not assessed"; seed 0's record is its search run's."""
    status, out, err = explain(
        capsys, "--config", "config/mnist-real.yaml", "--table", "table2", "--row", "table2/mnist/gru"
    )
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "Table 2: test accuracy (table2), row mnist_gru (table2/mnist/gru), column accuracy"
    assert lines[2].startswith("  ours 87.46 ± 0.81, 95% CI [85.44, 89.48] over 3 runs")
    assert (
        lines[3]
        == "  verdict: not assessed (reduced-scale check on real digits (4,000 at 14 x 14, 10 epochs))"
    )
    assert lines[4].endswith("table2.csv: 87.46 [85.44, 89.48]: the same")
    runs = run_lines(out)
    assert {k: line.split()[1] for k, line in runs.items()} == {0: "86.52", 1: "87.92", 2: "87.94"}
    assert "lr-1.0 (selected); record reused from results/mnist-real/search/mnist_gru/lr-1.0" in runs[0]
    assert all(
        digest(f"results/mnist-real/runs/mnist_gru/seed{k}") in line
        and "AMD EPYC (cpu), torch 2.14.1+cu130" in line
        for k, line in runs.items()
    )
    assert lines[-3:] == [
        "  OMP_NUM_THREADS=1 python -m psrnn train --config config/mnist-real.yaml --experiment mnist_gru "
        f"--seed {k} --selected results/mnist-real/search/mnist_gru/selected.json --out "
        f"results/mnist-real/runs/mnist_gru/seed{k} --restart-on-change --threads 1"
        for k in (0, 1, 2)
    ]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--config", "config/mnist-real.yaml", "--table", "table9", "--row", "mnist_gru"],
            "--table 'table9' is no table of config mnist-real; valid: table2 (Table 2: test accuracy)",
        ),
        (
            ["--config", "config/mnist-real.yaml", "--table", "table2", "--row", "mnist_ps50"],
            "--row 'mnist_ps50' is no row of table2; valid: mnist_gru (table2/mnist/gru), mnist_full_rec_a1 "
            "(table2/mnist/full-rec-a1), mnist_full_rec_a20 (table2/mnist/full-rec-a20), mnist_ps30_rec_a1 "
            "(table2/mnist/ps30-rec-a1), mnist_ps30_predrec_a40 (table2/mnist/ps30-predrec-a40)",
        ),
        (
            [
                "--config",
                "config/relreg-full.yaml",
                "--table",
                "table45_thesis",
                "--row",
                "lstm_thesis",
                "--column",
                "15",
            ],
            "--column '15' is no column of table45_thesis; valid: 6 (6 bits), 8 (8 bits), 10 (10 bits), "
            "12 (12 bits), 14 (14 bits), 16 (16 bits)",
        ),
        (
            [
                "--config",
                "config/relreg-full.yaml",
                "--table",
                "table45_thesis",
                "--row",
                "Transformer (with L2)",
            ],
            "--row 'Transformer (with L2)' names 2 rows of table45_thesis: transformer_thesis, "
            "transformer_thesis_nomask",
        ),
    ],
)
def test_a_bad_table_row_or_column_is_one_line_naming_the_valid_ones(capsys, monkeypatch, args, line):
    """Named from the config alone, before any run is read (gathering would fail here)."""

    def unread(*a, **k):
        raise AssertionError("the runs were read")

    monkeypatch.setattr("psrnn.studies.relreg.explain.gather", unread)
    monkeypatch.setattr("psrnn.studies.private_shared.results.explain.gather", unread)
    status, out, err = explain(capsys, *args)
    assert (status, out, err) == (2, "", f"psrnn explain: error: {line}\n")


def shell_template(rule: str) -> str:
    """The shell command of a Snakefile rule, its string literals joined."""
    body = (ROOT / "Snakefile").read_text().split(f"\nrule {rule}:\n", 1)[1].split("    shell:\n", 1)[1]
    literals = []
    for line in body.splitlines():
        if not line.startswith(" " * 8):
            break
        literals.append(line.strip())
    return ast.literal_eval("(" + " ".join(literals) + ")")


@pytest.mark.parametrize(
    ("config", "rule"), [("mnist-real.yaml", "train"), ("relreg-full.yaml", "final_group")]
)
def test_the_commands_are_the_snakefiles_jobs(config, rule):
    """What explain prints is the rule's shell line with the job's values filled in (and the
    shell prefix's job_env), less its log redirection."""
    from psrnn import workflow as W

    cfg = C.load_suite(ROOT / "config" / config)
    exp = next(e for e in C.enabled_experiments(cfg) if C.has_grid(cfg, e))
    seed = cfg["seeds"][0]
    template = (
        shell_template(rule).replace('"$PSRNN_CONFIG"', f"config/{config}").replace(" > {log} 2>&1", "")
    )
    line = template.format(
        threads=W.train_threads(cfg),
        wildcards=SimpleNamespace(experiment=exp, seed=seed),
        params=SimpleNamespace(
            selected=f"--selected {W.selection(cfg, exp)}",
            out=str(C.run_dir(cfg, exp, seed)),
            seeds=" ".join(str(k) for k in cfg["seeds"]),
        ),
    )
    assert commands(cfg, ROOT / "config" / config, exp, [seed])[0] == W.job_env(cfg) + " ".join(line.split())
