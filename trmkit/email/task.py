"""The e-mail task: a mailbox in, a classify store out (docs/email.md), and the `Task` that declares it.

`trmkit data email --source PATH --out DIR` reads real mail (a folder of .eml files sorted
into sub-folders, a Maildir, mbox or mbox.gz, CSV, JSONL), maps labels (--label-from,
--label-map), removes exact and near duplicates before the split (so no duplicate crosses
train/val/test), splits stratified (or by date), trains the tokenizer on the training split
only, and writes a store of the classify shape (docs/tasks.md):

    inputs (N, L)  token ids: <cls> <subject> ... <from> ... <body> ... [<tail> ...] <pad>...
    labels (N, L)  the class id at position 0, ignore_label_id (= the number of classes) elsewhere
    train/ val/ test/  val picks the best checkpoint and fits the calibration; test is reported
    sidecars: train/tokenizer.json, */messages.json (where each row came from, and its text for
              `trmkit email baseline`), train/dataset_report.json

The task's scorer is the generic classify scorer (tasks/classify/scorer.py); its plots (confusion
matrix, reliability diagram: plots.py) are what `trmkit report` adds for an e-mail run.

Nothing is dropped silently: every message that could not be read, had no label, or was a
duplicate is counted in the report printed before training and kept in meta.json's "build".
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from trmkit.data.imports import ImportReport
from trmkit.data.store import Split, SplitArrays, check_new_store, write_store
from trmkit.email.bag import BAG_FILE, Bag, bag_text
from trmkit.email.encode import clip_body, encode_messages, message_fields
from trmkit.email.fewlabels import UNLABELLED, few_labels_report, keep_labels
from trmkit.email.mail import Message
from trmkit.email.mail.mailbox import FORMATS
from trmkit.email.prepare import GROUP_SPLITS, group_key
from trmkit.email.tokenizer import TOKENIZER_FILE
from trmkit.tasks.base import Log, Task
from trmkit.tasks.classify.metrics import SMALL_CLASS
from trmkit.tasks.options import BuildOptions, OptionsT, option

if TYPE_CHECKING:
    import torch

    from trmkit.config import Config
    from trmkit.tasks.classify.scorer import ClassifyScorer

NAME = "email"  # `trmkit data email`, and the store's meta.json "task"
SPLITS = ("train", "val", "test")
MESSAGES_FILE = "messages.json"  # sidecar of every split: message_record per row
DATASET_REPORT_FILE = "dataset_report.json"  # sidecar of train/: dataset_report


@dataclass(frozen=True, kw_only=True)
class EmailOptions(BuildOptions):
    """`trmkit data email`: the mailbox, its labels, the split, the tokenizer and the bag."""

    source: str = option(help="a mailbox: .eml folder(s), Maildir, mbox(.gz), CSV or JSONL")
    format: str = option("auto", "source format (auto: detected)", choices=FORMATS)
    label_from: str = option("folder", "folder | gmail (X-Gmail-Labels) | header:NAME | column:NAME | "
                                       "filename:REGEX (the regex's first group in each file's name) (default: "
                                       "folder; for CSV/JSONL the label column)")
    min_class_count: int = option(0, "fold classes with fewer than N messages (after de-duplication) into "
                                     "--other-class, reported (default 0: keep every class)", metavar="N")
    other_class: str = option("Other", "the class rare classes fold into (default Other)")
    label_map: str | None = option(None, "YAML mapping raw labels/headers onto categories, e.g. "
                                         "configs/email-taxonomy.yaml")
    text_column: str | None = option(None, "CSV/JSONL: the message text column")
    label_column: str | None = option(None, "CSV/JSONL: the label column")
    encoding: str | None = option(None, "CSV/JSONL: the file's encoding (default UTF-8, BOM or not)")
    seq_len: int = option(32, "tokens per message (subject, sender, the body's start); 32 with --bag 1024 is what "
                              "configs/email-fast.yaml reads; configs/email-laptop.yaml reads 128 tokens and no bag")
    vocab_size: int = option(8192, "tokenizer vocabulary, trained on train only")
    tail: int = option(0, "tokens of the body's end kept after <tail> when cut")
    bag: int = option(1024, "positions for the message's bag of word n-grams after the tokens (the whole message, "
                            "by tf-idf; 0 = none; email/bag.py)")
    bag_buckets: int = option(32768, "ids of the bag: its most frequent n-grams (in 2+ training messages), or hash "
                                     "buckets")
    bag_hashed: bool = option(False, "hash every n-gram into --bag-buckets ids (as stores built before 2026-11-28) "
                                     "instead of numbering the most frequent ones")
    val_fraction: float = option(0.1, "share for validation (best, calibration)")
    test_fraction: float = option(0.2, "share held out for test; 1 puts everything in test")
    keep_labels: int = option(0, "keep the labels of K training messages per class (drawn with --seed, after the "
                                 "split, so the test split does not depend on K); the rest of train and the "
                                 "validation split go to an 'unlabelled/' split without labels (default 0: every "
                                 "label; email/fewlabels.py)", metavar="K")
    split: str = option("stratified", "stratified by class with --seed; by the Date header (oldest train, newest "
                                      "test); or whole threads (subject without Re:/Fwd:) or whole senders to one "
                                      "split each", choices=("stratified", "time", "thread", "sender"))
    test_where: str | None = option(None, "the test split is every message whose source inside --source (its "
                                          "path below it, or FILE:N in an mbox/CSV) matches REGEX, e.g. "
                                          "--test-where=-2/ for another mailbox's folders; --split divides the "
                                          "rest into train/val", metavar="REGEX")
    near_duplicates: float = option(0.9, "Jaccard similarity above which two messages are one (0: exact "
                                         "duplicates only)")
    max_message_bytes: int | None = option(None, "larger messages are truncated")


def run_build(args: EmailOptions, log: Log = print) -> Path:
    """Read, label, de-duplicate, split, tokenize and write the store."""
    check_new_store(args.out, args.force)
    t0 = time.perf_counter()
    report = ImportReport(source=str(args.source), unit="messages")
    messages = read_labelled(args, report, log)
    report.seconds = time.perf_counter() - t0
    for line in report.summary_lines():
        log(line)
    if not messages:
        from trmkit.email.mail.records import NO_LABEL_COLUMN

        columns = [n.split(": ", 1)[1] for n in report.notes if NO_LABEL_COLUMN in n]
        raise ValueError(f"{args.source}: no labelled message was read ({report.skipped} skipped); "
                         + (columns[0] if columns else
                            "check --format and --label-from (the skipped reasons are above)"))
    refuse_one_class(messages, report, args)
    kept, dedup = remove_duplicates(messages, args.near_duplicates, args.seed)
    warn_if_folds(args, kept, log)
    folded = fold_rare_classes(kept, args.min_class_count, args.other_class, log)
    classes = sorted({m.label for m in kept})
    rows = split_messages(kept, args, log)
    few = keep_few_labels(kept, rows, args.keep_labels, args.seed) if args.keep_labels else None
    texts = [kept[i] for name in ("train", UNLABELLED) for i in rows.get(name, ())]  # no label is read
    tok = train_tokenizer(args, texts, log)
    bag = fit_bag(args, texts, tok, log)
    splits, extras = encode_splits(kept, rows, classes, tok, args, bag)
    data_report = dataset_report(kept, messages, rows, dedup, splits, args, few)
    for line in data_report["lines"]:
        log(line)
    meta = store_meta(args, tok, classes, report, data_report, bag)
    meta["build"]["folded_classes"] = folded
    meta["build"]["keep_labels"] = few
    extras["train"][TOKENIZER_FILE] = json.loads(tok.to_json())
    if bag is not None:
        extras["train"][BAG_FILE] = bag.to_dict()
    extras["train"][DATASET_REPORT_FILE] = data_report
    write_store(args.out, splits, meta, extras=extras, force=args.force)
    log(f"wrote {args.out}: " + ", ".join(f"{k} {len(rows[k])}" for k in rows)
        + f" messages, {len(classes)} classes ({', '.join(classes)}), seq_len {args.seq_len}, "
          f"vocabulary {tok.vocab_size}")
    return Path(args.out)


def keep_few_labels(kept: list[Message], rows: dict[str, np.ndarray], k: int, seed: int) -> dict:
    """--keep-labels K: rows becomes train (K per class), test, unlabelled (email/fewlabels.py), in place;
    returns what the store records of it."""
    labels = [m.label for m in kept]
    folded_val = len(rows["val"])
    rows.update(keep_labels(labels, rows, k, seed))
    return few_labels_report(labels, rows, k, folded_val)


def refuse_one_class(messages: list[Message], report: ImportReport, args: EmailOptions) -> None:
    """A classifier needs two classes: a store with one is refused before any work, with its counts."""
    counts = Counter(m.label for m in messages)
    if len(counts) >= 2:
        return
    raise ValueError(f"{args.source}: every labelled message has the label {next(iter(counts))!r} "
                     f"({len(messages)} messages; {report.skipped} skipped, their reasons above): a classifier needs "
                     "two classes or more. Check --label-from (a pattern must capture a label for every class: one "
                     "such as 'filename:^(spmsg)?' captures nothing for the other files, which are then skipped as "
                     "'no label'), --label-column or --label-map")


def read_labelled(args: EmailOptions, report: ImportReport, log: Log) -> list[Message]:
    """Every readable message with a (mapped) label; the rest counted in the report."""
    from trmkit.email import labels as labels_mod
    from trmkit.email.mail.mailbox import iter_messages

    label_map = labels_mod.load_label_map(args.label_map) if args.label_map else None
    if label_map is not None:
        log(f"labels: {args.label_map} maps raw labels onto {', '.join(label_map.categories)}")
    kwargs: dict[str, Any] = dict(text_column=args.text_column, label_column=args.label_column,
                                  encoding=args.encoding)
    if args.max_message_bytes:
        kwargs["max_bytes"] = args.max_message_bytes
    out = []
    for msg in iter_messages(args.source, args.format, args.label_from, report, **kwargs):
        label = labels_mod.apply(label_map, msg) if label_map is not None else msg.label
        if not label:
            reason = "label not mapped" if label_map is not None and msg.label else "no label"
            report.skip(msg.where, reason, f"raw label {msg.label!r} (--label-from {args.label_from}"
                        + (f", --label-map {args.label_map})" if label_map is not None else ")"))
            report.accepted -= 1
            continue
        msg.label = label
        msg.body = clip_body(msg.body)  # as predict reads it (encode.py); the text messages.json keeps
        out.append(msg)
    return out


FOLD_NAMES = re.compile(r"(part|fold|split|cv|chunk)[-_ ]?\d+", re.IGNORECASE)


def warn_if_folds(args: EmailOptions, kept: list[Message], log: Log) -> None:
    """Folders named part1, fold2, ... are cross-validation parts, not classes: say so (they are kept)."""
    names = sorted({m.label for m in kept})
    if args.label_from == "folder" and len(names) > 1 and all(FOLD_NAMES.fullmatch(n) for n in names):
        log(f"labels: WARNING: the folder names {', '.join(names[:4])}{' ...' if len(names) > 4 else ''} look "
            "like cross-validation parts, not classes; if the class is in the file names (e.g. Ling-Spam's "
            "spmsg*), pass --label-from 'filename:REGEX', or a --label-map")


def fold_rare_classes(kept: list[Message], min_count: int, other: str, log: Log) -> dict[str, int]:
    """--min-class-count N: classes with fewer than N messages become `other`; {class: count} folded."""
    if min_count <= 0:
        return {}
    counts = Counter(m.label for m in kept)
    rare = {c: n for c, n in sorted(counts.items()) if n < min_count and c != other}
    if rare:
        for m in kept:
            if m.label in rare:
                m.label = other
        log(f"labels: --min-class-count {min_count}: {len(rare)} class(es) folded into {other!r} ("
            + ", ".join(f"{c} {n}" for c, n in rare.items()) + f"); {other!r} now has "
            f"{sum(m.label == other for m in kept)} messages")
    return rare


def remove_duplicates(messages: list[Message], near: float, seed: int) -> tuple[list[Message], Any]:
    from trmkit.email.dedup import deduplicate
    from trmkit.email.prepare import message_text

    texts = [message_text(m) for m in messages]
    dedup = deduplicate(texts, [m.label for m in messages], near_threshold=near if near > 0 else 1.01, seed=seed)
    return [messages[i] for i in dedup.keep], dedup


def split_messages(kept: list[Message], args: EmailOptions, log: Log) -> dict[str, np.ndarray]:
    from trmkit.email.prepare import split

    undated = [m.where for m in kept if m.date is None] if args.split == "time" else []
    if undated:
        raise ValueError(f"--split time needs every message's Date header; {len(undated)} of "
                         f"{len(kept)} have none or an unreadable one (first: {undated[0]}): give them a Date, or "
                         "use --split stratified / thread / sender")
    if getattr(args, "test_where", None):
        train, val, test = _split_where(kept, args, log)
    else:
        groups = [group_key(m, args.split) for m in kept] if args.split in GROUP_SPLITS else None
        train, val, test = split([m.label for m in kept], args.val_fraction, args.test_fraction, args.seed,
                                 dates=[m.date for m in kept], by=args.split, groups=groups)
    log(f"split: {args.split} (seed {args.seed}): train {len(train)}, val {len(val)}, test {len(test)}")
    rows = {"train": train, "val": val, "test": test}
    check_classes_per_split(kept, rows, log)
    return rows


def inside_source(where: str, source) -> str:
    """A message's `where` without the --source path before it, so that --test-where reads the mailbox's own
    folders (`easy-ham-2/00001.abc`, `inbox.mbox:12`) and never the directories the mailbox sits in."""
    root = str(source).rstrip(os.sep)
    if where.startswith(root + os.sep):
        return where[len(root) + 1:]
    if where.startswith(root):  # the source is one file: FILE or FILE:N
        return os.path.basename(root) + where[len(root):]
    return where


def _split_where(kept: list[Message], args: EmailOptions, log: Log) -> tuple[np.ndarray, ...]:
    """--test-where: test is every message whose path inside --source matches the regex (e.g. another mailbox's folder);
    --split divides the others into train and val (no test share of their own)."""
    import re

    from trmkit.email.prepare import split

    try:
        pattern = re.compile(args.test_where)
    except re.error as e:
        raise ValueError(f"--test-where {args.test_where!r} is not a regular expression: {e}") from None
    sources = [inside_source(m.where, args.source) for m in kept]
    inside = np.array([bool(pattern.search(where)) for where in sources])
    if inside.all() or not inside.any():
        raise ValueError(f"--test-where {args.test_where!r} matches {int(inside.sum())} of {len(kept)} messages' "
                         f"sources (e.g. {sources[0]}): it must pick some messages for test and leave others")
    rest = [m for m, t in zip(kept, inside) if not t]
    groups = [group_key(m, args.split) for m in rest] if args.split in GROUP_SPLITS else None
    train, val, _ = split([m.label for m in rest], args.val_fraction, 0.0, args.seed, dates=[m.date for m in rest],
                          by=args.split, groups=groups)
    index = np.flatnonzero(~inside)
    log(f"split: --test-where {args.test_where!r}: {int(inside.sum())} messages to test, "
        f"the other {len(rest)} split {args.split} into train and val")
    return index[train], index[val], np.flatnonzero(inside)


def check_classes_per_split(kept: list[Message], rows: dict[str, np.ndarray], log: Log) -> None:
    """A class with no training message cannot be learned (an error); one missing from val or test, or
    with under 20 test messages, is measured badly (a warning)."""
    classes = sorted({m.label for m in kept})
    have = {k: Counter(kept[i].label for i in r) for k, r in rows.items()}
    untrained = [c for c in classes if not have["train"][c]]
    if untrained:
        raise ValueError(f"classes {untrained} have no training message in this split; use --split stratified, "
                         "another --seed, or fold them with --min-class-count")
    for name in ("val", "test"):
        absent = [c for c in classes if len(rows[name]) and not have[name][c]]
        if absent:
            log(f"split: WARNING: no {name} message of {', '.join(absent)}")
    small = [f"{c} ({have['test'][c]})" for c in classes if 0 < have["test"][c] < SMALL_CLASS]
    if small:
        log(f"split: WARNING: fewer than {SMALL_CLASS} test messages in {', '.join(small)}: their F1 is noise-level")


def leakage(kept: list[Message], rows: dict[str, np.ndarray]) -> dict:
    """Test messages that share a thread (subject without Re:/Fwd:) or a sender with a training one."""
    n = len(rows["test"])
    out = {"test": n}
    for by in GROUP_SPLITS:
        seen = {group_key(kept[i], by) for i in rows["train"]} - {""}
        out[f"same_{by}_as_train"] = sum(group_key(kept[i], by) in seen for i in rows["test"])
    return out


def train_tokenizer(args: EmailOptions, train: list[Message], log: Log):
    from trmkit.email.prepare import message_text
    from trmkit.email.tokenizer import EmailTokenizer

    t0 = time.perf_counter()
    tok = EmailTokenizer.train((message_text(m) for m in train), vocab_size=args.vocab_size)
    log(f"tokenizer: byte-level BPE, {tok.vocab_size} tokens, trained on the {len(train)} training messages "
        f"only ({time.perf_counter() - t0:.1f} s)")
    return tok


def fit_bag(args: EmailOptions, train: list[Message], tok, log: Log) -> Bag | None:
    """--bag N: the n-gram bag's idf from the training split only."""
    if not args.bag:
        return None
    t0 = time.perf_counter()
    bag = Bag.fit((bag_text(*f) for f in message_fields(train)), args.bag, args.bag_buckets,
                  tok.vocab_size, hashed=args.bag_hashed)
    log(f"bag: {args.bag} positions per message of {bag.describe()}, idf from the {len(train)} training "
        f"messages ({time.perf_counter() - t0:.1f} s)")
    return bag


def encode_splits(kept: list[Message], rows: dict[str, np.ndarray], classes: list[str], tok,
                  args: EmailOptions, bag: Bag | None = None) -> tuple[dict[str, SplitArrays], dict[str, dict]]:
    index = {c: i for i, c in enumerate(classes)}
    ignore = len(classes)
    splits, extras = {}, {}
    for name, idx in rows.items():
        msgs = [kept[i] for i in idx]
        if not msgs:
            continue
        hidden = name == UNLABELLED  # no label, and no path (a folder spells the folder label)
        inputs = encode_messages(tok, bag, msgs, args.seq_len, args.tail)
        labels = np.full(inputs.shape, ignore, dtype=np.int64)
        if not hidden:
            labels[:, 0] = [index[m.label] for m in msgs]
        n = len(msgs)
        splits[name] = SplitArrays(inputs=inputs, labels=labels, puzzle_identifiers=np.zeros(n, dtype=np.int64),
                                   puzzle_indices=np.arange(n + 1), group_indices=np.arange(n + 1))
        records = [message_record(m) for m in msgs]
        if hidden:
            records = [{**r, "label": None, "where": None} for r in records]
        extras[name] = {MESSAGES_FILE: records}
    return splits, extras


def message_record(m: Message) -> dict:
    """Where a row came from, and the text the baseline reads (the same fields the TRM sees)."""
    return {"where": m.where, "message_id": m.message_id, "label": m.label, "date": m.date,
            "subject": m.subject, "sender": m.sender, "body": m.body}


def dataset_report(kept, messages, rows, dedup, splits, args, few: dict | None = None) -> dict:
    from trmkit.email.fewlabels import hide_unlabelled_classes, report_line
    from trmkit.email.prepare import dataset_report as build_report
    from trmkit.email.prepare import detect_language, message_text, report_lines

    languages = [detect_language(message_text(m)) for m in kept]
    labels = [m.label for m in kept]
    data = build_report(messages=kept, labels=labels, rows={k: rows[k] for k in SPLITS}, dedup=dedup,
                        languages=languages, total_read=len(messages), split_by=args.split, seed=args.seed,
                        token_lengths={k: (np.asarray(v.inputs)[:, :args.seq_len] != 0).sum(1)
                                       for k, v in splits.items()})
    if few is not None:
        hide_unlabelled_classes(data, labels, rows)
        data["keep_labels"] = few
    data["leakage"] = leakage(kept, rows)
    data["lines"] = (report_lines(data) + leakage_lines(data["leakage"], args.split)
                     + ([report_line(few)] if few is not None else []))
    return data


def leakage_lines(leak: dict, split_by: str) -> list[str]:
    n = max(leak["test"], 1)
    return [f"train/test twins ({split_by} split): {leak['same_thread_as_train']} test messages "
            f"({leak['same_thread_as_train'] / n:.1%}) share a thread with a training one, "
            f"{leak['same_sender_as_train']} ({leak['same_sender_as_train'] / n:.1%}) a sender"
            + ("; --split thread or --split sender keeps them apart" if split_by not in GROUP_SPLITS
               else "")]


def store_meta(args, tok, classes, report: ImportReport, data_report: dict, bag: Bag | None = None) -> dict:
    return {
        "task": NAME,
        "vocab": tok.vocab() + (bag.vocab() if bag is not None else []),
        "part_positions": bag.positions if bag is not None else 0,  # read by the model's bag part (parts.py)
        "pad_id": tok.pad_id,
        "ignore_label_id": len(classes),
        "blank_id": None,
        "num_puzzle_identifiers": 1,
        "classes": classes,
        "source": str(args.source),
        "build": {"import": report.to_dict(), "seq_len": args.seq_len, "tail": args.tail,
                  "bag": args.bag, "bag_buckets": bag.buckets if bag else 0,
                  "bag_hashed": bool(bag is not None and bag.words is None),
                  "label_from": args.label_from, "label_map": args.label_map, "split": args.split,
                  "seed": args.seed, "val_fraction": args.val_fraction, "test_fraction": args.test_fraction,
                  "near_duplicates": args.near_duplicates, "test_where": getattr(args, "test_where", None),
                  "dataset": {k: v for k, v in data_report.items() if k != "lines"}},
    }


def scorer(split: Split) -> ClassifyScorer:
    """Macro-F1, per-class metrics and calibration data of a classify split (tasks/classify/scorer.py)."""
    from trmkit.email.guard import FewLabelScorer  # ClassifyScorer, and the rival on a --keep-labels store

    return FewLabelScorer(split, list(split.meta.classes))


def plots(run_dir: Path, out_dir: Path) -> tuple[list[Path], str]:
    """The confusion matrix, reliability diagram and Markdown section of an e-mail run (plots.py)."""
    from trmkit.email.plots import classification_plots  # here: listing the tasks must stay light (no torch)

    return classification_plots(run_dir, out_dir)


def before_training(model: torch.nn.Module, train: Split, class_weights: torch.Tensor | None, log: Log) -> None:
    """Fit the bag's linear model (email.input_linear) to the training split: email/linear_fit.py."""
    from trmkit.email.linear_fit import before_training as fit  # here: listing the tasks must stay light (no torch)

    fit(model, train, class_weights, log)


def model_parts(cfg: Config) -> tuple:
    """The e-mail model's part for a resolved config: the bag's reader (email/parts.py; it reads the `email:`
    section, so it is given the whole config), imported when a model is built: listing the tasks loads no torch."""
    from trmkit.email.parts import bag_parts

    return bag_parts(cfg)


model_parts.reads_config = True  # type: ignore[attr-defined]  (model/parts.py build_parts)


def email_task(name: str, summary: str, options: type[OptionsT], build: Callable[[OptionsT, Log], object],
               preset: str, *, classify: bool) -> Task[OptionsT]:
    """An e-mail task, the one way both are declared: the classifier (classify=True: a classify store, scored by
    macro-F1, with its report plots and the bag's linear model fitted before training) or a task on the same
    message rows without a class (the masked-token pretraining, email/pretrain.py: a grid store, generic metrics).
    Both read the bag through the model's part (email/parts.py). Its preset is configs/email-PRESET.yaml."""
    hooks = dict(scorer=scorer, plots=plots, before_training=before_training) if classify else {}
    return Task(name=name, shape="classify" if classify else "grid", summary=f"e-mail {summary}", options=options,
                build=build, presets={preset: f"configs/email-{preset}.yaml"}, model_parts=model_parts,
                sections=("email",), **hooks)


TASK = email_task(NAME, "classification: .eml folders, Maildir, mbox(.gz), CSV, JSONL -> categories",
                  EmailOptions, run_build, "laptop", classify=True)
