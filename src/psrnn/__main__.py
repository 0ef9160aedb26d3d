from psrnn.cli import entry

raise SystemExit(entry())
