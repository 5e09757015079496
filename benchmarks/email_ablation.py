"""Does the recursion matter for e-mail? The e-mail preset against the same preset with recursion off
(T=1, n=1, N_sup=1), at equal wall-clock, side by side, beside the TF-IDF + logistic-regression baseline on
the same split.

The two runs of a pair run at the same time, one thread each, so they see the same machine (a shared
machine's load hits both alike); each gets --minutes of training. Prints a Markdown table; the runs stay
in --out for `trmkit report`.

    python benchmarks/email_ablation.py --data data/email-sa3 --data data/email-tr --minutes 8

Build the stores first (docs/email.md):
    trmkit data email --source ../shared/data/email/spamassassin --label-map configs/email-sa3.yaml --out data/email-sa3
    trmkit data email --source ../shared/data/email/turkish/trspam_v01.csv --out data/email-tr
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

VARIANTS = {
    "preset (recursion on)": [],
    "recursion off (T=1, n=1, N_sup=1)": ["model.H_cycles=1", "model.L_cycles=1", "model.halt_max_steps=1"],
}


def trmkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "trmkit.cli", *args]


def run_pair(config: str, data: Path, minutes: float, out: Path) -> dict[str, dict]:
    procs = {}
    for i, (name, overrides) in enumerate(VARIANTS.items()):
        run_dir = out / f"{data.name}-{i}"
        # dtype and compile pinned: measured beside each other, the planner's choices would differ by noise
        cmd = trmkit("train", config, "--force", f"run.dir={run_dir}", f"data.path={data}", "run.threads=1",
                     "run.dtype=float32", "run.compile=on",
                     f"train.max_minutes={minutes}", "train.early_stop_evals=0", *overrides)
        log = open(out / f"{data.name}-{i}.log", "w")
        procs[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), run_dir)
    results = {}
    for name, (proc, run_dir) in procs.items():
        if proc.wait() != 0:
            raise SystemExit(f"{name} on {data} failed: see {run_dir}.log")
        results[name] = json.loads((run_dir / "summary.json").read_text()) | {"run_dir": str(run_dir)}
    return results


def baseline(data: Path) -> dict:
    text = subprocess.run(trmkit("email", "baseline", str(data)), capture_output=True, text=True, check=True).stdout
    return json.loads(text)["baseline"]


def table(data: Path, results: dict[str, dict], base: dict) -> list[str]:
    classes = json.loads((data / "train" / "meta.json").read_text())["classes"]
    head = "| " + " | ".join(["model", "accuracy", "macro-F1", *[f"F1 {c}" for c in classes],
                               "ECE", "steps", "samples/s"]) + " |"
    lines = [f"### {data.name}", "", head, "|" + " --- |" * (head.count("|") - 1)]
    row = [base["accuracy"], base["macro_f1"], *[base["per_class"][c]["f1"] for c in classes]]
    lines.append("| TF-IDF + logistic regression | " + " | ".join(f"{v:.4f}" for v in row) + " | | | |")
    for name, s in results.items():
        row = [s["accuracy"], s["macro_f1"], *[s[f"f1/{c}"] for c in classes], s["ece"]]
        lines.append(f"| {name} | " + " | ".join(f"{v:.4f}" for v in row)
                     + f" | {s['steps']} | {s['samples_per_second']:.0f} |")
    return lines + [""]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", action="append", required=True, help="an e-mail store (repeat for several)")
    p.add_argument("--config", default="configs/email-laptop.yaml")
    p.add_argument("--minutes", type=float, default=8.0, help="training wall-clock per run")
    p.add_argument("--out", default="runs/email-ablation")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for data in map(Path, args.data):
        lines += table(data, run_pair(args.config, data, args.minutes, out), baseline(data))
        print("\n".join(lines), flush=True)
    (out / "table.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
