"""What the first study reads of a gathered suite (psrnn.report.collect) beyond its runs: the
rows of config/reference.yaml a `ref:` may name, each run's model kind and realised shared
proportion, and Table 1's numbers from a dataset manifest.
"""

from __future__ import annotations

from typing import Any

from psrnn import config as C
from psrnn.report.collect import Suite

REFERENCE_PATH = C.ROOT / "config" / "reference.yaml"
KINDS = ("gru", "full", "ps")  # plain GRU, full share (Trinh et al. RNN-AE), private/shared
REFERABLE = ("table2", "table3", "table4", "figures")  # the reference's tables whose rows a `ref:` names


def reference_ids(reference: dict[str, Any]) -> set[str]:
    """The ids of config/reference.yaml's rows a suite config's `ref:` may name (its Study's
    reference_ids): Tables 2-4's and the figures'."""
    return {row["id"] for key in REFERABLE for row in reference.get(key, [])}


# --- runs ---------------------------------------------------------------------------------


def model_kind(settings: dict[str, Any]) -> str:
    """gru (no auxiliary task), full (every unit shared) or ps (private/shared)."""
    r = int(round(float(settings.get("shared", 0)) * int(settings.get("hidden", 1))))
    if r == 0 or not settings.get("tasks") or int(settings.get("anchors", 0)) == 0:
        return "gru"
    return "full" if r >= int(settings["hidden"]) else "ps"


def kind_of(s: Suite, experiment: str) -> str:
    """The model kind (KINDS) of an enabled experiment of the suite, from its run settings."""
    return model_kind(s.settings[experiment])


def shared_percent(settings: dict[str, Any]) -> float:
    """The shared proportion actually realised: round(shared * d) units of d, in %."""
    d = int(settings["hidden"])
    return 100.0 * int(round(float(settings["shared"]) * d)) / d


# --- manifests ----------------------------------------------------------------------------


def _dig(d: Any, *paths: str) -> Any:
    """The first of several dotted key paths present in a nested dict (None if none is).

    Manifests are written by the data preparation code; reading a few spellings keeps
    compile working while that format settles.
    """
    for path in paths:
        cur = d
        for key in path.split("."):
            if isinstance(cur, dict) and key in cur:
                cur = cur[key]
            else:
                cur = None
                break
        if cur is not None:
            return cur
    return None


def manifest_stats(m: dict[str, Any]) -> dict[str, float | None]:
    """Table 1's numbers from a manifest: mean length (train split), classes, split sizes."""
    out: dict[str, float | None] = {"classes": _num(_dig(m, "num_classes", "classes"))}
    for split in C_SPLITS:
        out[split] = _num(
            _dig(
                m,
                f"counts.{split}",
                f"splits.{split}.count",
                f"splits.{split}.n",
                f"splits.{split}.size",
                f"{split}.count",
                f"{split}.n",
                f"sizes.{split}",
            )
        )
    mean = _dig(
        m,
        "lengths.train.mean",
        "length.train.mean",
        "splits.train.length.mean",
        "splits.train.lengths.mean",
        "splits.train.mean_length",
        "train.length.mean",
        "mean_length.train",
        "length_stats.train.mean",
    )
    out["mean_length"] = _num(mean)
    return out


C_SPLITS = ("train", "valid", "test")


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (list, tuple)):  # e.g. classes given as a list of names
        return float(len(v))
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
