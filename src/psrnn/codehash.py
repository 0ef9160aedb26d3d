"""Digests of the code a job runs, blind to comments, docstrings and layout:
`python -m psrnn code-digest`.

    python -m psrnn code-digest --out results/code      # data.json, <study>-train.json, <study>-compile.json

A digest covers the modules a job's entry points import, followed through the package's
static imports (inside functions too), each read as its syntax tree without docstrings
(comments and formatting are not in the tree). So a comment or a reworded docstring
changes no digest, and a changed constant, expression or import does. DVC's stages
depend on these files instead of the whole package (dvc.yaml's `code` stage writes them),
and Snakemake's training jobs carry their study's training digest among their settings
(psrnn.workflow.experiment_spec): a real change to the code that trains re-runs the runs,
a comment costs nothing.
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import json
from pathlib import Path

from psrnn import studies
from psrnn.files import write_text

SRC = Path(__file__).resolve().parents[1]  # the folder holding the package
# modules that decide which jobs or which command run, not what a job computes: not followed
# (psrnn.cli is the command table and its error lines: adding a command re-trains nothing)
WORKFLOW = frozenset({"psrnn.workflow", "psrnn.apptainer", "psrnn.codehash", "psrnn.cli"})


def modules(src: Path = SRC) -> dict[str, Path]:
    """Every module of the package under `src`: dotted name -> file."""
    out = {}
    for path in sorted((src / "psrnn").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported(name: str, tree: ast.Module, is_package: bool, known: set[str] | dict[str, Path]) -> set[str]:
    """The modules of `known` that module `name` imports anywhere in it (inside functions
    too) but under `if TYPE_CHECKING:`, which never runs. `from psrnn.x import y` imports
    psrnn.x, and psrnn.x.y too when y is a submodule; relative imports count like absolute
    ones."""
    package = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:
                    visit_one(other)
            else:
                visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        else:
            visit(node)

    visit(tree)
    return {m for m in found if m in known and m != name}


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (`imported`), for every module under `src`."""
    known = modules(src)
    return {
        name: imported(name, parse(path), path.name == "__init__.py", known) for name, path in known.items()
    }


def without_docstrings(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]
    return tree


def digest(roots: list[str], src: Path = SRC) -> dict[str, object]:
    """{digest, modules}: the sha256 over the docstring-free syntax trees of `roots` and
    every package module they import, directly or not."""
    known = modules(src)
    trees: dict[str, ast.Module] = {}  # parsed as the closure reaches them
    todo = [r for r in roots if r in known]
    while todo:
        name = todo.pop()
        if name in trees or name in WORKFLOW:
            continue
        trees[name] = parse(known[name])
        direct = imported(name, trees[name], known[name].name == "__init__.py", known)
        # importing psrnn.a.b runs psrnn/__init__ and psrnn/a/__init__ too
        parents = {".".join(m.split(".")[:i]) for m in direct | {name} for i in range(1, m.count(".") + 1)}
        todo += sorted((direct | parents) & set(known))
    h = hashlib.sha256()
    for name in sorted(trees):
        h.update(name.encode() + b"\0" + ast.dump(without_docstrings(trees[name])).encode() + b"\0")
    return {"digest": h.hexdigest(), "modules": sorted(trees)}


def entry_points() -> dict[str, list[str]]:
    """Digest name -> the modules its jobs start in: the data jobs, and each study's
    training jobs (search, select, train, grouped runs) and compile jobs (compile, paper)."""
    out = {"data": ["psrnn.data.fixtures", "psrnn.data.download", "psrnn.data.prepare"]}
    for s in studies.STUDIES.values():
        train = ["psrnn.__main__", "psrnn.training", "psrnn.selection", "psrnn.fused", s.hooks]
        out[f"{s.name}-train"] = train
        out[f"{s.name}-compile"] = ["psrnn.results.compile", "psrnn.results.paper", s.results]
    return out


@functools.cache
def training_digest(study: str) -> str:
    """The digest of the code that trains `study`'s runs (a Snakemake param of its jobs)."""
    return str(digest(entry_points()[f"{study}-train"])["digest"])


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="folder for one <name>.json per digest")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    for name, roots in entry_points().items():
        write_text(out / f"{name}.json", json.dumps(digest(roots), indent=2) + "\n")
    print(f"code-digest: {len(entry_points())} digests in {out}")
    return 0
