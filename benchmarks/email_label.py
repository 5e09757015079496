"""`trmkit email label`: do the answers it chooses beat as many random ones?

On SpamAssassin 3-way, for each --seed: a store with --keep-labels K (2 per class: 6 labels) and
the same mailbox and seed built without it (the oracle: every true label). Then

    chosen  `trmkit email label STORE --oracle FULL --count N` (its margin rule, refitted every 5
            answers), then `--apply --out` a store with the N answers in train/
    random  N unlabelled messages drawn at random (--random-draws draws, each its own store)

and each store is scored on the test split by naive Bayes with EM alone (email/nb_em.py fitted on
its labelled + unlabelled training messages: seconds), and with --trmkit also by training
configs/email-fast.yaml for --minutes (as benchmarks/email_few_labels.py does: no validation split,
so no early stop and no best restored). Prints a Markdown table of test macro-F1; --out keeps it.

    python benchmarks/email_label.py --seeds 0 1 2 --out label.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from trmkit.data.store import open_split
from trmkit.email.label import fit_model, open_pool, random_rows, save_answer
from trmkit.email.label_ask import oracle_labels
from trmkit.email.label_store import apply_answers
from trmkit.email.linear_fit import macro_f1, multi_hot
from trmkit.names import current_names

SOURCE = ["--source", "../shared/data/email/spamassassin", "--label-map", "configs/email-sa3.yaml"]


def trmkit(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "trmkit", *args], check=True, capture_output=True, text=True)


def build(work: Path, seed: int, keep: int | None) -> Path:
    store = work / f"sa3-s{seed}-k{keep or 'all'}"
    if not (store / "test").is_dir():
        trmkit("data", "email", *SOURCE, *(["--keep-labels", str(keep)] if keep else []), "--seed", str(seed),
               "--out", str(store))
    return store


def nb_em_f1(store: Path) -> float:
    """Test macro-F1 of NB-EM fitted on the store's labelled and unlabelled training messages."""
    pool = open_pool(store)
    weight, bias = fit_model(pool, {}, log=lambda line: None)
    test = open_split(store / "test")
    bag = int(current_names(pool.meta)["part_positions"])  # stores built before: pooled_positions
    preds = (torch.sparse.mm(multi_hot(np.asarray(test.inputs)[:, -bag:], pool.vocab), weight) + bias).argmax(1)
    labels = torch.from_numpy(np.asarray(test.labels)[:, 0].astype(np.int64))
    return macro_f1(labels, preds, len(pool.classes))


def trm_f1(store: Path, minutes: float) -> float:
    run = store.with_name(store.name + "-run")
    if not (run / "classification.json").is_file():
        trmkit("train", "configs/email-fast.yaml", "--force", f"data.path={store}", f"run.dir={run}",
               f"train.max_minutes={minutes}", "train.early_stop_evals=0", "train.restore_best=false",
               "run.threads=1")
    result = json.loads((run / "classification.json").read_text())
    return float(result.get("summary", result)["macro_f1"])


def chosen(work: Path, store: Path, full: Path, count: int) -> Path:
    answers, out = work / f"{store.name}-chosen.jsonl", work / f"{store.name}-chosen"
    if not (out / "test").is_dir():
        answers.unlink(missing_ok=True)
        trmkit("email", "label", str(store), "--oracle", str(full), "--count", str(count),
               "--answers-jsonl", str(answers))
        trmkit("email", "label", str(store), "--answers-jsonl", str(answers), "--apply", "--out", str(out))
    return out


def random(work: Path, store: Path, full: Path, count: int, seed: int, draw: int) -> Path:
    """A store with `count` random answers; the draw is seeded by (the store's seed, draw): unlabelled rows
    are in the mailbox's order (its folders), so one row draw for every seed would give each seed the
    same mix of classes."""
    answers, out = work / f"{store.name}-random{draw}.jsonl", work / f"{store.name}-random{draw}"
    if not (out / "test").is_dir():
        answers.unlink(missing_ok=True)
        pool, saved = open_pool(store), []
        truth = oracle_labels(pool, full)
        for row in random_rows(pool, [], count, seed=[seed, draw]):
            save_answer(answers, saved, pool, row, truth[pool.keys[row]], "random")
        apply_answers(pool, saved, answers, out, log=lambda line: None)
    return out


def one_seed(args: argparse.Namespace, seed: int) -> dict:
    store, full = build(args.work, seed, args.keep), build(args.work, seed, None)
    stores = {"start": store, "chosen": chosen(args.work, store, full, args.count)}
    stores.update({f"random{d}": random(args.work, store, full, args.count, seed, d) for d in range(args.random_draws)})
    row = {name: {"nb_em": nb_em_f1(s)} for name, s in stores.items()}
    if args.trmkit:
        for name, s in stores.items():
            row[name]["trm"] = trm_f1(s, args.minutes)
    print(f"seed {seed}: " + ", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    return row


def table(results: dict[int, dict], model: str, draws: int) -> list[str]:
    lines = ["| seed | start (6 labels) | + 30 chosen | + 30 random (mean of draws) | chosen - random |",
             "| --- | --- | --- | --- | --- |"]
    diffs = []
    for seed, row in results.items():
        draws_f1 = [row[f"random{d}"][model] for d in range(draws)]
        rand = statistics.mean(draws_f1)
        diffs.append(row["chosen"][model] - rand)
        lines.append(f"| {seed} | {row['start'][model]:.3f} | {row['chosen'][model]:.3f} | {rand:.3f} "
                     "(" + ", ".join(f"{f:.3f}" for f in draws_f1) + f") | {diffs[-1]:+.3f} |")
    lines.append(f"| mean | | | | {statistics.mean(diffs):+.3f} |")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--keep", type=int, default=2, help="labels per class in the starting store")
    p.add_argument("--count", type=int, default=30, help="answers, chosen or random")
    p.add_argument("--random-draws", type=int, default=3, help="random answer sets per seed")
    p.add_argument("--trmkit", action="store_true", help="also train configs/email-fast.yaml on every store")
    p.add_argument("--minutes", type=float, default=3.0, help="with --trmkit: training minutes per store")
    p.add_argument("--work", type=Path, default=Path("data/label-bench"), help="stores and answers go here")
    p.add_argument("--out", type=Path, default=None, help="write every number as JSON")
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    results = {seed: one_seed(args, seed) for seed in args.seeds}
    for model in ("nb_em", "trm") if args.trmkit else ("nb_em",):
        print(f"\n{model}: test macro-F1, SpamAssassin 3-way, --keep-labels {args.keep}\n")
        print("\n".join(table(results, model, args.random_draws)))
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results},
                                       indent=2))


if __name__ == "__main__":
    main()
