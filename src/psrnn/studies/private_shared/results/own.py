"""REPORT.md's section for the experiments with no paper number (no `ref:`): a user's own
rows and the figure-only runs, each with its settings and numbers, and no verdict (there is
nothing of the paper's to hold them against).

    python -m psrnn compile --config config/mine.yaml

Settings: the model (kind, tasks, shared proportion, anchors, window, hidden size) and every
other run setting the experiment itself sets in the config (an ablation's `aux_anchors:
mean`, say), so a row says what makes it what it is.
"""

from __future__ import annotations

from psrnn.report import fmt
from psrnn.report.collect import Suite
from psrnn.studies.private_shared.results.reading import model_kind, shared_percent
from psrnn.studies.private_shared.results.tables import MODEL_LABEL, accuracy, metric, own_settings


def own_experiments(s: Suite) -> list[str]:
    """Enabled experiments without a `ref:` (config order)."""
    return [e for e in s.experiments if not s.ref_of(e)]


def settings_text(s: Suite, exp: str) -> str:
    """'private/shared, pred+rec, shared 50%, 3 anchors, window 10, d=12; aux_anchors mean'."""
    st = s.settings[exp]
    kind = model_kind(st)
    model = [MODEL_LABEL[kind]]
    if kind != "gru":
        model += [fmt.tasks(st.get("tasks")), f"shared {shared_percent(st):.4g}%"]
        model += [f"{st['anchors']} anchors", f"window {st['window']}"]
    model.append(f"d={st['hidden']}")
    extra = own_settings(s, exp)
    return ", ".join(model) + (f"; {extra}" if extra else "")


def own_lines(s: Suite) -> list[str]:
    """The section's lines ([] when every experiment has a paper number)."""
    exps = own_experiments(s)
    if not exps:
        return []
    lines = [
        "",
        "## Experiments without a paper number",
        "",
        "Experiments with no `ref:` in the config: no paper value, so no verdict. Test accuracy (%): mean "
        "± sample std over the finished seeds, 95% t-interval cut to [0, 100]; best validation accuracy "
        "(%): the mean of each run's best epoch.",
        "",
        "| Experiment | Dataset | Settings | n | Test accuracy % | 95% CI | Best valid % |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for e in exps:
        acc, valid = accuracy(s, e), metric(s, e, "best_valid_acc", 100.0)
        mean = f"{acc.mean:.2f}" + (f" ± {acc.std:.2f}" if acc.n > 1 else "") if acc.n else fmt.DASH
        cells = [
            e,
            s.cfg["experiments"][e]["dataset"],
            settings_text(s, e),
            str(acc.n),
            mean,
            fmt.ci(acc),
            fmt.num(valid.mean, 2) if valid.n else fmt.DASH,
        ]
        lines.append("| " + " | ".join(fmt.md(c) for c in cells) + " |")
    return lines
