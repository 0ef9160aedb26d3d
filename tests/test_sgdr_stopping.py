"""Early stopping coherent with SGDR's warm restarts (psrnn.studies.private_shared.hooks.may_stop): a run
is only
stopped at the end of a cycle, never in the trough after a restart."""

import dataclasses

from test_training import quiet, read_history, small_cfg, write_images

from psrnn.engine.books import note_epoch
from psrnn.engine.checkpoint import RunState
from psrnn.engine.fit import fit
from psrnn.studies.private_shared import hooks as study
from psrnn.studies.private_shared.settings import RunConfig


def test_cycle_ends_follow_the_schedule():
    run = RunConfig(optimizer="sgdr", restart_epochs=10, restart_mult=2)
    assert [e for e in range(1, 160) if study.may_stop(run, e)] == [10, 30, 70, 150]
    flat = dataclasses.replace(run, restart_epochs=4, restart_mult=1)
    assert [e for e in range(1, 17) if study.may_stop(flat, e)] == [4, 8, 12, 16]
    adam = dataclasses.replace(run, optimizer="adam")  # no restarts: any epoch may stop
    assert all(study.may_stop(adam, e) for e in range(1, 20))


def scripted(run: RunConfig, scores: list[float], patience: int, rule) -> RunState:
    """Feed a run's validation scores to the engine's bookkeeping; the stop rule as given."""
    st = RunState()
    for epoch, acc in enumerate(scores, 1):
        note_epoch(st, {"epoch": epoch}, (acc,), _Model(), patience, len(scores), rule(run, epoch))
        if st.stopped:
            break
    return st


class _Model:
    def state_dict(self):
        return {}


def test_a_run_is_not_stopped_in_the_trough_after_a_warm_restart():
    # cycles of 4 epochs; validation peaks at the end of cycle 1 (epoch 4), falls after the
    # restart (epochs 5-6) and recovers above it by the end of cycle 2 (epoch 8)
    run = RunConfig(optimizer="sgdr", restart_epochs=4, restart_mult=1, patience=2)
    scores = [0.5, 0.6, 0.7, 0.8, 0.4, 0.5, 0.75, 0.85, 0.6, 0.6, 0.6, 0.6, 0.6]
    old = scripted(run, scores, 2, lambda r, e: True)  # stop wherever patience runs out
    assert (old.stopped, old.epoch, old.best_epoch) == ("early_stopping", 6, 4)
    new = scripted(run, scores, 2, study.may_stop)
    assert (new.best_epoch, new.best_valid_acc) == (8, 0.85)
    # no improvement through cycle 3: stopped at its end (epoch 12), not at epoch 10
    assert (new.stopped, new.epoch) == ("early_stopping", 12)


def test_a_real_run_stops_only_at_a_cycle_end(tmp_path):
    data = write_images(tmp_path / "d")
    cfg = small_cfg(data, max_epochs=9, patience=1, restart_epochs=3, restart_mult=1, lr=1e-6)
    m = fit(cfg, tmp_path / "run", log=quiet)
    # a rate too small to improve anything: patience 1 would stop at epoch 2, SGDR's
    # first cycle ends at 3
    assert m["stopped"] == "early_stopping"
    assert m["epochs_run"] == 3 and len(read_history(tmp_path / "run")) == 3


def test_the_reports_cycle_ends_are_the_trainings():
    """REPORT's disclosure (psrnn.studies.private_shared.results.deviations, which must not import the
    training
    code) names the same cycle ends the training stops at."""
    from psrnn.studies.private_shared.results.deviations import cycle_ends

    for t0, mult in ((10, 2), (4, 1), (2, 2), (3, 3)):
        run = RunConfig(optimizer="sgdr", restart_epochs=t0, restart_mult=mult)
        assert cycle_ends(run, 400) == study.cycle_ends(run, 400)
