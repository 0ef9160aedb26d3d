"""The 'auxiliary task inert' flag (psrnn.studies.private_shared.results.inert): each run's auxiliary
loss against the
floor of the best constant prediction, from the prepared training split. Constructed cases
with hand-computed floors; the real-review A/B (results/recipe/imdb-decoder/) where
../shared holds the reviews."""

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from test_training import write_images, write_manifest

from psrnn import config as C
from psrnn.report.collect import Run, Suite
from psrnn.studies.private_shared.results import inert

ARCHIVE = C.ROOT.parent / "shared" / "data" / "imdb" / "aclImdb_v1.tar.gz"


def write_symbols(d: Path, seqs: list[list[int]], features: int) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    lengths = torch.tensor([len(s) for s in seqs])
    offsets = torch.zeros(len(seqs) + 1, dtype=torch.int64)
    offsets[1:] = lengths.cumsum(0)
    x = torch.tensor([c for s in seqs for c in s], dtype=torch.uint8)
    torch.save({"x": x, "offsets": offsets, "y": torch.zeros(len(seqs), dtype=torch.int64)}, d / "train.pt")
    write_manifest(d, input="categorical", features=features, num_classes=2)
    return d


def test_the_text_floor_is_one_minus_the_sum_of_squared_frequencies(tmp_path):
    # p = (1/2, 1/4, 1/4) over symbols 1, 2, 3 (0 and 4 never occur): 1 - (1/4 + 1/16 + 1/16)
    d = write_symbols(tmp_path / "t", [[1, 1, 2], [1, 3, 1, 2, 3]], features=5)
    assert inert.step_floor(d) == pytest.approx(0.625)
    # anchors x tasks windows; none for the GRU, for learned embeddings or without data
    assert inert.run_floor({"anchors": 5, "tasks": ["pred", "rec"], "shared": 0.6}, 0.625) == 6.25
    assert inert.run_floor({"anchors": 5, "tasks": ["rec"], "shared": 0.0}, 0.625) is None
    assert inert.run_floor({"anchors": 5, "tasks": ["rec"], "shared": 0.5, "embedding": 16}, 0.625) is None
    assert inert.run_floor({"anchors": 5, "tasks": ["rec"], "shared": 0.5}, None) is None
    assert inert.step_floor(tmp_path / "nothing") is None


def test_the_image_floor_is_the_inputs_total_variance(tmp_path):
    d = write_images(tmp_path / "i", sizes=(40, 8, 8), T=6, F=2)
    x = torch.load(d / "train.pt")["x"].double() / 255  # as the model reads it
    want = sum(float(x[..., f].reshape(-1).var(unbiased=False)) for f in range(2))
    assert inert.step_floor(d) == pytest.approx(want)


def test_a_run_at_its_floor_is_flagged_inert_and_one_below_it_is_not():
    assert inert.is_inert(1.864, 1.8632) is True  # 1.0004 of the floor
    assert inert.is_inert(0.99 * 1.8632, 1.8632) is True  # within 2 %
    assert inert.is_inert(0.97 * 1.8632, 1.8632) is False
    assert inert.is_inert(1.7, None) is None and inert.is_inert(math.nan, 1.0) is None


def suite_with(tmp_path: Path, prepared: Path, histories: dict[str, list[float]]) -> Suite:
    """A compile Suite of one auxiliary experiment whose runs (one per seed) have these
    validation auxiliary losses by epoch."""
    settings = {"dataset": "imdb", "data_dir": str(prepared), "hidden": 10, "shared": 0.5,
                "tasks": ["pred", "rec"], "anchors": 1, "embedding": 0}  # fmt: skip
    runs = []
    for seed, (_, losses) in enumerate(histories.items()):
        d = tmp_path / f"run{seed}"
        d.mkdir(parents=True)
        with open(d / "history.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["epoch", "valid_aux_loss"])
            w.writerows([i + 1, v] for i, v in enumerate(losses))
        runs.append(Run("imdb_ps", seed, d, {"epochs_run": len(losses)}))
    cfg = {"name": "t", "seeds": list(range(len(runs))), "experiments": {"imdb_ps": settings}}
    return Suite(cfg, {"table2": []}, {"imdb_ps": runs}, {"imdb_ps": settings}, {})


def test_report_flags_the_inert_runs_of_an_experiment(tmp_path):
    d = write_symbols(tmp_path / "t", [[1, 1, 2], [1, 3, 1, 2, 3]], features=5)  # floor 2 x 0.625
    s = suite_with(tmp_path, d, {"stuck": [1.30, 1.27, 1.26], "learns": [1.30, 1.10, 0.90]})
    lines = inert.inert_lines(s)
    row = next(x for x in lines if x.startswith("| imdb_ps |"))
    # 1.26 / 1.25 = 1.008 (inert), 0.90 / 1.25 = 0.720 (learned)
    assert row == "| imdb_ps | 1.25 | 1.008, 0.720 | **inert in 1 of 2 runs** |"
    quiet = suite_with(tmp_path / "q", d, {"learns": [1.30, 1.10, 0.90]})
    assert next(x for x in inert.inert_lines(quiet) if x.startswith("| imdb_ps |")).endswith(
        "| learned (none of 1) |"
    )


@pytest.mark.skipif(not ARCHIVE.is_file(), reason=f"real IMDB archive not found at {ARCHIVE}")
def test_on_real_reviews_estimate_fed_decoders_are_inert_and_teacher_forced_ones_are_not(tmp_path):
    """The committed A/B (results/recipe/imdb-decoder/, 3,000 reviews cut to 300 characters):
    the floor from the same cut of the real reviews; the flag is quiet on the
    teacher-forced run and raised on the estimate-fed one."""
    from psrnn.studies.private_shared.data.prepare import prepare

    out = tmp_path / "prepared"
    opts = {"max_length": 300, "train": 3000, "valid": 1000, "test": 1000}
    prepare("imdb", ARCHIVE.parent, out, opts)
    per_step = inert.step_floor(out)
    assert per_step == pytest.approx(0.9316, abs=1e-4)
    ab = C.ROOT / "results" / "recipe" / "imdb-decoder"
    for decoder, inert_now in (("teacher", False), ("estimate", True)):
        m = json.loads((ab / decoder / "metrics.json").read_text())
        floor = inert.run_floor(m["config"], per_step)
        rows = list(csv.DictReader(open(ab / decoder / "history.csv")))
        assert inert.is_inert(min(float(r["valid_aux_loss"]) for r in rows), floor) is inert_now
