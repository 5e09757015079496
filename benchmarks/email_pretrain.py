"""Few labels with and without pretraining on the whole mailbox: test macro-F1 of each arm, paired with the rival.

For each corpus and draw: the `--keep-labels K` stores of benchmarks/email_few_labels.py (for one draw
every K shares the tokenizer, the bag and the unlabelled text, so one pretraining serves them all),
`trmkit email pretrain` on the first K's store for --pretrain-minutes (masked tokens of every message
but the test split's, no label read), then for each K every arm is trained with configs/email-fast.yaml
for --minutes on one thread (no validation split: no early stop, no best checkpoint) and scored by
`trmkit email baseline --run` beside TF-IDF + LR fitted on the same K labels (paired bootstrap interval).

Arms (each a set of overrides of configs/email-fast.yaml):
    base        today's preset: the bag's model fitted by naive Bayes with EM, the recursion beside it
    init        the same, starting from the pretraining run (train.init_from)
    init-off    init with the recursion off (n=1, N_sup=1): what the recursion adds after pretraining
    alone       the TRM without the fitted bag model (email.input_linear=false)
    alone-init  alone, starting from the pretraining run

    python benchmarks/email_pretrain.py --corpus sa3 --corpus tr --corpus lists --k 10 --k 20 --draws 1 \\
        --pretrain-minutes 12 --out pretrain.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from email_few_labels import CORPORA, build, trmkit  # noqa: E402

ARMS = {"base": [], "init": ["train.init_from={pre}"],
        "init-off": ["train.init_from={pre}", "model.L_cycles=1", "model.halt_max_steps=1"],
        "alone": ["email.input_linear=false"], "alone-init": ["email.input_linear=false", "train.init_from={pre}"]}
COMMON = ["train.early_stop_evals=0", "train.restore_best=false", "run.threads=1"]


def pretrain(store: Path, out: Path, minutes: float) -> Path:
    run = out / f"{store.name}-pretrain"
    if not (run / "weights.safetensors").is_file():
        subprocess.run(trmkit("email", "pretrain", str(store), "--store-out", str(out / f"{store.name}-mlm"),
                              "--run-dir", str(run), "--minutes", str(minutes), "run.threads=1"),
                       check=True, capture_output=True)
    return run


def masked_accuracy(run: Path) -> float:
    return json.loads((run / "summary.json").read_text())["cell_accuracy"]


def arm(store: Path, pre: Path, name: str, out: Path, minutes: float) -> dict:
    run = out / f"{store.name}-{name}"
    if not (run / "classification.json").is_file():
        extra = [x.format(pre=pre) for x in ARMS[name]]
        subprocess.run(trmkit("train", "configs/email-fast.yaml", "--force", f"data.path={store}", f"run.dir={run}",
                              f"train.max_minutes={minutes}", *COMMON, *extra), check=True, capture_output=True)
    result_file = out / f"{run.name}.json"
    subprocess.run(trmkit("email", "baseline", str(store), "--run", str(run), "--out", str(result_file)),
                   check=True, capture_output=True)
    r = json.loads(result_file.read_text())
    diff = r["trm_minus_baseline_balanced"]
    return {"trm": r["trm"]["macro_f1"], "rival": max(r["baseline"]["macro_f1"], r["baseline_balanced"]["macro_f1"]),
            "diff": [diff["macro_f1"], *diff["ci95"]]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", action="append", choices=sorted(CORPORA), default=None)
    p.add_argument("--k", action="append", default=None, help="labels per class (default 10 and 20)")
    p.add_argument("--draws", type=int, default=1)
    p.add_argument("--arm", action="append", choices=sorted(ARMS), default=None)
    p.add_argument("--minutes", type=float, default=1.5, help="each classifier's training time")
    p.add_argument("--pretrain-minutes", type=float, default=12.0)
    p.add_argument("--work", default="runs/email-pretrain-bench", help="stores and runs (reused when present)")
    p.add_argument("--out", default=None, help="every number as JSON")
    args = p.parse_args()
    work, ks, arms = Path(args.work), args.k or ["10", "20"], args.arm or list(ARMS)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for corpus in args.corpus or ["sa3", "tr", "lists"]:
        for draw in range(args.draws):
            stores = {k: build(corpus, k, draw, work, with_bag=True) for k in ks}
            pre = pretrain(stores[ks[0]], work, args.pretrain_minutes)
            masked = masked_accuracy(pre)
            for k, store in stores.items():
                for name in arms:
                    row = {"corpus": corpus, "k": k, "draw": draw, "arm": name, "masked_accuracy": masked,
                           **arm(store, pre, name, work, args.minutes)}
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


def table(rows: list[dict]) -> str:
    """One line per corpus and K: the rival, each arm's macro-F1, and its difference from the rival."""
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    lines = ["| corpus | K | draws | rival | " + " | ".join(arms) + " |", "|" + " --- |" * (4 + len(arms))]
    for key in dict.fromkeys((r["corpus"], r["k"]) for r in rows):
        mine = [r for r in rows if (r["corpus"], r["k"]) == key]
        rival = statistics.mean(r["rival"] for r in mine if r["arm"] == arms[0])
        cells = []
        for a in arms:
            got = [r for r in mine if r["arm"] == a]
            above = sum(r["diff"][1] > 0 for r in got)
            cells.append(f"{statistics.mean(r['trm'] for r in got):.3f} "
                         f"({statistics.mean(r['diff'][0] for r in got):+.3f}, {above}/{len(got)} above 0)")
        lines.append(f"| {key[0]} | {key[1]} | {len({r['draw'] for r in mine})} | {rival:.3f} | " + " | ".join(cells)
                     + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
