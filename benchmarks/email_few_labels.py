"""A learning curve with few labels: test macro-F1 against K labelled messages per class.

For each corpus, each K and each draw (a --seed), the store is built with `trmkit data email
--keep-labels K --seed DRAW` (K=all: without the option), both TF-IDF + LR baselines are fitted on
its labelled messages (`trmkit email baseline`), and with --trmkit `configs/email-fast.yaml` is
trained on it and compared with them by the paired bootstrap interval (`baseline --run`). The split
is made before the K labels are drawn, so for one draw every K is scored on the same test messages
(checked: the script stops if not). Prints a Markdown table of the mean and standard deviation over
draws; --out keeps every number as JSON.

    python benchmarks/email_few_labels.py --corpus sa3 --corpus tr --draws 3 --out few.json

A K that a class of the training split cannot fill is refused by the build and left blank.
With --trmkit the table names the few-label guard's choice per draw (email/guard.py; the run's summary holds it)
and counts the draws more than 0.01 below the rival. A TRM run on such a store has no validation split (its
labels would be labels beyond K): it trains for --minutes with no early stop and no restore of a best
checkpoint (both would be judged on test).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

DATA = Path("../shared/data/email")
CORPORA = {  # the corpora of docs/results.md's "E-mail", and SpamAssassin split by sender
    "sa3": ["--source", str(DATA / "spamassassin"), "--label-map", "configs/email-sa3.yaml"],
    "tr": ["--source", str(DATA / "turkish" / "trspam_v01.csv")],
    "lists": ["--source", str(DATA / "spamassassin"), "--label-from", "header:List-Id",
              "--label-map", "configs/email-lists.yaml", "--split", "thread"],
    "sa3-sender": ["--source", str(DATA / "spamassassin"), "--label-map", "configs/email-sa3.yaml",
                   "--split", "sender"],  # every message of a sender address in one split
    "sa2-cross": ["--source", str(DATA / "spamassassin"), "--label-map", "configs/email-sa2.yaml",
                  "--test-where=-2/"],  # ham / spam: trained on the *-1 folders, tested on the *-2 ones
}
KS = ("5", "10", "20", "50", "100", "all")
MODELS = {"baseline": "TF-IDF + LR", "baseline_balanced": "TF-IDF + LR balanced", "trm": "TRM (email-fast)"}


def trmkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "trmkit", *args]


def build(corpus: str, k: str, draw: int, out: Path, with_bag: bool) -> Path | str:
    """The store's path, or the build's error (a K a class cannot fill)."""
    store = out / f"{corpus}-d{draw}-k{k}{'-bag' if with_bag else ''}"
    if not (store / "test").is_dir():
        few = [] if k == "all" else ["--keep-labels", k]
        bag = ["--seq-len", "32", "--bag", "1024"] if with_bag else []
        done = subprocess.run(trmkit("data", "email", *CORPORA[corpus], *few, *bag, "--seed", str(draw),
                                     "--out", str(store)), capture_output=True, text=True)
        if done.returncode != 0:
            return done.stderr.strip().splitlines()[-1]
    return store


def test_ids(store: Path) -> list:
    return [(r["where"], r["message_id"]) for r in json.loads((store / "test" / "messages.json").read_text())]


def measure(store: Path, out: Path, minutes: float | None) -> dict[str, float | list]:
    """Macro-F1 of both baselines, and with minutes the TRM's with its paired intervals."""
    result_file = out / f"{store.name}.json"
    cmd = ["email", "baseline", str(store), "--out", str(result_file)]
    if minutes is not None:
        run_dir = out / f"{store.name}-run"
        if not (run_dir / "classification.json").is_file():
            subprocess.run(trmkit("train", "configs/email-fast.yaml", "--force", f"data.path={store}",
                                  f"run.dir={run_dir}", f"train.max_minutes={minutes}", "train.early_stop_evals=0",
                                  "train.restore_best=false", "run.threads=1"),
                           check=True, capture_output=True)
        cmd += ["--run", str(run_dir)]
    subprocess.run(trmkit(*cmd), check=True, capture_output=True)
    result = json.loads(result_file.read_text())
    row: dict[str, float | list] = {key: result[key]["macro_f1"] for key in MODELS if key in result}
    for key in ("trm_minus_baseline", "trm_minus_baseline_balanced"):
        if key in result:
            row[key] = [result[key]["macro_f1"], *result[key]["ci95"]]
    guard = ((result.get("trm") or {}).get("few_labels") or {}).get("guard")
    if guard:  # the few-label guard's choice (email/guard.py), as the run's summary holds it
        row["guard"] = guard["name"]
    return row


def curve(corpus: str, draws: range, out: Path, minutes: float | None, ks: tuple = KS) -> dict[str, list[dict]]:
    """{K: one row per draw}; every K of a draw is checked to have the same test messages."""
    rows: dict[str, list[dict]] = {k: [] for k in ks}
    for draw in draws:
        tests = {}
        for k in ks:
            t0 = time.perf_counter()
            store = build(corpus, k, draw, out, with_bag=minutes is not None)
            if isinstance(store, str):
                print(f"{corpus} K={k} draw {draw}: refused: {store}", file=sys.stderr)
                continue
            tests[k] = test_ids(store)
            if tests[k] != next(iter(tests.values())):
                raise SystemExit(f"{store}: its test split differs from K={next(iter(tests))}'s of draw {draw}")
            rows[k].append({"draw": draw, **measure(store, out, minutes)})
            print(f"{corpus} K={k} draw {draw}: {rows[k][-1]} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return rows


def cell(values: list[float]) -> str:
    if not values:
        return ""
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {spread:.3f}"


def paired(draws: list[dict], key: str) -> str:
    """The mean TRM - baseline difference, and in how many draws its paired 95% interval lies above 0."""
    diffs = [d[key] for d in draws if key in d]
    if not diffs:
        return ""
    below = sum(x[0] < -0.01 for x in diffs)
    return f"{cell([x[0] for x in diffs])} ({sum(x[1] > 0 for x in diffs)}/{len(diffs)} above 0, {below} below -0.01)"


def choices(draws: list[dict]) -> str:
    """The few-label guard's choices over the draws, e.g. "EM weight 4 x4, EM weight 0.3 x1"."""
    counts = Counter(d["guard"] for d in draws if "guard" in d)
    return ", ".join(f"{name} x{n}" for name, n in counts.most_common())


def table(results: dict[str, dict[str, list[dict]]]) -> list[str]:
    keys = [k for k in MODELS if any(k in r for c in results.values() for rs in c.values() for r in rs)]
    diffs = ["trm_minus_baseline_balanced"] if "trm" in keys else []
    lines = ["| corpus | labels per class | draws | " + " | ".join(MODELS[k] for k in keys)
             + "".join(" | TRM - LR balanced (paired) | guard's choice" for _ in diffs) + " |",
             "|" + " --- |" * (3 + len(keys) + 2 * len(diffs))]
    for corpus, rows in results.items():
        for k, draws in rows.items():
            lines.append(f"| {corpus} | {k} | {len(draws)} | "
                         + " | ".join([cell([d[key] for d in draws if key in d]) for key in keys]
                                      + [f"{paired(draws, key)} | {choices(draws)}" for key in diffs]) + " |")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", action="append", choices=sorted(CORPORA), help="repeat; default: all five")
    p.add_argument("--draws", type=int, default=5, help="seeds per K (the split and the labels drawn)")
    p.add_argument("--first-draw", type=int, default=0, help="the first draw's seed (to add draws to earlier ones)")
    p.add_argument("--k", action="append", choices=KS, help="labels per class; repeat; default: all of " + "/".join(KS))
    p.add_argument("--trmkit", action="store_true", help="also train configs/email-fast.yaml on every store")
    p.add_argument("--minutes", type=float, default=3.0, help="with --trmkit: training minutes per run")
    p.add_argument("--work", default="runs/email-few-labels", help="stores, runs and per-store results")
    p.add_argument("--out", default=None, help="write every number as JSON here")
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    minutes = args.minutes if args.trmkit else None
    ks = tuple(k for k in KS if k in (args.k or KS))
    draws = range(args.first_draw, args.first_draw + args.draws)
    results = {c: curve(c, draws, work, minutes, ks) for c in args.corpus or sorted(CORPORA)}
    print("\n".join(table(results)))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
