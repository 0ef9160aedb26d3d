"""The errors a user causes, kept apart from the command line so that library modules
(config, data, training, results) raise them without importing the CLI.

`python -m psrnn` prints a UserError as one line, `psrnn <command>: error: <message>`,
and exits with status 2 (psrnn.cli.main); anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """An error caused by input (config, archive, path): printed as one line, exit 2."""


class ConfigError(UserError, ValueError):
    """A config value is missing or wrong; the message names the key (or file:line:column).
    (psrnn.config re-exports it.)"""


class TrainingDiverged(UserError):
    """The training loss became NaN/inf in a run's first epoch: the run stops, nothing of the
    epoch is kept and no metrics are written. (Later, engine.fit ends the run with its best
    epoch so far as its result, `stopped: non_finite`. A finite loss that explodes does not
    raise: it is recorded as metrics.json's `diverged`, psrnn.engine.runlog.divergence.)"""
