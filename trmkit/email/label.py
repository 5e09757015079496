"""`trmkit email label STORE`: label the messages that help most, one answer saved at a time.

A store built with `trmkit data email --keep-labels K` holds K labelled messages per class in
train/ and the rest of the training mail, without labels, in unlabelled/ (email/fewlabels.py). This
module proposes which unlabelled message to label next and keeps the answers:

    rule     naive Bayes by EM (email/nb_em.py) fitted on the labelled messages, the answers so far and
             the unlabelled rest (seconds). Each unlabelled message scores (1 - margin) * density:
             margin = the gap between its two highest posteriors, the log-posteriors first divided by
             the message's count of bag ids (tempered: naive Bayes' log-odds grow with length); density
             = the cosine of its bag to the mean bag of the unlabelled messages. The highest score is
             proposed first: density-weighted uncertainty sampling, as McCallum and Nigam (1998) paired
             with EM. The model is fitted again after every REFIT_EVERY answers.
             Departure measured (docs/results.md, "E-mail"): the plain margin of the
             log-posteriors proposed short messages and mostly spam, and scored below random answers.
    answers  STORE/answers.jsonl (or --answers-jsonl PATH): one JSON line per message, {"key", "row",
             "label", "by", "time"}; label null is a skip (not proposed again, not used to train). The
             whole file is rewritten atomically (files.atomic_write) after every answer, so Ctrl-C
             loses none and a rerun proposes only messages without an answer. A message is named by
             `message_key` (a hash of its id and text), so the file stays right if rows move.

The unlabelled messages' text is in the store: messages.json keeps subject, sender and body of every
row and hides only "label" and "where" (a folder path spells the label). Writing the answers into a
store for the one trainer is email/label_store.py.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from trmkit.config import ConfigError
from trmkit.data.store import META_FILE
from trmkit.email.fewlabels import UNLABELLED
from trmkit.email.task import MESSAGES_FILE
from trmkit.files import atomic_write

ANSWERS_FILE = "answers.jsonl"  # default place of the answers: inside the store's folder
REFIT_EVERY = 5  # answers between two fits of the proposing model
RULE = ("the largest (1 - margin) x density first: margin, the gap between the top two posteriors of naive Bayes "
        "by EM (email/nb_em.py: the labelled messages, the answers so far and the unlabelled rest), tempered by "
        "the message's length; density, its bag's cosine to the mean bag")
SKIP, QUIT = "s", "q"

Log = Callable[[str], None]


def message_key(record: dict) -> str:
    """A message's name that survives a rebuild: a hash of its id, subject, sender and body (the store
    has no two messages of the same text: duplicates are removed before the split)."""
    text = json.dumps([record.get("message_id"), record["subject"], record["sender"], record["body"]])
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


@dataclass
class Pool:
    """A --keep-labels store read for labelling: the labelled bags and classes, the unlabelled bags and texts."""

    store: Path
    meta: dict  # train/meta.json
    classes: list[str]
    vocab: int
    labelled_ids: np.ndarray  # (n_l, bag) the bag ids of train/
    labelled_y: np.ndarray  # (n_l,) class ids
    unlabelled_ids: np.ndarray  # (n_u, bag)
    records: list[dict]  # unlabelled/messages.json
    keys: list[str]  # message_key of each unlabelled record

    def row_of(self) -> dict[str, int]:
        return {k: i for i, k in enumerate(self.keys)}


def open_pool(store: str | Path) -> Pool:
    """The store's labelled and unlabelled messages; a store without an unlabelled split or a bag is refused."""
    from trmkit.data.store import StoreError, open_split

    store = Path(store)
    try:
        train = open_split(store / "train")
    except StoreError as err:
        raise ConfigError(f"{store}: not a trmkit store ({err})") from err
    meta = json.loads((store / "train" / META_FILE).read_text())
    refuse_unless_few_labels(store, meta)
    bag = train.meta.part_positions  # StoreMeta maps the older name (pooled_positions)
    if not bag:
        raise ConfigError(f"{store}: its messages have no bag of n-grams, which the proposing model reads: rebuild "
                          "it with `trmkit data email ... --keep-labels K --bag 1024`")
    unlabelled = open_split(store / UNLABELLED)
    records = json.loads((store / UNLABELLED / MESSAGES_FILE).read_text())
    return Pool(store=store, meta=meta, classes=list(meta["classes"]), vocab=int(meta["vocab_size"]),
                labelled_ids=np.asarray(train.inputs)[:, -bag:],
                labelled_y=np.asarray(train.labels)[:, 0].astype(np.int64),
                unlabelled_ids=np.asarray(unlabelled.inputs)[:, -bag:], records=records,
                keys=[message_key(r) for r in records])


def refuse_unless_few_labels(store: Path, meta: dict) -> None:
    """Only a store with hidden labels has messages to label: say how to build one."""
    if meta.get("build", {}).get("keep_labels") and (store / UNLABELLED / META_FILE).is_file():
        return
    raise ConfigError(f"{store} was built without --keep-labels: every training message has its label and there "
                      "is nothing to label. Build a store that keeps K labels per class and hides the rest: "
                      f"`trmkit data email --source {meta.get('source', 'MAILBOX')} --keep-labels 10 --out NEW_STORE` "
                      "(with the same --label-from / --label-map / --split as this one), then "
                      "`trmkit email label NEW_STORE`")


# ---------------------------------------------------------------- answers on disk


def answers_path(store: Path, asked: str | None) -> Path:
    return Path(asked) if asked else Path(store) / ANSWERS_FILE


def load_answers(path: Path) -> list[dict]:
    """The saved answers, in the order given (a later answer for the same key replaces an earlier one)."""
    if not path.is_file():
        return []
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError as err:
                raise ConfigError(f"{path}:{n}: not a JSON line ({err}); fix or remove that line") from err
    return out


def answered(answers: list[dict]) -> dict[str, str | None]:
    """{key: label} of every answer (None: skipped); the last answer of a key wins."""
    return {a["key"]: a["label"] for a in answers}


def save_answer(path: Path, answers: list[dict], pool: Pool, row: int, label: str | None, by: str) -> dict:
    """Append one answer to `answers` and rewrite the whole file atomically before returning."""
    if label is not None and label not in pool.classes:
        raise ConfigError(f"answer {label!r}: give one of {', '.join(pool.classes)}")
    answer = {"key": pool.keys[row], "row": int(row), "label": label, "by": by, "time": round(time.time(), 3)}
    answers.append(answer)
    atomic_write(path, "".join(json.dumps(a, ensure_ascii=False) + "\n" for a in answers))
    return answer


def labelled_answers(pool: Pool, answers: list[dict], log: Log = print) -> dict[int, int]:
    """{unlabelled row: class id} of the answers that name a class; keys this store lacks are reported."""
    rows, out, foreign = pool.row_of(), {}, 0
    for key, label in answered(answers).items():
        if key not in rows:
            foreign += 1
        elif label in pool.classes:
            out[rows[key]] = pool.classes.index(label)
        elif label is not None:
            raise ConfigError(f"an answer for message {key} is {label!r}, which is not a class of {pool.store} "
                              f"({', '.join(pool.classes)}): correct or remove that line of the answers file")
    if foreign:
        log(f"label: {foreign} saved answer(s) name messages this store's unlabelled split does not hold: ignored")
    return out


# ---------------------------------------------------------------- proposals


@dataclass(frozen=True)
class Proposal:
    row: int  # in unlabelled/
    score: float  # (1 - margin) * density: the larger, the sooner proposed
    margin: float  # top-1 minus top-2 posterior, after tempering by the message's length
    guess: int  # the model's class


def fit_model(pool: Pool, given: dict[int, int], log: Log = print) -> tuple[torch.Tensor, torch.Tensor]:
    """NB-EM's (weight, bias) on train/ plus the answered rows as labelled, the other unlabelled rows as not."""
    from trmkit.email import nb_em
    from trmkit.email.linear_fit import multi_hot

    rows = np.fromiter(given, dtype=np.int64, count=len(given))
    rest = np.setdiff1d(np.arange(len(pool.records)), rows)
    ids = np.concatenate([pool.labelled_ids, pool.unlabelled_ids[rows]])
    y = torch.from_numpy(np.concatenate([pool.labelled_y, np.array([given[r] for r in rows], dtype=np.int64)]))
    return nb_em.fit(multi_hot(ids, pool.vocab), y, multi_hot(pool.unlabelled_ids[rest], pool.vocab),
                     len(pool.classes), pool.vocab, log)


def informativeness(pool: Pool, weight: torch.Tensor, bias: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(score, margin, guess) of every unlabelled message (see the module docstring's rule).

    Tempering: naive Bayes adds one log-ratio per id, so its log-odds grow with a message's length and a
    short message always looks unsure; divided by the message's id count they compare across lengths.
    Density: the cosine of the message's (L2-normalised, binary) bag to the mean of all of them, so an
    outlier is not proposed before a message like many others."""
    from trmkit.email.linear_fit import multi_hot

    x = multi_hot(pool.unlabelled_ids, pool.vocab)  # (n_u, vocab)
    ids = torch.from_numpy((pool.unlabelled_ids != 0).sum(1).clip(1, None)).float()  # (n_u,)
    posterior = torch.softmax((torch.sparse.mm(x, weight) + bias) / ids[:, None], dim=1)  # (n_u, C)
    top = posterior.topk(2, dim=1)
    margin = top.values[:, 0] - top.values[:, 1]
    unit = torch.sparse_coo_tensor(x.indices(), x.values() / ids[x.indices()[0]].sqrt(), x.shape,
                                   check_invariants=True).coalesce()
    centroid = torch.sparse.sum(unit, 0).to_dense() / max(1, x.shape[0])  # (vocab,)
    density = torch.sparse.mm(unit, centroid[:, None])[:, 0]
    return (1 - margin) * density, margin, top.indices[:, 0]


def propose(pool: Pool, answers: list[dict], count: int, log: Log = print) -> list[Proposal]:
    """The `count` unanswered (and unskipped) unlabelled messages of the highest score, highest first."""
    score, margin, guess = informativeness(pool, *fit_model(pool, labelled_answers(pool, answers, log), log))
    open_rows = unanswered_rows(pool, answers)
    order = open_rows[np.lexsort((open_rows, -score.numpy()[open_rows]))][:count]
    return [Proposal(int(r), float(score[r]), float(margin[r]), int(guess[r])) for r in order]


def random_rows(pool: Pool, answers: list[dict], count: int, seed: int | list[int]) -> list[int]:
    """`count` unanswered rows drawn at random (the benchmark's comparison)."""
    return np.random.default_rng(seed).permutation(unanswered_rows(pool, answers))[:count].tolist()


def unanswered_rows(pool: Pool, answers: list[dict]) -> np.ndarray:
    """The unlabelled rows with no answer and no skip, in row order."""
    done = answered(answers)
    return np.array([i for i, k in enumerate(pool.keys) if k not in done], dtype=np.int64)
