"""The few-label linear models alone, per draw: what the text teacher adds to the bag's logistic regression.

On the --keep-labels stores `benchmarks/email_few_labels.py` builds (its --work folder; build them with it
first), fits what the e-mail preset's bag model can be on a store's K labels, and scores each on its test split
(macro-F1 minus TF-IDF + LR fitted on the same labels, the rival `trmkit email baseline` fits):

    em          naive Bayes by EM at the default unlabelled weight (the guard's default), from naive Bayes on
                the labels alone (before email/text_teacher.py)
    em taught   the same EM, started from the taught LR's (weight 4) classes of the unlabelled mail, as the
                preset's fit starts it where the store holds the text (email/linear_fit.py _em_start)
    lr          logistic regression of the bag on its labels alone (before email/text_teacher.py)
    taught W    the same, with the unlabelled mail as TF-IDF + LR of the labelled text labels it, at total
                weight W in units of the labelled messages' (email/text_teacher.py UNLABELLED_WEIGHT: 4)

No TRM is trained (the preset's TRM follows its bag model within about 0.03 a draw: docs/results.md). One
thread, seconds a store.

    python benchmarks/email_teacher.py --corpus sa3 --corpus tr --work runs/email-few-labels
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import torch

from trmkit.data.store import open_split
from trmkit.email import linear_fit as lf
from trmkit.email import nb_em, text_teacher
from trmkit.email.fewlabels import UNLABELLED
from trmkit.email.selftrain import ids_of

WEIGHTS = (4.0, 16.0, 64.0)


def scores(store: Path) -> dict[str, float]:
    """Each model's test macro-F1 minus the rival's on one store (its rival read from email_few_labels' JSON)."""
    train, test, unlabelled = (open_split(store / name) for name in ("train", "test", UNLABELLED))
    positions, vocab, classes = train.meta.part_positions, train.meta.vocab_size, len(train.meta.classes)
    ids, ids_t, ids_u = (ids_of(split, positions) for split in (train, test, unlabelled))
    y = torch.from_numpy(np.asarray(train.labels)[:, 0].astype(np.int64))
    y_t = torch.from_numpy(np.asarray(test.labels)[:, 0].astype(np.int64))
    rival = json.loads((store.parent / f"{store.name}.json").read_text())["baseline"]["macro_f1"]

    def f1(weight: torch.Tensor, bias: torch.Tensor, features: torch.Tensor | None) -> float:
        rows = ids_t if features is None else np.where(features[ids_t].numpy() > 0, ids_t, 0)
        logits = torch.sparse.mm(lf.multi_hot(rows, vocab, features), weight) + bias
        return lf.macro_f1(y_t, logits.argmax(1), classes) - rival

    out = {"em": f1(*nb_em.fit(lf.multi_hot(ids, vocab), y, lf.multi_hot(ids_u, vocab), classes, vocab,
                               lambda line: None), None)}
    shared = lf.shared_ids(ids, vocab)
    idf = lf.document_idf(np.concatenate([ids, ids_u]), vocab) * torch.from_numpy(shared).float()
    x_l, x_u = (lf.multi_hot(np.where(shared[i], i, 0), vocab, idf) for i in (ids, ids_u))
    def fit(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return lf._fit_lr(x, y, w, classes)

    text = text_teacher.read(store)
    out["lr"] = f1(*text_teacher.Distilled(x_l, x_u, None, fit).fitted(torch.arange(len(y)), y, torch.arange(0)), idf)
    students = {w: text_teacher.Distilled(x_l, x_u, text, fit, w).fitted(torch.arange(len(y)), y,
                                                                          torch.arange(len(ids_u)))
                for w in WEIGHTS}
    out.update({f"taught {w:g}": f1(*student, idf) for w, student in students.items()})
    weight, bias = students[text_teacher.UNLABELLED_WEIGHT]
    start = torch.softmax(torch.sparse.mm(x_u, weight) + bias, dim=1)
    out["em taught"] = f1(*nb_em.fit(lf.multi_hot(ids, vocab), y, lf.multi_hot(ids_u, vocab), classes, vocab,
                                     lambda line: None, start_from=start), None)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", action="append", required=True, help="repeat: sa3, tr, lists, sa3-sender, sa2-cross")
    p.add_argument("--work", default="runs/email-few-labels", help="email_few_labels.py's --work folder")
    p.add_argument("--k", default="10")
    p.add_argument("--draws", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    for corpus in args.corpus:
        rows = []
        for draw in range(args.draws):
            store = Path(args.work) / f"{corpus}-d{draw}-k{args.k}-bag"
            if not (store.parent / f"{store.name}.json").is_file():
                raise SystemExit(f"{store}: not measured yet; run benchmarks/email_few_labels.py --corpus {corpus} "
                                 f"--k {args.k} --trmkit --work {args.work} first")
            rows.append(scores(store))
            print(f"{corpus} draw {draw}: " + ", ".join(f"{k} {v:+.3f}" for k, v in rows[-1].items()), flush=True)
        print(f"{corpus} mean: " + ", ".join(f"{k} {statistics.mean(r[k] for r in rows):+.3f}" for k in rows[0]))


if __name__ == "__main__":
    main()
