"""The e-mail bag's linear model: fitted before training into the bag part's frozen linear buffers.

An e-mail store built with a bag (`trmkit data email --bag N`) ends each message with the ids of its
N most telling n-grams; the model's bag part pools them (email/parts.py) and, with email.input_linear,
adds a linear model of them to its class logits (email/input_linear.py reads it). This module fits
it, through the e-mail task's `before_training` hook (email/task.py), once before training on the
training split, to the optimum of

    sum_i w_i CE(logits_in(x_i), y_i) / N  +  |W|^2 / (2 C N)

(w_i: the training loss's class weights, train.class_weighting; C: email.input_linear_c; the same
objective as scikit-learn's LogisticRegression on a multi-hot matrix), by full-batch L-BFGS, and then
frozen (buffers, not parameters). idf features (email.input_linear_weighting=idf): idf_j =
log((1 + N) / (1 + df_j)) + 1 counted over the N training bags, as the baseline reads its words. On
the word bag (docs/results.md) the idf features fitted with C=10 reach the
class-balanced baseline's macro-F1 on SpamAssassin 3-way, where binary ones stay 0.02 under it.

Why fitted and not trained with the rest: on a few hundred messages the same linear model trained
by Adam beside the recursion stops well short of that optimum and generalises worse (docs/results.md).

Out of fold (email.input_linear_folds = K >= 2): the fitted model classifies its own training split
almost perfectly, so the recursion, trained on those logits, sees few errors to learn from; K more
fits, each without one fold, give each training message the logits of a fit that did not see it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from trmkit.config import ConfigError
from trmkit.email.bag import smooth_idf
from trmkit.email.progress import slow_steps
from trmkit.email.input_linear import Features, fold_of, values_of
from trmkit.email.parts import BagPart, bag_part
from trmkit.email.text_teacher import MIN_DF, Distilled, TextCounts, read

Log = Callable[[str], None]
MAX_ITERATIONS = 500


def multi_hot(ids: np.ndarray, vocab_size: int, idf: Features = None) -> torch.Tensor:
    """(N, vocab) sparse float32: for each non-pad id of each row its feature (`values`: 1, or the
    L2-normalised idf; repeats add up)."""
    rows, cols = np.nonzero(ids)
    index = torch.from_numpy(np.stack([rows, ids[rows, cols].astype(np.int64)]))
    values = values_of(torch.from_numpy(ids.astype(np.int64)), idf)[torch.from_numpy(rows), torch.from_numpy(cols)]
    return torch.sparse_coo_tensor(index, values, (len(ids), vocab_size), check_invariants=True).coalesce()


def document_idf(ids: np.ndarray, vocab_size: int) -> torch.Tensor:
    """(vocab,) log((1 + N) / (1 + df)) + 1 over N bags (df: bags holding the id); the pad id's is 0."""
    idf = torch.from_numpy(smooth_idf(len(ids), document_frequency(ids, vocab_size))).float()
    idf[0] = 0.0
    return idf


def document_frequency(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """(vocab,) int64: how many rows of ids (bags) hold each id; the pad id's count is 0."""
    df = np.zeros(vocab_size, dtype=np.int64)
    for row in ids:
        df[np.unique(row[row != 0])] += 1
    return df


def before_training(model: torch.nn.Module, train, class_weights: torch.Tensor | None, log: Log = print) -> None:
    """The e-mail task's hook (Task.before_training): with email.input_linear, fit it to the training split
    (a data.store.Split). A resumed run fits it again and then reloads the same fit from its checkpoint."""
    part = bag_part(model)
    if part is not None and part.fitted:
        if not part.positions:
            raise ConfigError(f"email.input_linear fits a linear model of the message's n-gram bag, and this store "
                              f"has none: rebuild it with one, e.g. {rebuild_command(train.meta)}, or train with "
                              "email.input_linear=false")
        fit(model, train.inputs, train.labels, class_weights, part.settings.input_linear_c, log,
            unlabelled=_unlabelled_ids(part, train, log), store=str(Path(train.path).resolve().parent))


def _unlabelled_ids(part: BagPart, train, log: Log) -> np.ndarray | None:
    """The bag ids of the store's unlabelled split (built with --keep-labels) when the fit self-trains on it."""
    from trmkit.data.store import open_split
    from trmkit.email.fewlabels import UNLABELLED
    from trmkit.email.selftrain import ids_of

    path = Path(train.path).parent / UNLABELLED
    if not path.is_dir():
        return None
    if part.settings.input_linear_unlabelled == "off":
        log(f"model: input_linear fits the labelled messages only; email.input_linear_unlabelled=em would also "
            f"read the {path} messages (naive Bayes by EM: above TF-IDF + LR on SpamAssassin and Turkish, below "
            "it on the mailing lists, docs/results.md)")
        return None
    return ids_of(open_split(path), part.positions)


def rebuild_command(meta) -> str:
    """The `trmkit data email` command that builds the store of `meta` again, with the default bag."""
    b = meta.build
    parts = ["trmkit data email", f"--source {meta.source}"]
    for key, flag in (("label_from", "--label-from"), ("label_map", "--label-map"), ("split", "--split"),
                      ("test_where", "--test-where")):
        if b.get(key) not in (None, "", "folder", "stratified"):
            parts.append(f"{flag}={b[key]}" if key == "test_where" else f"{flag} {b[key]}")
    return "`" + " ".join(parts + ["--seq-len 32 --bag 1024 --out NEW_DIR`"])


def fit(model: torch.nn.Module, inputs: np.ndarray, labels: np.ndarray, class_weights: torch.Tensor | None,
        c: float, log: Log = print, unlabelled: np.ndarray | None = None, store: str | None = None) -> dict[str, float]:
    """Fit the bag part's linear_weight / bias to the training split (inputs (N, seq_len), labels: the class
    at position 0), and with email.input_linear_folds also one model per fold without that fold
    (linear_fold_weight / _bias); returns what the fit on the whole split reached, and logs it.
    With email.input_linear_weighting=auto or c=0 the features and C are first chosen (`choose`).
    `unlabelled`: bag ids of messages without a label: the idf counts them too, and the fit then
    self-trains on them (email/selftrain.py), or fits naive Bayes by EM as the few-label guard chose
    (email/guard.py; `store`: the store's folder, under which the choice is kept for the run's summary)."""
    cfg, part = model.cfg, bag_part(model)
    s = part.settings
    start = time.perf_counter()
    if store is not None:
        from trmkit.email.guard import forget

        forget(store)
    ids = np.asarray(inputs)[:, -part.positions:]
    y = _labels(labels, cfg.num_classes)
    w = (class_weights[:cfg.num_classes].float().cpu() if class_weights is not None
         else torch.ones(cfg.num_classes))[y]
    every = ids if unlabelled is None else np.concatenate([ids, unlabelled])  # the idf reads no label
    idf = document_idf(every, cfg.vocab_size) if s.input_linear_weighting != "binary" else None
    if unlabelled is not None and s.input_linear_unlabelled == "em":
        return _fit_em(model, ids, y, unlabelled, log, start, store, idf)
    weighting, c, _ = choose(s.input_linear_weighting, cfg, ids, y, w, idf, c, log)
    _set_idf(part, idf, weighting == "idf")
    idf = idf if weighting == "idf" else None
    x = multi_hot(ids, cfg.vocab_size, idf)
    weight, bias, out = _fit_one(x, y, w, cfg.num_classes, c)
    if unlabelled is not None and len(unlabelled):  # email.input_linear_unlabelled=self_train
        from trmkit.email.selftrain import self_train

        weight, bias = self_train(x, y, multi_hot(unlabelled, cfg.vocab_size, idf), weight, bias, cfg.num_classes,
                                  lambda xs, ys, ws: _fit_one(xs, ys, ws, cfg.num_classes, c), log)
    _set_linear(part, weight, bias)
    seconds = time.perf_counter() - start
    log(f"model: input_linear fitted (logistic regression on the bag's ids, {weighting} features, C={c:g}, "
        f"{len(y)} training messages, {out['iterations']} L-BFGS iterations, {seconds:.1f} s): objective "
        f"{out['objective']:.4f}, training accuracy {out['train_accuracy']:.3f}; frozen, the recursion's head "
        "learns beside it")
    if s.input_linear_folds:
        out["out_of_fold_accuracy"] = _fit_folds(model, ids, y, w, c, log, idf)
    return {**out, "seconds": time.perf_counter() - start, "weighting": weighting, "c": c}


def _set_idf(part: BagPart, idf: torch.Tensor | None, used: bool) -> None:
    """Store the idf the part's features may read (none where it reads binary features), and whether it does."""
    if idf is not None:
        with torch.no_grad():
            part.linear_idf.copy_(idf.to(part.linear_idf.device))
            part.linear_use_idf.fill_(float(used))


def _fit_em(model: torch.nn.Module, ids: np.ndarray, y: torch.Tensor, unlabelled: np.ndarray, log: Log,
            start: float, store: str | None = None, idf: torch.Tensor | None = None) -> dict[str, float]:
    """input_linear by naive Bayes with EM over the labelled and the unlabelled bags (email/nb_em.py), at the
    unlabelled weight the few-label guard chose from the labels alone (email/guard.py), or the guard's logistic
    regression of the bag (idf features where the part reads them, C=GUARD_C)."""
    from trmkit.email import guard, nb_em

    cfg, part = model.cfg, bag_part(model)
    if part.settings.input_linear_folds:
        raise ConfigError("email.input_linear_unlabelled=em fits one model over every message and has no folds: "
                          "train with email.input_linear_folds=0")
    x, x_u = multi_hot(ids, cfg.vocab_size), nb_em.Rows.of(multi_hot(unlabelled, cfg.vocab_size))
    reads_idf = idf is not None  # computed by fit() over the labelled and the unlabelled bags
    shared = shared_ids(ids, cfg.vocab_size)
    x_lr = multi_hot(np.where(shared[ids], ids, 0), cfg.vocab_size, idf)
    choice = guard.choose(x, y, x_u, x_lr, cfg.num_classes, cfg.vocab_size,
                          lambda xs, ys: _fit_lr(xs, ys, torch.ones(len(ys)), cfg.num_classes), log,
                          groups=guard.groups_of(store) if store is not None else None)
    if store is not None:
        guard.remember(store, choice)
    taught = choice.method == guard.LR or choice.unlabelled_weight > 0  # where the text can teach the fit
    text = read(store) if store is not None and taught else None
    x_u_lr = multi_hot(np.where(shared[unlabelled], unlabelled, 0), cfg.vocab_size, idf) if taught else None
    if choice.method == guard.LR:
        weight, bias, read_how = _fit_taught(x_lr, y, x_u_lr, text, cfg.num_classes)
        log(f"model: input_linear fitted by logistic regression on the bag's {'idf' if reads_idf else 'binary'} "
            f"features of the {int(shared.sum())} ids in {LR_MIN_DF}+ labelled messages (C={GUARD_C:g}): the "
            f"{len(y)} labelled messages, {read_how}")
        idf = idf * torch.from_numpy(shared).float() if reads_idf else None  # the ids left out weigh 0
    else:
        weight, bias = nb_em.fit(x, y, x_u, cfg.num_classes, cfg.vocab_size, log, choice.unlabelled_weight,
                                 _em_start(x_lr, y, x_u_lr, text, cfg.num_classes, choice.unlabelled_weight, log))
    _set_linear(part, weight, bias)
    _set_idf(part, idf, choice.method == guard.LR)
    features = x_lr if choice.method == guard.LR else x
    accuracy = float(((torch.sparse.mm(features, weight) + bias).argmax(1) == y).float().mean())
    return {"train_accuracy": accuracy, "seconds": time.perf_counter() - start,
            "weighting": "idf" if choice.method == guard.LR and reads_idf else "binary",
            "c": GUARD_C if choice.method == guard.LR else 0.0, "guard": choice.to_dict()}


def _fit_lr(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The few-label logistic regression's (weight, bias): rows x, labels y, row weights w, at the rival's C."""
    return _fit_one(x, y, w, classes, GUARD_C)[:2]


def _fit_taught(x_lr: torch.Tensor, y: torch.Tensor, x_u_lr: torch.Tensor, text: TextCounts | None, classes: int
                ) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(weight, bias, what it read) of the logistic regression of the bag's features (x_lr labelled, x_u_lr
    unlabelled): on the labelled messages and, where the store holds the messages' text, on the unlabelled ones
    as TF-IDF + LR of the labelled text labels them (email/text_teacher.py). The guard cross-fitted it on the
    labelled ones alone."""
    unlabelled = len(x_u_lr)
    if text is not None and (text.labelled_rows, text.unlabelled_rows) != (len(y), unlabelled):
        raise ConfigError(f"the store's messages.json files hold {text.labelled_rows} labelled and "
                          f"{text.unlabelled_rows} unlabelled messages, its splits {len(y)} and {unlabelled}: "
                          "build the store again with `trmkit data email`")
    if text is None or not text.columns:
        weight, bias = _fit_lr(x_lr, y, torch.ones(len(y)), classes)
        why = "no text of them" if text is None else f"no word of their text is in {MIN_DF}+ labelled messages"
        return weight, bias, f"the unlabelled ones not read ({why})"
    lr = Distilled(x_lr, x_u_lr, text, lambda xs, ys, ws: _fit_lr(xs, ys, ws, classes))
    weight, bias = lr.fitted(torch.arange(len(y)), y, torch.arange(unlabelled))
    return weight, bias, (f"and the {unlabelled} unlabelled ones as TF-IDF + LR of the labelled messages' text "
                          "labels them (email/text_teacher.py)")


def _em_start(x_lr: torch.Tensor, y: torch.Tensor, x_u_lr: torch.Tensor | None, text: TextCounts | None,
              classes: int, unlabelled_weight: float, log: Log) -> torch.Tensor | None:
    """Where EM reads the unlabelled mail and the store holds its text: the unlabelled messages' class
    probabilities by the logistic regression the text taught (`_fit_taught`), for EM to start from instead of
    naive Bayes on the labels alone. Measured (the linear model alone, 5 draws, 10 labels per class, minus the
    rival; benchmarks/email_teacher.py): SpamAssassin +0.092 -> +0.109, Turkish +0.036 -> +0.064."""
    if unlabelled_weight == 0 or text is None or not text.columns:
        return None
    weight, bias, _ = _fit_taught(x_lr, y, x_u_lr, text, classes)
    log(f"model: input_linear EM starts from the unlabelled messages' classes by the logistic regression the text "
        f"taught (email/text_teacher.py), not from naive Bayes on the {len(y)} labels alone")
    return torch.softmax(torch.sparse.mm(x_u_lr, weight) + bias, dim=1)


GUARD_C = 10.0  # the few-label guard's logistic regression: the rival's C (email/baseline.py SETTINGS)
LR_MIN_DF = 2  # ... and its features: the ids in this many labelled messages (the rival's min_df)


def shared_ids(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """(vocab,) bool: the bag ids found in at least LR_MIN_DF of the rows of ids (the labelled messages'
    bags; no label read). The few-label logistic regression reads these alone, as the rival reads the words
    of 2+ labelled messages: on all the bag's ids it averaged 0.742 / 0.667 on SpamAssassin / Turkish (one
    Turkish draw 0.38 against the rival's 0.78), on these 0.747 / 0.771 against the rival's 0.734 / 0.757 (on
    the mailing lists 0.832 against 0.866: docs/results.md, "E-mail")."""
    return document_frequency(ids, vocab_size) >= LR_MIN_DF


def _set_linear(part: BagPart, weight: torch.Tensor, bias: torch.Tensor) -> None:
    """The fitted model into the part's frozen buffers."""
    with torch.no_grad():
        part.linear_weight.copy_(weight.to(part.linear_weight.device))
        part.linear_bias.copy_(bias.to(part.linear_bias.device))


C_GRID = (1.0, 3.0, 10.0, 30.0)  # email.input_linear_c=0 chooses among these
CHOICE_FOLDS = 5  # the auto choice's cross-validation folds over the training split


def choose(weighting: str, cfg, ids: np.ndarray, y: torch.Tensor, w: torch.Tensor, idf: torch.Tensor | None,
           c: float, log: Log) -> tuple[str, float, dict]:
    """(weighting, C, scores): as configured (email.input_linear_weighting, C), or where auto / 0, the pair
    whose fits score the best macro-F1 by CHOICE_FOLDS-fold cross-validation on the training split (each
    message predicted by the fit without its fold, one macro-F1 over all of them; ties: the first in the order
    binary before idf, smaller C before larger). Cross-validation, not the validation split: on the Turkish
    CSV's 71 validation messages the choice followed noise (docs/results.md); the validation split stays for
    checkpoints."""
    weightings = ("binary", "idf") if weighting == "auto" else (weighting,)
    cs = C_GRID if c == 0 else (c,)
    if len(weightings) * len(cs) == 1:
        return weightings[0], cs[0], {}
    start, folds = time.perf_counter(), stratified_folds(y, CHOICE_FOLDS)
    scores, say = {}, slow_steps(log)
    for weighting in weightings:
        x = multi_hot(ids, cfg.vocab_size, idf if weighting == "idf" else None)
        for value in cs:
            scores[weighting, value] = cross_validated_f1(x, y, w, cfg.num_classes, value, folds)
            say(f"model: input_linear cross-validation {len(scores)}/{len(weightings) * len(cs)}: {weighting} "
                f"C={value:g} macro-F1 {scores[weighting, value]:.4f} ({CHOICE_FOLDS} fits on {len(y)} messages)")
    best = max(scores, key=scores.get)  # the first of equal scores
    tried = ", ".join(f"{k[0]} C={k[1]:g} {v:.4f}" for k, v in scores.items())
    log(f"model: input_linear chose {best[0]} features, C={best[1]:g}: the best {CHOICE_FOLDS}-fold cross-validated "
        f"macro-F1 on the training split of {len(scores)} candidates ({tried}; {time.perf_counter() - start:.1f} s)")
    return best[0], best[1], scores


def stratified_folds(y: torch.Tensor, k: int) -> np.ndarray:
    """(N,) fold of each message in 0..k-1: each class's messages in a fixed shuffled order (seed 0, so the
    choice is the same in every run of a store) dealt in turn, so every fold holds each class's share."""
    labels, fold = y.numpy(), np.zeros(len(y), dtype=np.int64)
    rng = np.random.default_rng(0)
    for cls in np.unique(labels):
        rows = rng.permutation(np.flatnonzero(labels == cls))
        fold[rows] = np.arange(len(rows)) % k
    return fold


def cross_validated_f1(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, classes: int, c: float,
                       folds: np.ndarray) -> float:
    """Macro-F1 of the out-of-fold predictions: each fold's messages by the fit on the others."""
    preds = torch.empty_like(y)
    for k in np.unique(folds):
        held, kept = torch.from_numpy(folds == k), torch.from_numpy(folds != k)
        weight, bias, _ = _fit_one(_rows(x, kept), y[kept], w[kept], classes, c)
        preds[held] = (torch.sparse.mm(_rows(x, held), weight) + bias).argmax(1)
    return macro_f1(y, preds, classes)


def _rows(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The rows of a sparse matrix where mask is true."""
    return x.index_select(0, torch.nonzero(mask).flatten()).coalesce()


def macro_f1(labels: torch.Tensor, preds: torch.Tensor, classes: int) -> float:
    """The mean over the classes present in labels or preds of F1 (2 TP / (2 TP + FP + FN)): as
    tasks/classify/metrics.py's summary_metrics counts it, here on tensors inside the cross-validation loop."""
    scores = []
    for k in range(classes):
        tp = int(((preds == k) & (labels == k)).sum())
        fp, fn = int(((preds == k) & (labels != k)).sum()), int(((preds != k) & (labels == k)).sum())
        if tp + fp + fn:
            scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores)) if scores else 0.0


def _labels(labels: np.ndarray, classes: int) -> torch.Tensor:
    y = torch.from_numpy(np.asarray(labels)[:, 0].astype(np.int64))
    if len(y) and (int(y.max()) >= classes or int(y.min()) < 0):
        raise ValueError(f"email.input_linear: training labels outside 0..{classes - 1}")
    return y


def _fit_folds(model: torch.nn.Module, ids: np.ndarray, y: torch.Tensor, w: torch.Tensor, c: float, log: Log,
               idf: Features = None) -> float:
    """Fit one model per fold on the other folds into the fold buffers; the accuracy of each message's
    out-of-fold model on it (what the training steps will add)."""
    cfg, part, start = model.cfg, bag_part(model), time.perf_counter()
    folds = part.settings.input_linear_folds
    fold = fold_of(torch.from_numpy(ids.astype(np.int64)), folds).numpy()
    right = 0
    for k in range(folds):
        held, kept = fold == k, fold != k
        if not kept.any() or len(np.unique(y.numpy()[kept])) < 2:
            raise ValueError(f"email.input_linear_folds={folds}: fold {k} leaves {int(kept.sum())} "
                             "training message(s) of fewer than 2 classes to fit on; use fewer folds")
        weight, bias, _ = _fit_one(multi_hot(ids[kept], cfg.vocab_size, idf), y[kept], w[kept], cfg.num_classes, c)
        with torch.no_grad():
            part.linear_fold_weight[k].copy_(weight.to(part.linear_fold_weight.device))
            part.linear_fold_bias[k].copy_(bias.to(part.linear_fold_bias.device))
            if held.any():
                logits = torch.sparse.mm(multi_hot(ids[held], cfg.vocab_size, idf), weight) + bias
                right += int((logits.argmax(1) == y[held]).sum())
    accuracy = right / len(y)
    log(f"model: email.input_linear_folds={folds} -> {folds} more fits, each without one "
        f"fold of the training split ({time.perf_counter() - start:.1f} s); training steps add each message's "
        f"out-of-fold logits (accuracy {accuracy:.3f} on the messages it did not see), evaluation the whole fit's")
    return accuracy


def _fit_one(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, classes: int, c: float
             ) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The optimum of the class-weighted L2 logistic regression on multi-hot x (N, vocab) by L-BFGS."""
    weight = torch.zeros(x.shape[1], classes, requires_grad=True)
    bias = torch.zeros(classes, requires_grad=True)
    n = len(y)

    def objective() -> torch.Tensor:
        logits = torch.sparse.mm(x, weight) + bias
        ce = torch.nn.functional.cross_entropy(logits, y, reduction="none")
        return (w * ce).sum() / n + weight.square().sum() / (2 * c * n)

    opt = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=MAX_ITERATIONS, history_size=20,
                            tolerance_grad=1e-7, tolerance_change=1e-10, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = objective()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        loss = float(objective())
        accuracy = float(((torch.sparse.mm(x, weight) + bias).argmax(1) == y).float().mean())
    iterations = int(opt.state[opt._params[0]].get("n_iter", 0))
    return weight.detach(), bias.detach(), {"objective": loss, "train_accuracy": accuracy, "iterations": iterations}
