"""The second study's tiny runs, for the contract tests that check every study against the
engine (tests/test_study_contract.py, through Study.contract). Its runs make their own data
(the Binary Counter), so nothing is written to the folder."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from psrnn.registry import Case
from psrnn.studies.relreg.settings import RelRegConfig


def case(folder: Path) -> Case:
    """3 epochs of a 2-cell prototype model on 48 sequences; an LSTM under SGD at lr 1e30
    explodes the loss without reaching inf."""
    run = RelRegConfig(
        model="proto",
        hidden=8,
        cells=2,
        epochs=3,
        train_size=48,
        batch_size=16,
        valid_bits=(4,),
        test_bits=(6,),
        test_count=16,
        l2_cell=0.001,
        noise=0.1,
    )
    exploding = dataclasses.replace(run, model="lstm", l2_cell=0.0, noise=0.0, optimizer="sgd", lr=1e30)
    return Case(run, dataclasses.replace(run, noise=0.2), "noise", exploding, "epochs")
