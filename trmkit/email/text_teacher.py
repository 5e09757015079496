"""The few-label guard's logistic regression, taught by the messages' whole text.

The guard's alternative to naive Bayes by EM (email/guard.py) is a logistic regression of the bag. Fitted
on the K labels alone it scored 0.832 on the mailing lists where TF-IDF + LR on the same labels, the rival,
scored 0.866 (docs/results.md, "E-mail"): the bag holds each n-gram once (no term frequency), and its text is
the tokenizer's, where URLs and addresses are markers (a list's name sits in them). The rival reads the raw
text with sublinear term frequencies. The TRM cannot read that text at prediction time, but the fit can:

    teacher  TF-IDF + LR fitted on the labelled messages' text, as the rival is (word 1-2-grams of the
             lower-cased subject, sender and body; in MIN_DF+ labelled messages; sublinear tf x smooth idf,
             each row L2-normalised; the rival's C); it labels every unlabelled message (its argmax)
    student  the bag's logistic regression fitted on the labelled messages (weight 1 each) and the unlabelled
             ones with the teacher's labels (UNLABELLED_WEIGHT times the labelled ones' weight in all)

Only the student is kept: the bag's linear buffers (email.input_linear) hold it, and prediction reads the
bag alone, as before. The guard still cross-fits the LR on the labels alone (email/guard.py); the teacher
works once it is chosen. Measured offline (the fitted linear model alone, 5 draws, 10 labels per class, minus
the rival; `python benchmarks/email_teacher.py`): lists -0.034 (labelled only) -> -0.006; SpamAssassin +0.013 ->
+0.042; Turkish +0.014 -> +0.027.
End to end (the e-mail preset, where the guard chose LR on all 5 lists draws): lists -0.035 -> -0.004.
Where the guard keeps EM, EM starts from the classes this LR gives the unlabelled messages
(email/linear_fit.py `_em_start`): end to end SpamAssassin +0.091 -> +0.110, Turkish +0.029 -> +0.056.
UNLABELLED_WEIGHT 4 was chosen on SpamAssassin and Turkish (16 and 64 scored lower on both; on the lists 16
scored +0.008). The words are found as the bag finds them (bag.py `ngrams`, the "split" rule); the rival
takes scikit-learn's default pattern, which also keeps underscores.

Read: the labelled and unlabelled messages' text (train/ and unlabelled/ messages.json); no label but the
K labelled ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from trmkit.email.bag import ngrams, smooth_idf

FitLR = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # (x, y, w)
MIN_DF = 2  # the rival's min_df: an n-gram of fewer labelled messages is no feature
UNLABELLED_WEIGHT = 4.0  # the unlabelled messages' total weight, in units of the labelled ones' (chosen above)


@dataclass(frozen=True)
class TextCounts:
    """Each message's counts of the n-grams found in MIN_DF+ labelled messages (no other can be a feature
    of any fold's teacher): one COO triple per side, columns numbering those n-grams."""

    labelled: tuple[np.ndarray, np.ndarray, np.ndarray]  # (rows, columns, counts)
    unlabelled: tuple[np.ndarray, np.ndarray, np.ndarray]
    columns: int
    labelled_rows: int  # messages read (a message with no such n-gram has no entry)
    unlabelled_rows: int

    @classmethod
    def of(cls, labelled: list[str], unlabelled: list[str]) -> "TextCounts":
        bags = [ngrams(text.lower()) for text in labelled]
        df: dict[str, int] = {}
        for bag in bags:
            for gram in bag:
                df[gram] = df.get(gram, 0) + 1
        index = {gram: i for i, gram in enumerate(sorted(g for g, n in df.items() if n >= MIN_DF))}
        return cls(_triples(bags, index), _triples((ngrams(text.lower()) for text in unlabelled), index),
                   len(index), len(labelled), len(unlabelled))

    def features(self, fit_rows: np.ndarray, unlabelled_rows: np.ndarray
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """(labelled fit rows' features, the given unlabelled rows' features): the vectorizer fitted on the
        labelled rows `fit_rows` (its vocabulary and idf theirs alone, as the rival's), sparse float32."""
        rows, cols, counts = self.labelled
        fit = np.isin(rows, fit_rows)
        df = np.bincount(cols[fit], minlength=self.columns)
        kept = df >= MIN_DF
        idf = np.where(kept, smooth_idf(len(fit_rows), df), 0.0)
        return (_tfidf(self.labelled, self.labelled_rows, fit_rows, idf),
                _tfidf(self.unlabelled, self.unlabelled_rows, unlabelled_rows, idf))


def _triples(bags, index: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows, cols, counts = [], [], []
    for r, bag in enumerate(bags):
        for gram, n in bag.items():
            col = index.get(gram)
            if col is not None:
                rows.append(r)
                cols.append(col)
                counts.append(n)
    return np.array(rows, np.int64), np.array(cols, np.int64), np.array(counts, np.float64)


def _tfidf(triple: tuple[np.ndarray, np.ndarray, np.ndarray], total: int, chosen: np.ndarray, idf: np.ndarray
           ) -> torch.Tensor:
    """(len(chosen), columns): of one side's `total` messages (its (rows, columns, counts)), the chosen rows
    in their order, (1 + log tf) x idf, rows L2-normalised."""
    rows, cols, counts = triple
    position = np.full(total, -1, np.int64)
    position[chosen] = np.arange(len(chosen))
    at = position[rows]
    keep = (at >= 0) & (idf[cols] > 0)
    r, c = at[keep], cols[keep]
    v = (1 + np.log(counts[keep])) * idf[c]
    norm = np.sqrt(np.bincount(r, weights=v * v, minlength=len(chosen)))
    v = v / norm[r]
    return torch.sparse_coo_tensor(torch.from_numpy(np.stack([r, c])), torch.from_numpy(v).float(),
                                   (len(chosen), len(idf)), check_invariants=True).coalesce()


@dataclass
class Distilled:
    """The logistic regression of the bag the guard chose: on the labelled rows `x_l`, plus the unlabelled rows
    `x_u` labelled by the text teacher (`text`; None: no text, the labelled rows alone)."""

    x_l: torch.Tensor  # (labelled, vocab) the bag's features the LR reads
    x_u: torch.Tensor  # (unlabelled, vocab)
    text: TextCounts | None
    fit: FitLR  # (x, y, w) -> (weight, bias) at the rival's C: the student's fit and the teacher's
    unlabelled_weight: float = UNLABELLED_WEIGHT  # the taught rows' total weight, in units of the labelled ones'

    def fitted(self, kept: torch.Tensor, y_kept: torch.Tensor, unlabelled: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight, bias) from the labelled rows `kept` (labels y_kept) and the unlabelled rows `unlabelled` the
        teacher knows a word of (one it knows none of would get the labelled majority from its bias alone)."""
        x, y, w = _rows(self.x_l, kept), y_kept, torch.ones(len(kept))
        if self.text is not None and self.text.columns and len(unlabelled):
            taught, known = self.teach(kept, y_kept, unlabelled)
            rows = unlabelled[known]
            if len(rows):
                share = self.unlabelled_weight * len(kept) / len(rows)
                x = torch.cat([x, _rows(self.x_u, rows)]).coalesce()
                y, w = torch.cat([y, taught[known]]), torch.cat([w, torch.full((len(rows),), share)])
        return self.fit(x, y, w)

    def teach(self, kept: torch.Tensor, y_kept: torch.Tensor, unlabelled: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """(len(unlabelled),) the teacher's class for each unlabelled row, fitted on the labelled rows kept, and
        (len(unlabelled),) bool: whether the row holds a word of the teacher's vocabulary."""
        t_l, t_u = self.text.features(kept.numpy(), unlabelled.numpy())
        weight, bias = self.fit(t_l, y_kept, torch.ones(len(kept)))
        known = torch.zeros(len(unlabelled), dtype=torch.bool)
        known[t_u.indices()[0]] = True
        return (torch.sparse.mm(t_u, weight) + bias).argmax(1), known


def _rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return x.index_select(0, index).coalesce()


def read(store: str | Path) -> TextCounts | None:
    """The text counts of a few-label store's labelled and unlabelled messages; None where it has no text."""
    from trmkit.email.baseline import split_texts
    from trmkit.email.fewlabels import UNLABELLED
    from trmkit.email.task import MESSAGES_FILE

    store = Path(store)
    if not all((store / split / MESSAGES_FILE).is_file() for split in ("train", UNLABELLED)):
        return None
    return TextCounts.of(split_texts(store, "train"), split_texts(store, UNLABELLED))
