import sys

from psrnn import jobenv
from psrnn.cli import main

jobenv.apply(sys.argv[1:])  # `train` under its suite's job_env, as Snakemake runs it
raise SystemExit(main())
