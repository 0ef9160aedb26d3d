"""The engine every study trains with: one run (fit), a batched group of runs (group, which
groups form: groups), checkpoints and resume (checkpoint), the run's records (runlog), the
`train` command (train), the grid search's choice (selection), the digests of the code that
trains (codehash), the regression check (regression) and stale runs (stale). It imports no
study: psrnn.registry names each study's hooks, which the engine loads by name.
"""
