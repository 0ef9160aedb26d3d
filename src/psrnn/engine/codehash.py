"""Digests of the code a job runs, blind to comments, docstrings and layout:
`python -m psrnn code-digest`.

    python -m psrnn code-digest --out results/code   # <study>-data.json, -train.json, -compile.json

A digest covers the modules a job's entry points import, followed through the package's
static imports (inside functions too), each read as its syntax tree without docstrings
(comments and formatting are not in the tree). So a comment or a reworded docstring
changes no digest, and a changed constant, expression or import does. DVC's stages
depend on these files instead of the whole package (dvc.yaml's `code` stage writes them),
and Snakemake's training jobs carry their study's training digest among their settings
(psrnn.jobspec.experiment_spec): a real change to the code that trains re-runs the runs,
a comment costs nothing.
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import json
from pathlib import Path

from psrnn import registry
from psrnn.errors import UserError
from psrnn.files import write_text

SRC = Path(__file__).resolve().parents[2]  # the folder holding the package
# modules inside a digest's scope that decide which jobs run, not what a job computes: not
# followed, and a module importing one names it rather than hashing its code
WORKFLOW = frozenset({"psrnn.engine.codehash"})
ENGINE = ("psrnn.engine",)  # followed from every study's training jobs


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
            target = import_target(node, package)
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        else:
            visit(node)

    visit(tree)
    return {m for m in found if m in known and m != name}


def import_target(node: ast.ImportFrom, package: list[str]) -> str:
    """The absolute module a `from ... import` names, from inside `package` (relative
    imports resolved)."""
    base = package[: len(package) - node.level + 1] if node.level else []
    return ".".join(base + ([node.module] if node.module else []))


def parse(path: Path) -> ast.Module:
    """The module's syntax tree from its bytes, as Python reads a source file: a UTF-8 byte
    order mark or a coding cookie (`# -*- coding: latin-1 -*-`) is honoured, where reading
    it as text broke the digest, Snakemake's planning and `psrnn train` on a module that
    imports fine. Code that does not parse is one line naming the file and line (a
    developer's typo gave a stack from code-digest and 8 frames from Snakemake's planning)."""
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError) as err:  # ValueError: a NUL byte, before Python 3.12
        where = f"{path}:{err.lineno}" if isinstance(err, SyntaxError) and err.lineno else str(path)
        why = err.msg if isinstance(err, SyntaxError) else str(err)
        raise UserError(
            f"{where}: {why}: the code does not parse (every module a job imports is read for its "
            "code digest): fix it and run again"
        ) from None


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


def canonical(node: object) -> str:
    """A syntax tree as text that every supported Python version writes alike: each node's
    class and its non-empty fields by name, recursively. `ast.dump` is not that: Python 3.12
    added fields (`type_params`, empty in code without type parameters) and 3.13 leaves empty
    ones out, so the same file dumped to other text under 3.11, 3.12 and 3.13 (the GPU hosts
    run 3.12: their runs looked stale next to records made here). Empty lists and None say
    nothing a missing field does not, so both are left out; locations are never written."""
    if isinstance(node, ast.AST):
        fields = []
        for field in node._fields:
            value = getattr(node, field, None)
            if value is None or (isinstance(value, list) and not value):
                continue
            fields.append(f"{field}={canonical(value)}")
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return f"[{', '.join(canonical(v) for v in node)}]"
    return repr(node)


def in_scope(known: dict[str, Path], scope: tuple[str, ...]) -> set[str]:
    """The modules under `scope` (dotted package prefixes) but WORKFLOW's."""
    return {m for m in known if any(m == s or m.startswith(s + ".") for s in scope)} - WORKFLOW


def module_hashes(names: set[str], scope: tuple[str, ...], src: Path = SRC) -> dict[str, str]:
    """Module -> the sha256 of its content, for `names` and the modules under `scope` they
    import: its docstring-free syntax tree in which every import of a module in scope
    names that module's own hash instead of its path (a Merkle hash: the package's imports
    form no circle, tests/test_style.py). So a module's hash is its code and the code of
    what it imports, wherever the files lie: a pure move or rename (the same local names)
    changes no hash, and importing a name from another module does. A module outside the
    scope (the core, WORKFLOW's) is named, not hashed."""
    known = modules(src)
    inside = in_scope(known, scope)
    hashes: dict[str, str] = {}
    busy: set[str] = set()

    def of(name: str) -> str:
        if name in hashes:
            return hashes[name]
        if name in busy:
            raise ValueError(f"import circle through {name}")
        busy.add(name)
        tree = without_docstrings(parse(known[name]))
        package = name.split(".") if known[name].name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = import_target(node, package)
                if target in inside and target != name:
                    node.module, node.level = "#" + of(target), 0
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in inside and sub != name:
                        alias.asname, alias.name = alias.asname or alias.name, "#" + of(sub)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in inside:
                        alias.name = "#" + of(alias.name)
        busy.discard(name)
        hashes[name] = hashlib.sha256(canonical(tree).encode()).hexdigest()
        return hashes[name]

    for name in sorted(names):
        of(name)
    return hashes


def digest(roots: list[str], scope: tuple[str, ...], src: Path = SRC) -> dict[str, object]:
    """{digest, modules}: the sha256 over the content hashes (module_hashes) of `roots` and
    every module under `scope` they import, directly or not (importing psrnn.a.b runs
    psrnn/a/__init__ too). Modules outside `scope` (the core: how settings are read, where
    files go, which device a job gets) are not followed: what they decide reaches a run as
    its resolved settings, which the jobs carry beside the digest."""
    known = modules(src)
    inside = in_scope(known, scope)
    seen: set[str] = set()
    todo = [r for r in roots if r in inside]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        direct = imported(name, parse(known[name]), known[name].name == "__init__.py", known)
        parents = {".".join(m.split(".")[:i]) for m in direct | {name} for i in range(1, m.count(".") + 1)}
        todo += sorted((direct | parents) & inside)
    hashes = module_hashes(seen, scope, src)
    h = hashlib.sha256()
    for value in sorted(hashes[m] for m in seen):
        h.update(value.encode() + b"\0")
    return {"digest": h.hexdigest(), "modules": sorted(seen)}


def jobs() -> dict[str, tuple[list[str], tuple[str, ...]]]:
    """Digest name -> (the modules its jobs start in, the packages followed from them): per
    study, its data jobs (download, prepare) where it has them, its training jobs (search,
    select, train, grouped runs: the engine and the study's own folder) and its compile
    jobs (compile, paper: the report toolkit and the study's folder). So an edit to one
    study's folder moves none of another study's digests. A study's training jobs start in
    its Study's own module too (its folder's study.py, psrnn.registry.PLUGINS): what it
    declares (how select ranks, which runs train as one group, the settings a run may change
    and resume) decides what trains, so an edit to it re-runs that study's runs."""
    out: dict[str, tuple[list[str], tuple[str, ...]]] = {}
    for s in registry.STUDIES.values():
        if s.data_jobs:
            out[f"{s.name}-data"] = (list(s.data_jobs), (s.package,))
        settings = [
            ref.partition(":")[0] for ref in (s.run_config, s.check, s.check_in_suite, s.group_key) if ref
        ]
        engine = ["psrnn.engine.train", "psrnn.engine.selection", "psrnn.engine.group"]
        study = registry.PLUGINS[s.name].partition(":")[0]
        out[f"{s.name}-train"] = (
            engine + [study, s.hooks.partition(":")[0], *settings, *([s.fused] if s.fused else [])],
            ENGINE + (s.package,),
        )
        out[f"{s.name}-compile"] = ([s.results, *([s.paper] if s.paper else [])], ("psrnn.report", s.package))
    return out


def entry_points() -> dict[str, list[str]]:
    """Digest name -> the modules its jobs start in (jobs)."""
    return {name: roots for name, (roots, _) in jobs().items()}


@functools.cache
def training_digest(study: str) -> str:
    """The digest of the code that trains `study`'s runs (a Snakemake param of its jobs)."""
    roots, scope = jobs()[f"{study}-train"]
    return str(digest(roots, scope)["digest"])


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="folder for one <name>.json per digest")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    for name, (roots, scope) in jobs().items():
        write_text(out / f"{name}.json", json.dumps(digest(roots, scope), indent=2) + "\n")
    print(f"code-digest: {len(jobs())} digests in {out}")
    return 0
