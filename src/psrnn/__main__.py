import sys

from psrnn.cli import command_first, main
from psrnn.engine import jobenv

argv = command_first(sys.argv[1:])
jobenv.apply(argv)  # `train` under its suite's job_env, as Snakemake runs it
raise SystemExit(main(argv))
