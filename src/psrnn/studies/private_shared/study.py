"""The first study's facts, as the shared code asks them (psrnn.registry.Study): its
modules by name, so that reading them imports nothing of the study."""

from psrnn.registry import Study

STUDY = Study(
    name="private_shared",
    package="psrnn.studies.private_shared",
    title="Private and shared representations in RNNs (semi-supervised sequence classification)",
    run_config="psrnn.studies.private_shared.settings:RunConfig",
    check="psrnn.studies.private_shared.settings:check_run",
    check_in_suite="psrnn.studies.private_shared.settings:check_window",
    schema=None,
    hooks="psrnn.studies.private_shared.hooks:PrivateSharedHooks",
    results="psrnn.studies.private_shared.results.compile",
    reference="config/reference.yaml",
    reference_ids="psrnn.studies.private_shared.results.reading:reference_ids",
    data_jobs=(
        "psrnn.studies.private_shared.data.fixtures",
        "psrnn.studies.private_shared.data.download",
        "psrnn.studies.private_shared.data.prepare",
    ),
    paper="psrnn.studies.private_shared.results.paper",
    params="psrnn.studies.private_shared.params:print_params",
    # the main GRU's initialisation decides whether a recipe learns at all, and differently
    # per dataset (digits: chrono under SGDR; reviews: PyTorch's under Adam): config/paper.yaml
    per_dataset=("init",),
    # max_tokens: the same batches' gradients in more or fewer pieces (lower it and
    # resume after running out of GPU memory)
    resume_exempt=("progress", "device", "max_tokens", "cuda_graphs"),
    regression_keys={
        "test_acc": "acc",
        "best_valid_acc": "acc",
        "best_epoch": "epoch",
        "epochs_run": "epoch",
        "test_main_loss": "loss",
        "test_aux_loss": "loss",
        "valid_main_loss": "loss",
        "valid_aux_loss": "loss",
        "train_main_loss": "loss",
        "train_aux_loss": "loss",
        "params": "count",
        "params_main": "count",
        "params_head": "count",
        "params_aux": "count",
    },
    contract="psrnn.studies.private_shared.contract:case",
    ci_config="config/small.yaml",
    explain="psrnn.studies.private_shared.results.explain:explain",
    commands={
        "fixtures": (
            "psrnn.studies.private_shared.data.fixtures",
            "write small synthetic archives in the upstream formats",
        ),
        "digits": (
            "psrnn.studies.private_shared.data.digits",
            "cut one real-digit IDX pair into the four files prepare reads",
        ),
        "download": (
            "psrnn.studies.private_shared.data.download",
            "download and verify a dataset's archives",
        ),
        "prepare": (
            "psrnn.studies.private_shared.data.prepare",
            "turn downloaded archives into prepared sequence tensors",
        ),
        "paper": (
            "psrnn.studies.private_shared.results.paper",
            "build the paper PDF from the compiled tables and figures",
        ),
        "recipe": (
            "psrnn.studies.private_shared.recipe",
            "train the recipe study on real digits (config/recipe.yaml)",
        ),
    },
    job_commands={"fixtures": "fixtures", "download": "download", "prepare": "prepare", "paper": "paper"},
    captions="psrnn.studies.private_shared.results.captions:report_captions",
)
