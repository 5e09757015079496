"""The few-label guard: from the K labels alone, whether (and how much) the unlabelled mail is trusted.

With `--keep-labels K` the preset fits the bag's linear model by naive Bayes with EM over the labelled
and the unlabelled messages (email/nb_em.py). EM helps when the mailbox's structure follows its classes
(SpamAssassin 3-way, Turkish) and hurts when naive Bayes finds other structure (topics, senders): 0.103
below TF-IDF + LR on the mailing lists (docs/results.md, "E-mail"). Before the fit, `choose` scores each
candidate on the K labels by cross-fitting (FOLDS stratified folds of the labelled messages; each
held-out message predicted by a fit without its fold, the unlabelled messages read by every fit):

    EM at unlabelled weight 4 (the default), 1, 0.3   naive Bayes on the labels alone (weight 0)
    logistic regression of the bag's idf features (C = the rival's 10), on the ids found in 2+ labelled
    messages, as the rival reads the words of 2+ labelled messages (email/linear_fit.py shared_ids);
    cross-fitted on the labelled messages alone, and once chosen fitted with the unlabelled ones too, as
    TF-IDF + LR of the labelled messages' text labels them (email/text_teacher.py; with that teacher inside
    the folds its cross-fitted score fell, and the sign test kept EM on 4 of 5 mailing-list draws: docs/results.md)
The candidates are cross-fitted as listed; the text works on the chosen one's final fit alone (EM then starts
from that regression's classes of the unlabelled mail: email/linear_fit.py `_em_start`).

Where the store's test split keeps whole threads or senders apart from the rest (`--split thread |
sender`), each fold's fits also leave out the unlabelled messages of its held-out messages' threads
(senders): the test messages have no such mates among the unlabelled ones, and EM read through them
scored itself 0.873 on the mailing lists' labels where it reached 0.708 on test (docs/results.md).

The default stays unless another candidate beats it *beyond the noise of K labels*: one-sided sign test
on the held-out messages that one candidate gets right and the other wrong (the exact binomial tail,
below LEVEL), and a higher cross-fitted macro-F1. Why a test and not "the best cross-fitted score": on
30 SpamAssassin labels the candidates' cross-fitted macro-F1s were 0.05-0.15 apart in either direction
with no relation to their test scores (5 draws, K=10: the cross-fitting ranked logistic regression first
in 3 and naive Bayes on the labels alone in 2, and both were below EM at weight 4 on test in all 5), so
picking the best would follow noise; more labels make a real gap pass the test (60 labels on mail whose
topics cut across its classes: tests/email/test_fewlabels_guard.py). Cost: 20 naive Bayes / EM fits and
5 logistic regressions, 2.7-4.1 s of one core on SpamAssassin (4,565 unlabelled messages), 0.5 s on
Turkish (548). Each held-out message is scored under a uniform class
prior: the held-out messages are K per class by construction, whereas EM's prior follows the mailbox
(the mix the test split has too), and a balanced held-out set would count that against it.

Read: the training split's labels, the bag ids of the training and the unlabelled messages and, on a store
split by thread or sender, their subjects or senders; never a test or validation label
(tests/email/test_fewlabels_guard.py scrambles the test labels).
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from trmkit.email import nb_em
from trmkit.tasks.classify.scorer import ClassifyScorer

Log = Callable[[str], None]
FitLR = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # (x, y) -> (weight, bias)

DEFAULT = nb_em.UNLABELLED_WEIGHT
EM_WEIGHTS = (DEFAULT, 1.0, 0.3, 0.0)  # the default first; 0: naive Bayes on the labelled messages alone
LR = "lr"
FOLDS = 5
LEVEL = 0.05  # the sign test's one-sided level for leaving the default


@dataclass(frozen=True)
class Groups:
    """Each labelled and each unlabelled message's thread or sender (`by`), as ids: see `choose`."""

    by: str  # "thread" | "sender"
    labelled: np.ndarray  # (labelled,) int64
    unlabelled: np.ndarray  # (unlabelled,) int64


@dataclass
class Choice:
    """What the guard chose, and the evidence: stored in the run's summary.json (`metrics`)."""

    method: str  # "em" (naive Bayes, EM at `unlabelled_weight`; 0: the labels alone) or "lr"
    unlabelled_weight: float  # em: the unlabelled messages' total weight in units of the labelled ones'
    scores: dict[str, float]  # candidate name -> cross-fitted macro-F1 on the K labels
    p_values: dict[str, float]  # candidate name -> one-sided sign-test p of beating the default
    labels: int  # labelled messages scored
    reason: str = ""
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return candidate_name(LR if self.method == LR else self.unlabelled_weight)

    def metrics(self) -> dict[str, float]:
        """Flat floats for the run's final metrics (summary.json): the choice (few_labels/unlabelled_weight: -1
        when logistic regression replaced naive Bayes) and each candidate's cross-fitted macro-F1."""
        out = {"few_labels/unlabelled_weight": -1.0 if self.method == LR else float(self.unlabelled_weight),
               "few_labels/labels": float(self.labels)}
        out.update({f"few_labels/cv_macro_f1/{key_of(k)}": float(v) for k, v in self.scores.items()})
        return out

    def to_dict(self) -> dict:
        return {**asdict(self), "name": self.name}


def candidate_name(candidate: float | str) -> str:
    if candidate == LR:
        return "TF-IDF + LR on the bag"
    return "naive Bayes on the labels alone" if candidate == 0 else f"EM weight {candidate:g}"


def key_of(name: str) -> str:
    """A candidate's name as a metric key: "EM weight 0.3" -> "em_weight_0.3"."""
    return name.lower().replace(" + ", "_").replace(" ", "_")


def choose(x_l: torch.Tensor, y_l: torch.Tensor, x_u: nb_em.Rows, x_l_idf: torch.Tensor, classes: int,
           vocab: int, fit_lr: FitLR, log: Log = print, groups: Groups | None = None) -> Choice:
    """The guard's choice for labelled rows x_l (binary counts, sparse COO), their labels y_l, the unlabelled
    rows x_u, and x_l_idf (the labelled rows' features, what `fit_lr` reads). Printed with its reason.
    groups: where the store's test split holds whole threads or senders, each labelled and unlabelled
    message's group: each fold's fits then read no unlabelled message of the held-out messages' groups."""
    start = time.perf_counter()
    folds = _folds(y_l)
    if len(np.unique(folds)) < 2:  # one label per class: no fit could leave a fold out
        choice = Choice(method="em", unlabelled_weight=float(DEFAULT), scores={}, p_values={}, labels=len(y_l))
        choice.reason = (f"{candidate_name(DEFAULT)} (the default, unchecked) -- {len(y_l)} labels, one per class: "
                         "nothing to cross-fit the candidates on; give --keep-labels 2 or more for the guard to "
                         "compare")
        log(f"few labels: {choice.reason}")
        return choice
    unlabelled = _unlabelled_per_fold(x_u, folds, groups)
    held = {c: _cross_fitted(c, x_l, y_l, unlabelled, x_l_idf, classes, vocab, fit_lr, folds)
            for c in (*EM_WEIGHTS, LR)}
    scores = {candidate_name(c): _macro_f1(y_l, p, classes) for c, p in held.items()}
    right = {c: p == y_l for c, p in held.items()}
    p_values = {candidate_name(c): sign_test(right[c], right[DEFAULT]) for c in held if c != DEFAULT}
    beaten = [c for c in held if c != DEFAULT and p_values[candidate_name(c)] < LEVEL
              and scores[candidate_name(c)] > scores[candidate_name(DEFAULT)]]
    best = max(beaten, key=lambda c: scores[candidate_name(c)]) if beaten else DEFAULT
    choice = Choice(method=LR if best == LR else "em", unlabelled_weight=0.0 if best == LR else float(best),
                    scores=scores, p_values=p_values, labels=len(y_l), seconds=time.perf_counter() - start)
    choice.reason = _reason(choice, best) + _groups_said(groups, unlabelled, len(x_u))
    log(f"few labels: {choice.reason}")
    return choice


def groups_of(store: str | Path) -> Groups | None:
    """The store's groups where its split keeps whole threads or senders together (`trmkit data email --split
    thread | sender`; meta.json's build.split), read from the subjects / senders in train/ and unlabelled/
    messages.json (the keys the split used: email/prepare.py); None for any other split. An empty key is a
    group of its own message, as in the split."""
    from trmkit.data.store import META_FILE, read_meta
    from trmkit.email.fewlabels import UNLABELLED
    from trmkit.email.prepare import GROUP_SPLITS, sender_key, thread_key
    from trmkit.email.task import MESSAGES_FILE

    store = Path(store)
    by = (read_meta(store / "train" / META_FILE).build or {}).get("split")
    if by not in GROUP_SPLITS:
        return None
    ids: dict[str, int] = {}
    alone = itertools.count(-1, -1)  # an empty key: a group of one

    def of(split: str) -> np.ndarray:
        records = json.loads((store / split / MESSAGES_FILE).read_text(encoding="utf-8"))
        keys = [thread_key(r.get("subject") or "") if by == "thread" else sender_key(r.get("sender") or "")
                for r in records]
        return np.array([ids.setdefault(k, len(ids)) if k else next(alone) for k in keys], dtype=np.int64)

    labelled = of("train")
    return Groups(by=by, labelled=labelled, unlabelled=of(UNLABELLED))


def _unlabelled_per_fold(x_u: nb_em.Rows, folds: np.ndarray, groups: Groups | None) -> dict[int, nb_em.Rows]:
    """Each fold's unlabelled rows for its fits: all of them, or without those sharing a group (a thread, a
    sender) with one of the fold's held-out messages: the store's test split shares none with the rest."""
    if groups is None:
        return {int(k): x_u for k in np.unique(folds)}
    rows, out = x_u.x.to_sparse_coo(), {}
    for k in np.unique(folds):
        kept = ~np.isin(groups.unlabelled, groups.labelled[folds == k])
        out[int(k)] = nb_em.Rows.of(_rows(rows, _where(kept)))
    return out


def _groups_said(groups: Groups | None, unlabelled: dict[int, nb_em.Rows], total: int) -> str:
    if groups is None:
        return ""
    left_out = [total - len(rows) for rows in unlabelled.values()]
    return (f"; the test split holds whole {groups.by}s, so each fold's fits read no unlabelled message of its "
            f"held-out messages' {groups.by}s ({min(left_out)}-{max(left_out)} of {total} left out per fold)")


def _reason(choice: Choice, best: float | str) -> str:
    default = candidate_name(DEFAULT)
    others = ", ".join(f"{name} {score:.3f} (p={choice.p_values[name]:.3f})"
                       for name, score in choice.scores.items() if name != default)
    said = (f"cross-fitted macro-F1 on the {choice.labels} labels ({FOLDS} folds): {default} "
            f"{choice.scores[default]:.3f}; {others}; p: one-sided sign test of beating {default}")
    if best == DEFAULT:
        return (f"{default} (the unlabelled mail trusted) -- no other candidate beats it beyond the noise of "
                f"{choice.labels} labels (p < {LEVEL:g} and a higher score): {said}; {choice.seconds:.1f} s")
    return (f"{choice.name} instead of {default} -- it beats it beyond the noise of {choice.labels} labels: "
            f"{said}; {choice.seconds:.1f} s")


def _folds(y: torch.Tensor) -> np.ndarray:
    from trmkit.email.linear_fit import stratified_folds

    return stratified_folds(y, min(FOLDS, int(torch.bincount(y).max())))


def _cross_fitted(candidate: float | str, x_l: torch.Tensor, y_l: torch.Tensor, x_u: dict[int, nb_em.Rows],
                  x_l_idf: torch.Tensor, classes: int, vocab: int, fit_lr: FitLR, folds: np.ndarray
                  ) -> torch.Tensor:
    """(labels,) each labelled message's class by the candidate's fit without its fold; naive Bayes under a
    uniform prior (see the module's note)."""
    preds = torch.empty_like(y_l)
    for k in np.unique(folds):
        held, kept = _where(folds == k), _where(folds != k)
        if candidate == LR:
            weight, bias = fit_lr(_rows(x_l_idf, kept), y_l[kept])
            preds[held] = (torch.sparse.mm(_rows(x_l_idf, held), weight) + bias).argmax(1)
        else:
            weight, _, _, _ = nb_em.solve(nb_em.Rows.of(_rows(x_l, kept)), y_l[kept], x_u[int(k)], classes,
                                          vocab, float(candidate))
            preds[held] = torch.sparse.mm(_rows(x_l, held), weight).argmax(1)
    return preds


def _where(mask: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.flatnonzero(mask))


def _rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return x.index_select(0, index).coalesce()


def _macro_f1(y: torch.Tensor, preds: torch.Tensor, classes: int) -> float:
    from trmkit.email.linear_fit import macro_f1

    return macro_f1(y, preds, classes)


def sign_test(right: torch.Tensor, right_default: torch.Tensor) -> float:
    """One-sided exact sign test: P(at least b of the n discordant messages go the candidate's way | a fair
    coin), b: held-out messages the candidate gets right and the default wrong, n: those plus the reverse."""
    b = int((right & ~right_default).sum())
    n = b + int((~right & right_default).sum())
    if n == 0:
        return 1.0
    return sum(math.comb(n, i) for i in range(b, n + 1)) / 2 ** n


# The guard's choice per store, for the run's summary (FewLabelScorer reads it back). The
# trainer hands a task's hook no run directory, and the choice is made in the same process as the scoring.
_CHOICES: dict[str, Choice] = {}


def remember(store: str, choice: Choice) -> None:
    _CHOICES[store] = choice


def forget(store: str) -> None:
    """Drop the choice an earlier run on this store made in this process (a new fit makes its own, or none)."""
    _CHOICES.pop(store, None)


def recalled(store: str) -> Choice | None:
    return _CHOICES.get(store)


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class FewLabelScorer(ClassifyScorer):
    """The e-mail classifier's scorer (tasks/classify/scorer.py); on the test split of a store built with
    --keep-labels it also names the rival: TF-IDF + LR fitted on the same labels, as `trmkit email baseline`
    fits it, scored on the same messages (final metrics rival_macro_f1 and vs_rival, printed at every
    evaluation, with a WARNING when the model is more than baseline.BELOW_BY below it), and the guard's
    choice (few_labels/...): in summary.json, and in classification.json under "summary" -> "few_labels".
    The line goes to stderr by default: `trmkit eval`'s stdout carries its JSON result alone."""

    def __init__(self, split, class_names: list[str] | None = None, log: Log = _to_stderr) -> None:
        from trmkit.email.fewlabels import UNLABELLED

        super().__init__(split, class_names)
        path = getattr(split, "path", None)
        store = Path(path).resolve().parent if path is not None else None
        self.store = store if store is not None and (store / UNLABELLED).is_dir() else None
        self.labelled = _labelled_count(split)
        self.log = log

    def few_labels(self, model: float) -> dict | None:
        """The rival's figure beside the model's, and the guard's choice; None off a few-label test split."""
        if self.store is None or self.split_name != "test" or not self.class_names or not self.n:
            return None
        from trmkit.email.baseline import rival_macro_f1

        rival, name = rival_macro_f1(str(self.store), tuple(self.class_names))
        choice = recalled(str(self.store))
        return {"rival": name, "rival_macro_f1": rival, "model_macro_f1": model, "vs_rival": model - rival,
                "labels": self.labelled, "guard": choice.to_dict() if choice else None}

    def summary(self) -> dict:
        s = super().summary()
        few = self.few_labels(s["summary"]["macro_f1"])
        if few is not None:
            s["summary"]["few_labels"] = few
        return s

    def result(self) -> dict[str, float]:
        from trmkit.email.baseline import rival_line

        out = super().result()
        few = self.few_labels(out["macro_f1"])
        if few is None:
            return out
        out.update(rival_macro_f1=few["rival_macro_f1"], vs_rival=few["vs_rival"])
        choice = recalled(str(self.store))
        out.update(choice.metrics() if choice else {})
        self.log(rival_line(out["macro_f1"], few["rival_macro_f1"], few["rival"], few["labels"]))
        return out


def _labelled_count(split) -> int | None:
    """The store's labelled training messages (meta.json's build.keep_labels), or None."""
    few = (getattr(getattr(split, "meta", None), "build", None) or {}).get("keep_labels") or {}
    return sum(few.get("labelled", {}).values()) or None
