"""Every command the README, docs/ and results/*/README.md show is listed here: those that
finish within a minute are run in a fresh clone, and none may change a committed file
(`git status` shows no tracked change afterwards); the rest say why they are not run. A
command a page adds fails the first test until it is listed.

    uv run --frozen pytest tests/test_doc_commands.py
"""

import os
import re
import shlex
import subprocess
import sys

import pytest

from psrnn import config as C

ROOT = C.ROOT
PAGES = [
    "README.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "results").glob("*/README.md")),
]
REFUSED = "committed result(s) this command would rewrite"
BUDGET = "bench --only budget --config config/"

# command (its start, after `uv run [--frozen]`) -> (exit status, a fragment of its output)
CHEAP = {
    "python -m psrnn compile --config config/relreg.yaml": (0, "compile: 44 files in results/relreg"),
    "snakemake -n --configfile config/quick-imdb.yaml": (0, "Job stats"),
    "snakemake -n --configfile config/paper.yaml": (0, "Job stats"),
    "python -m psrnn recipe --digits ../shared/data/mnist-test --no-train": (2, REFUSED),
}  # and every `bench --only budget ... --times-from` (seconds; `listed`)
# commands not run here, by their start, and why
COSTLY = {
    "python3 -m pip install": "installs uv and runs the small pipeline (minutes) or the whole test suite",
    "snakemake --cores": "a pipeline: minutes (small) to GPU-days (paper.yaml)",
    "snakemake --configfile": "a pipeline or Snakemake's report of a finished run",
    "snakemake --workflow-profile": "submits the paper config to a SLURM cluster",
    "bash results/": "a GPU script (quick-imdb, mnist-real)",
    "python -m psrnn bench": "measures training on this machine (minutes to 45 min)",
    "PYTHONPATH=src python -m psrnn bench": "on a GPU machine",
    "python -m psrnn download": "the network (official mirrors)",
    "python -m psrnn prepare": "needs the downloaded archives",
    "dvc ": "DVC runs the pipeline (minutes) or compares experiments made by it",
    "git add dvc.lock": "commits the DVC tour's baseline, after `dvc repro`",
    "pytest tests/test_data_imdb_real.py": "needs the real IMDB archive",
    "apptainer build": "builds a container image (minutes; as root)",
    "sudo apptainer build": "builds a container image (minutes; as root)",
    "python -m psrnn recipe": "trains on real digits (minutes to hours)",
    "python -m psrnn train": "trains a run (needs prepared data; minutes)",
}


def doc_commands() -> list[tuple[str, str]]:
    """(page, command) of every line of a bash block, continuations joined, `uv run
    [--frozen]` and comments dropped."""
    out = []
    for page in PAGES:
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", (ROOT / page).read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                cmd = line.split("  #")[0].strip()
                if cmd and not cmd.startswith("#"):
                    for part in cmd.split(";"):
                        part = re.sub(r"^uv run (--frozen )?", "", " ".join(part.split()))
                        out.append((page, part))
    return out


def listed(cmd: str) -> str | None:
    if cmd in CHEAP:
        return "cheap"
    if cmd.startswith(f"python -m psrnn {BUDGET}") and "--times-from" in cmd:
        return "cheap"  # a budget from stored times: seconds
    return next((k for k in COSTLY if cmd.startswith(k)), None)


def test_every_command_a_page_shows_is_run_here_or_says_why_not():
    found = doc_commands()
    assert len(found) >= 40
    unlisted = [f"{page}: {cmd}" for page, cmd in found if listed(cmd) is None]
    assert unlisted == []
    shown = {cmd for _, cmd in found}
    assert [c for c in CHEAP if c not in shown] == []  # each cheap one is still on a page


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A fresh clone of this checkout's HEAD (what CI tests)."""
    path = tmp_path_factory.mktemp("docs") / "psrnn"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(path)], check=True)
    return path


@pytest.mark.slow
def test_no_cheap_documented_command_changes_a_committed_file(clone):
    budgets = sorted({cmd for _, cmd in doc_commands() if listed(cmd) == "cheap" and cmd not in CHEAP})
    assert len(budgets) >= 4
    env = {**os.environ, "PYTHONPATH": str(clone / "src")}
    for cmd in [*CHEAP, *budgets]:
        rc, said = CHEAP.get(cmd, (2, REFUSED))
        argv = shlex.split(cmd)
        argv = [sys.executable, *argv[1:]] if argv[0] == "python" else [sys.executable, "-m", *argv]
        done = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == rc, (cmd, done.stderr[-1500:])
        assert said in done.stdout + done.stderr, cmd
        if rc:
            assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, cmd
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=clone,
            capture_output=True,
            text=True,
        ).stdout
        assert changed == "", (cmd, changed)


def test_the_extending_page_s_own_config_writes_results_of_its_own(tmp_path):
    """docs/extending.md's variant: `extends: small.yaml` with a name of its own and the
    keys it changes; its runs go to results/mine, never the committed results/small."""
    text = (ROOT / "docs" / "extending.md").read_text()
    assert "`extends: small.yaml`" in text and "`name: mine`" in text
    mine = ROOT / "config" / "mine-doc-test.yaml"  # beside small.yaml, as the page says
    try:
        mine.write_text("extends: small.yaml\nname: mine\ndefaults: {lr: 0.01}\n")
        cfg = C.load_suite(mine)
    finally:
        mine.unlink()
    assert str(C.results_root(cfg)) == "results/mine" and cfg["defaults"]["lr"] == 0.01
    assert cfg["experiments"] == C.load_suite(ROOT / "config" / "small.yaml")["experiments"]
