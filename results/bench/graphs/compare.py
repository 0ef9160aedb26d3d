"""Compare each experiment's graphed and eager runs (gpu-check.sh): metrics.json (timing
aside) and history.csv (epoch times aside).

    python results/bench/graphs/compare.py RUNS_FOLDER
"""

import csv
import json
import sys
from pathlib import Path
root = Path(sys.argv[1])
TIMING = ("wall_time_s", "samples_per_s", "peak_memory_mb")
names = sorted({p.name.rsplit("-graphs-", 1)[0] for p in root.iterdir() if p.is_dir()})
for n in names:
    runs = {g: root / f"{n}-graphs-{g}" for g in ("true", "false")}
    if not all((r / "metrics.json").is_file() for r in runs.values()):
        print(f"{n}: unfinished"); continue
    m = {g: json.loads((r / "metrics.json").read_text()) for g, r in runs.items()}
    keys = sorted(k for k in m["true"] if k not in TIMING and k != "config")
    diff = [k for k in keys if m["true"][k] != m["false"].get(k)]
    h = {g: list(csv.DictReader(open(r / "history.csv"))) for g, r in runs.items()}
    strip = lambda rows: [{k: v for k, v in row.items() if not k.endswith("_s")} for row in rows]
    same_hist = strip(h["true"]) == strip(h["false"])
    ep = {g: [float(row.get("epoch_time_s", "nan")) for row in h[g]] for g in h}
    print(f"{n}: metrics {'identical' if not diff else 'DIFFER in ' + ','.join(diff)}; history {'identical' if same_hist else 'DIFFERS'}; "
          f"test_acc {m['true'].get('test_acc')}; epoch s graphed {ep['true']} eager {ep['false']}; "
          f"wall graphed {m['true'].get('wall_time_s'):.1f} eager {m['false'].get('wall_time_s'):.1f}")
