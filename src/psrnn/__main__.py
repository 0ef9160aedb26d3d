import sys

from psrnn.cli import main
from psrnn.engine import jobenv

jobenv.apply(sys.argv[1:])  # `train` under its suite's job_env, as Snakemake runs it
raise SystemExit(main())
