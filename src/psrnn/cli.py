"""The one command line: `python -m psrnn <command> ...` (Snakemake, DVC and tests call it).

    python -m psrnn --help
    python -m psrnn train --config config/small.yaml --experiment mnist_gru --seed 0

Each command lives in the module that does the work; that module provides
`configure(parser)` (its arguments) and `run(args) -> int` (exit status). Modules are
imported only when their command runs, so `--help` and light commands start fast. The
shared commands are CORE; each study brings its own (psrnn.registry.Study.commands: the
first study's data jobs, paper and recipe), listed after them, read from the registry,
which imports none of a study's code.

Every command takes `-q/--quiet` (no progress or info lines: only what was asked for, such as
`config`'s listing or its --json, and warnings and errors) and `-v/--verbose` (debug messages
of the `psrnn` logger and the libraries' loggers on stderr, and the traceback behind a
one-line error), before or after the command's name.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterable

from psrnn.errors import UserError
from psrnn.registry import STUDIES, Study

# command -> (module, one-line help): the shared commands; each study adds its own
# (psrnn.registry.Study.commands: the first study's data jobs, paper and recipe), after these
CORE: dict[str, tuple[str, str]] = {
    "config": ("psrnn.config_cli", "validate a suite config and list its runs"),
    "train": ("psrnn.engine.train", "train one model (one experiment, one seed)"),
    "train-group": (
        "psrnn.engine.group",
        "train a group of runs in one process (a grid search's shape group)",
    ),
    "gpu-run": (
        "psrnn.onegpu",
        "run a suite on one GPU without Snakemake: plan runs by measured memory, train, select, compile",
    ),
    "select": ("psrnn.engine.choose", "pick an experiment's grid point by the study's validation metric"),
    "compile": ("psrnn.compile", "compile tables, figures and the report from finished runs"),
    "explain": ("psrnn.explain", "print the runs behind one cell of a compiled table, and its verdict"),
    "check": ("psrnn.engine.regression", "compare runs' metrics with committed expected values"),
    "stale": (
        "psrnn.engine.stale",
        "list (or forget) finished runs recorded with other settings than the suite's",
    ),
    "restamp": (
        "psrnn.engine.restamp",
        "re-stamp runs with today's training code once re-trained samples give their numbers",
    ),
    "bench": ("psrnn.bench", "measure training speed, memory and data preparation"),
    "code-digest": (
        "psrnn.engine.codehash",
        "digests of the code each job runs, comments and docstrings aside",
    ),
}


def all_commands(studies: Iterable[Study]) -> dict[str, tuple[str, str]]:
    """CORE, then each study's commands in the registry's order; a study's command that
    has a shared command's name is an error naming both (two studies': psrnn.registry)."""
    out = dict(CORE)
    for study in studies:
        if clash := sorted(CORE.keys() & study.commands.keys()):
            raise ValueError(f"study {study.name!r} has the command(s) {clash}, shared commands of psrnn.cli")
        out.update(study.commands)
    return out


COMMANDS = all_commands(STUDIES.values())  # reading the registry imports no study's code

# Commands whose standard output is what the user asked for (a listing, JSON): -q keeps it
# and silences only their info lines, which go to the `psrnn` logger. Every other command
# prints its progress on stdout (the training loop's epoch lines among them), which -q drops.
ANSWERS = frozenset({"config"})


def build_parser() -> argparse.ArgumentParser:
    from psrnn import __version__

    # allow_abbrev=False here and below: `train --conf X` had trained outside its suite's job_env
    # (psrnn.engine.jobenv reads the command line before this parser: only whole option names)
    parser = argparse.ArgumentParser(
        prog="python -m psrnn", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("--version", action="version", version=f"psrnn {__version__}")
    add_verbosity(parser, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    chosen = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        p.set_defaults(_module=module)
        add_verbosity(p, argparse.SUPPRESS)
        if name == chosen:  # only the chosen command's module is imported
            importlib.import_module(module).configure(p)
    return parser


def add_verbosity(p: argparse.ArgumentParser, default: object) -> None:
    """-q/-v on the top parser and on every command's (SUPPRESS: a command's parser must not
    reset what was given before its name)."""
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default,
        help="no progress or info lines: only what was asked for, warnings and errors",
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="debug messages on stderr, and the traceback behind a one-line error",
    )


LOG = logging.getLogger("psrnn")


def set_verbosity(quiet: bool, verbose: bool) -> None:
    """The `psrnn` logger's level and a stderr handler for it (once); debug from the
    libraries' loggers too with --verbose."""
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    if not any(getattr(h, "_psrnn", False) for h in LOG.handlers):
        handler = logging.StreamHandler()  # stderr, looked up when it writes (pytest's capture)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handler._psrnn = True  # type: ignore[attr-defined]
        LOG.addHandler(handler)
        LOG.propagate = False
    LOG.setLevel(level)
    if verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s: %(message)s")


# errors about a path the user gave (an --out, a folder to write): one line, no traceback
PATH_ERRORS = {
    errno.ENOSPC: "no space left on the device writing {}",
    errno.EROFS: "{}: read-only file system",
    errno.EACCES: "{}: permission denied",
    errno.EEXIST: "{}: exists and is not a folder",
    errno.ENOTDIR: "{}: a part of the path is a file, not a folder",
    errno.EISDIR: "{}: is a folder, not a file",
    # replacing a mount point (`--out /`) or a folder a process holds
    errno.EBUSY: "{}: busy (a mount point or a folder in use), not a file",
    # over `ulimit -f` (Python ignores SIGXFSZ, so the write fails instead of the process)
    errno.EFBIG: "{}: file too large for this shell's file size limit (ulimit -f): raise it",
    errno.ELOOP: "{}: a loop of symbolic links (links that lead back to themselves): point it at a folder",
}


def known_failure(err: BaseException) -> str | None:
    """One line for the library errors a setting or a damaged dataset causes (None for any
    other: its traceback is a bug report): an allocation no device can make (`--set
    hidden=100000000`), a label outside the model's classes (a prepared split whose labels
    its manifest does not count)."""
    text = str(err).strip()
    first = text.splitlines()[0] if text else type(err).__name__
    if isinstance(err, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text.lower()):
        return f"out of memory: {first[:200]} (a smaller model, batch_size or max_tokens needs less)"
    if isinstance(err, IndexError) and re.search(r"Target -?\d+ is out of bounds", text):
        return (
            f"{first} for the model's classes: a label outside the prepared dataset's num_classes "
            "(re-prepare the dataset)"
        )
    return None


def error_line(command: str, text: str, verbose: bool) -> int:
    """A known failure as one line on stderr (after its traceback with --verbose); exit 2."""
    if verbose:
        traceback.print_exc()
    print(f"psrnn {command}: error: {text}", file=sys.stderr)
    return 2


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


# what the same command does after Ctrl-C or SIGTERM, where "resumes" would promise too much:
# train-group checkpoints every --save-every seconds, not every epoch (psrnn.engine.group)
AFTER_INTERRUPT = {
    "train-group": (
        "the same command resumes each run from its last checkpoint (written every --save-every "
        "seconds, 60 by default, so up to that much training is lost; a run stopped before its "
        "first one starts again)"
    ),
    # restamp keeps no re-training: it stamps once its comparisons are done (--verify keeps
    # its proof after each experiment)
    "restamp": (
        "the same command re-trains and compares again, and finishes any stamps it had begun "
        "(with --verify, from the first experiment it had not proven)"
    ),
}

# options whose values each name a run (its folder): one given twice would be trained by two
# members of one process, the second refused as "another process is training this run"
ONE_RUN_EACH = ("seeds",)


def refuse_repeats(args: argparse.Namespace) -> None:
    """A UserError for a value given twice to an option of ONE_RUN_EACH (`--seeds 3 3`)."""
    for option in ONE_RUN_EACH:
        values = getattr(args, option, None) or []
        repeated = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if repeated is not None:
            raise UserError(f"--{option}: {repeated} given twice (each names one run: give it once)")


def unloadable(err: ImportError) -> str | None:
    """One line for a library whose shared object cannot be loaded (`ulimit -v` below what
    torch maps, about 1 GB; a damaged install): the machine's, not a bug. None otherwise."""
    text = " ".join(str(err).split())
    if "shared object" not in text:
        return None
    return f"could not load a library ({text}): check `ulimit -v` and the install"


VERBOSITY = frozenset({"-q", "--quiet", "-v", "--verbose"})


def verbosity(arg: str) -> bool:
    """-q/-v and their long forms, and short ones run together as argparse takes them (`-vv`)."""
    return arg in VERBOSITY or re.fullmatch(r"-[qv]+", arg) is not None


def command_first(argv: list[str]) -> list[str]:
    """`argv` with -q/-v given before the command moved behind its name (every command takes
    them; the same namespace): `-q train --config X` (and `-vv train`, battery N-AB2) had
    trained outside its suite's job_env, which psrnn.engine.jobenv finds on a command line
    that starts with the command."""
    lead = 0
    while lead < len(argv) and verbosity(argv[lead]):
        lead += 1
    if 0 < lead < len(argv) and not argv[lead].startswith("-"):
        return [argv[lead], *argv[:lead], *argv[lead + 1 :]]
    return argv


def refuse_second_config(argv: list[str]) -> None:
    """A UserError for --config given twice: argparse keeps the last, while the suite's
    job_env was read from the first (psrnn.engine.jobenv), so the run had trained one suite
    under another's environment (battery N-AB4)."""
    given = [a for a in argv if a == "--config" or a.startswith("--config=")]
    if len(given) > 1:
        raise UserError(f"--config given {len(given)} times: name one config")


def suite_job_env(argv: list[str]) -> dict[str, str]:
    """The job_env of the suite a training command line names (psrnn.engine.jobenv)."""
    from psrnn.engine import jobenv

    return jobenv.suite_env(command_first(argv))


def missing_job_env(env: dict[str, str]) -> dict[str, str]:
    """The variables of `env` that this process does not run under."""
    return {k: v for k, v in env.items() if os.environ.get(k) != v}


def job_env_in_effect(env: dict[str, str]) -> None:
    """A UserError where the suite's job_env is not what torch runs under in this process:
    the run had trained on other CPU kernels than the suite's runs without a word. main sets
    it itself while torch is not loaded (the confirming pass of stop 62, J-5: `psrnn.cli.main`
    called from Python); once torch is loaded without it (J-6: a notebook that imported torch
    first), or after torch ran its first operation, when the variable no longer picks the
    kernels (N-R16: the record said `default`, torch ran AVX512's; torch's own answer
    decides), it is too late. `env`: the suite's job_env (suite_job_env)."""
    if missing := missing_job_env(env):
        named = ", ".join(f"{k}={v}" for k, v in missing.items())
        raise UserError(
            f"the suite's job_env ({named}) is not in effect and torch is already loaded in this "
            "process, so this run would train on other CPU kernels than the suite's: start it as "
            "`python -m psrnn ...` (it sets them), or set them before torch is imported"
        )
    want = env.get("ATEN_CPU_CAPABILITY")
    if want is not None and "torch" in sys.modules:
        import torch

        running = torch.backends.cpu.get_cpu_capability()
        if running.lower() != want.lower():
            raise UserError(
                f"torch in this process runs the CPU kernels {running}, not the suite's job_env "
                f"ATEN_CPU_CAPABILITY={want} (set after torch had started them): start it as "
                "`python -m psrnn ...` (it sets them), or set them before torch is imported"
            )


def entry() -> int:
    """`python -m psrnn` and the installed `psrnn` script alike: -q/-v moved behind the
    command, then `train` under its suite's job_env, as Snakemake runs it (the script had
    called main directly and trained without it: battery N-AB3)."""
    from psrnn.engine import jobenv

    argv = command_first(sys.argv[1:])
    jobenv.apply(argv)
    return main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job_env = suite_job_env(argv)  # empty for a command that trains nothing
    if "torch" not in sys.modules:  # before the parser loads the commands' modules, and torch
        os.environ.update(missing_job_env(job_env))  # in effect when torch loads (J-5)
    saved, sys.argv = sys.argv, [sys.argv[0], *argv]
    try:
        args = build_parser().parse_args(argv)
    except ImportError as err:  # the commands' modules load torch
        if not unloadable(err):
            raise
        command = next((a for a in argv if not a.startswith("-")), "")
        return error_line(command, unloadable(err) or "", "-v" in argv or "--verbose" in argv)
    finally:
        sys.argv = saved
    quiet, verbose = getattr(args, "quiet", False), getattr(args, "verbose", False)
    set_verbosity(quiet, verbose)
    previous = None
    if threading.current_thread() is threading.main_thread():  # a scheduler's kill says what Ctrl-C says
        previous = signal.signal(signal.SIGTERM, _terminated)
    start = time.perf_counter()
    LOG.debug("%s: %s, arguments %s", args.command, args._module, argv)
    try:
        drop = quiet and args.command not in ANSWERS
        with open(os.devnull, "w") if drop else contextlib.nullcontext(sys.stdout) as out:
            with contextlib.redirect_stdout(out):
                refuse_repeats(args)
                refuse_second_config(argv)
                job_env_in_effect(job_env)
                status = int(importlib.import_module(args._module).run(args) or 0)
        LOG.debug("%s: exit %d after %.1f s", args.command, status, time.perf_counter() - start)
        return status
    except (UserError, FileNotFoundError) as err:  # psrnn.config.ConfigError is a UserError
        return error_line(args.command, str(err), verbose)
    except BrokenPipeError:  # the reader went away (`psrnn config ... | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (RuntimeError, IndexError) as err:
        line = known_failure(err)
        if line is None:
            raise
        return error_line(args.command, line, verbose)
    except KeyboardInterrupt:  # checkpoints and outputs are written whole (psrnn.files)
        after = AFTER_INTERRUPT.get(args.command, "the same command resumes")
        print(f"psrnn {args.command}: interrupted; {after}", file=sys.stderr)
        return 130
    except OSError as err:
        if err.errno not in PATH_ERRORS:
            raise
        # files are written whole or not at all (psrnn.files): nothing half-written stays
        # os.replace(tmp, target) names the target second
        where = err.filename2 if err.errno in (errno.EISDIR, errno.EBUSY) and err.filename2 else err.filename
        return error_line(args.command, PATH_ERRORS[err.errno].format(where or "a file"), verbose)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":  # `python -m psrnn.cli ...` as `python -m psrnn ...` (battery J-10 of stop 62)
    raise SystemExit(entry())
