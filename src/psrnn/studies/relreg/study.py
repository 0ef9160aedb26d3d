"""The second study's facts, as the shared code asks them (psrnn.registry.Study): its
modules by name, so that reading them imports nothing of the study."""

from psrnn.registry import Study

STUDY = Study(
    name="relreg",
    package="psrnn.studies.relreg",
    title="Relation-level regularization: proto-LSTM cells with a relation loader (Binary Counter)",
    run_config="psrnn.studies.relreg.settings:RelRegConfig",
    check="psrnn.studies.relreg.settings:check_run",
    check_in_suite=None,
    schema="config/relreg.schema.yaml",
    hooks="psrnn.studies.relreg.hooks:RelRegHooks",
    results="psrnn.studies.relreg.results",
    reference="config/relreg-reference.yaml",
    reference_ids="psrnn.studies.relreg.collect:reference_ids",
    data_jobs=(),
    paper=None,
    resume_exempt=("progress", "device"),
    regression_keys={
        "test_acc": "acc",
        "test_bit_acc": "acc",
        "best_valid_acc": "acc",
        "best_epoch": "epoch",
        "epochs_run": "epoch",
        "valid_main_loss": "loss",
        "train_loss": "loss",
        "params": "count",
        "cell_params": "count",
    },
    contract="psrnn.studies.relreg.contract:case",
    ci_config="config/relreg-ci.yaml",
    group_key="psrnn.studies.relreg.settings:group_key",
    fused="psrnn.studies.relreg.fused",
    explain="psrnn.studies.relreg.explain:explain",
    captions="psrnn.studies.relreg.captions:report_captions",
    # its runs record one validation loss (no auxiliary loss)
    selection=("best_valid_acc", "max", ("valid_main_loss",)),
)
