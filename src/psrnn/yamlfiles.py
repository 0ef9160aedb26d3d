"""Reading config files: YAML as PyYAML reads it, except that 1e-3 is a number and only
true/false are booleans (as in YAML 1.2), a repeated key is an error, and a top-level
`extends: <file>` merges a file over another. Errors are one-line ConfigErrors naming
`file:line:column`; a file over MAX_BYTES, or nested deeper than PyYAML's recursion
reaches, is one too. psrnn.config re-exports these.

Why PyYAML with two resolvers and a duplicate check, not ruamel.yaml (installed with DVC,
which reads YAML 1.2 and refuses repeated keys itself): Snakemake reads the same config
files with PyYAML, so both front ends must agree on what a key means. This module is in no
code digest (psrnn.engine.codehash follows the engine and each study's own folder), so an
edit here re-trains nothing by itself; a reader that read one value otherwise would change
the resolved settings of every run that uses it, and Snakemake would re-train those.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from psrnn import files
from psrnn.errors import ConfigError

# YAML 1.1 (PyYAML) reads 1e-3 and 1e6 as strings: a float needs a dot and a signed
# exponent there. This is its float pattern with YAML 1.2's exponents added.
FLOAT_PATTERN = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
FLOAT_TAG = "tag:yaml.org,2002:float"
# YAML 1.1 also reads yes/no/on/off as booleans; YAML 1.2 (ruamel, which `dvc exp run -S`
# writes params.yaml with) reads them as strings and writes `latex: off` unquoted.
BOOL_PATTERN = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
BOOL_TAG = "tag:yaml.org,2002:bool"


class ConfigLoader(yaml.SafeLoader):
    """yaml.SafeLoader that reads 1e-3, 1e6 and 1E+3 as floats, only true/false as
    booleans (YAML 1.2 for both), and refuses a mapping
    that repeats a key (the later value would silently win). Config files and --set."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` keys are meant to be overridden
            key = self.construct_object(key_node, deep=True)
            try:
                mark = first.setdefault(key, key_node.start_mark)
            except TypeError:
                continue  # unhashable: construct_mapping below says so
            if mark is not key_node.start_mark:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {mark.line + 1})", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)

    def compose_document(self) -> yaml.Node | None:
        """The document's node graph, refused when its aliases expand it past MAX_VALUES
        (a few hundred bytes of `&a [*b, *b, ...]` levels stand for billions of values: the
        schema check and every later walk would take hours and gigabytes)."""
        node = super().compose_document()
        if node is not None and expanded_size(node, {}) > MAX_VALUES:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"more than {MAX_VALUES:,} values once its aliases (*name) are expanded: not a config "
                "someone wrote",
                node.start_mark,
            )
        return node


def expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many nodes `node` stands for with every alias expanded, counted once per node of the
    graph (`sizes` by id): linear in the document, however much its aliases multiply it."""
    if id(node) not in sizes:
        sizes[id(node)] = 0  # a recursive alias (&a [*a]) counts once; SafeLoader refuses it later
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        sizes[id(node)] = 1 + sum(expanded_size(child, sizes) for child in children)
    return sizes[id(node)]


ConfigLoader.yaml_implicit_resolvers = {
    first: [
        (tag, {FLOAT_TAG: FLOAT_PATTERN, BOOL_TAG: BOOL_PATTERN}.get(tag, regexp))
        for tag, regexp in resolvers
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's multi-line message as one line, without the position."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem is None:
        return " ".join(str(err).split())
    context = f" ({err.context})" if err.context else ""
    return f"{err.problem}{context}"


# The largest committed YAML file (config/paper.yaml) is 17 kB. PyYAML reads a long scalar
# in quadratic time (a 50 MB one took over 120 s) and a 1 MB list of numbers in 7 s, so a
# bigger file is refused before it is parsed: it is not a config someone wrote.
MAX_BYTES = 1_000_000
# PyYAML composes nested collections recursively: 20,000 `[` end in a RecursionError
# (about 490 levels load; config/schema.yaml, the deepest committed file, nests 11)
# Values once aliases are expanded: config/relreg-full.yaml, the largest committed config,
# holds a few hundred; 100,000 would take a person years to write by hand
MAX_VALUES = 100_000
TOO_DEEP = "nested too deeply (brackets or indentation hundreds of levels deep)"


def read_yaml(path: Path) -> Any:
    """One YAML file; a syntax error is a ConfigError `file:line:column: problem`, and so is
    a file over MAX_BYTES (before parsing) or one nested too deeply to parse."""
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise ConfigError(
            f"{path}: {size / 1e6:.1f} MB is too large for a config file (at most {MAX_BYTES / 1e6:g} MB): "
            "is this the file you meant?"
        )
    try:
        with path.open("rb") as fh:  # bytes: PyYAML decodes UTF-8/16 whatever the locale
            return yaml.load(fh, Loader=ConfigLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: {_yaml_problem(err)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: {TOO_DEEP}") from None


def load_yaml(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A YAML mapping. A top-level `extends: <file>` (relative to this file) loads that
    file first and merges this one over it, nested mappings key by key, so a config that
    only switches something on (config/paper-dbpedia.yaml) holds just that change. A key
    set to null there removes it (config/quick.yaml drops experiments and grids so)."""
    path = Path(path)
    if why := files.not_a_file(path):
        raise ConfigError(f"config file {why}: {path}")
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"{path}: extends: expected a file name, got {base!r}")
    parent = (path.parent / base).resolve()
    if parent in _seen:
        raise ConfigError(f"{path}: extends: {base}: circular")
    if why := files.not_a_file(parent):
        raise ConfigError(f"{path}: extends: {base}: file {why} ({parent})")
    return _merge(load_yaml(parent, (*_seen, path.resolve())), data)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
            continue
        both_maps = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merge(out[key], value) if both_maps else value
    return out


def parse_set(items: list[str] | None) -> dict[str, Any]:
    """`["lr=0.1", "tasks=[rec,pred]"]` -> `{"lr": 0.1, "tasks": ["rec", "pred"]}` (YAML values)."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        try:
            out[key.strip()] = yaml.load(value, Loader=ConfigLoader)
        except yaml.YAMLError as err:
            raise ConfigError(f"--set {item!r}: {_yaml_problem(err)}") from None
        except RecursionError:
            raise ConfigError(f"--set {key.strip()}=...: {TOO_DEEP}") from None
    return out
