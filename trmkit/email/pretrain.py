"""Self-supervised pretraining on the whole mailbox: the `email-mlm` store and task.

A user has thousands of messages and labels few of them. `trmkit email pretrain STORE` (commands in
pretrain_command.py) first trains the e-mail TRM to fill in masked tokens of every message it may
read, labelled or not, then the classifier starts from those weights (`train.init_from`, train/init.py).

The store (`trmkit data email-mlm --from STORE --out DIR`) is a grid-shaped store built from an
e-mail store's rows, with the same vocabulary and layout (tokens, then the pooled bag of n-grams):

    inputs  the message's row with MASK_SHARE of its content tokens (not <cls>, <subject>, <from>,
            <body>, <tail>, pads) replaced by <unk> (byte-level BPE never writes it, so it is free to
            be the mask) and each bag id dropped to the pad id with probability BAG_DROP, so the bag
            cannot simply spell the masked words
    labels  the original token at each masked position, the pad id (the store's ignore label) elsewhere

Read: the source store's train/, unlabelled/ (`--keep-labels`) and val/ inputs; never a label
(labelled and unlabelled rows are masked alike) and never the test split. Each message gives
`--copies` rows with masks drawn by `default_rng([seed, copy, row])`; `--held-out` messages (their
first copy only) form this store's test split, so the run reports masked-token accuracy
(cell_accuracy) on messages it never trained on. The recursion is the paper's: each supervision
step refines the same answer, here the masked tokens.

A message with no content token cannot be masked: it is left out and counted.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trmkit.data.store import META_FILE, SplitArrays, check_new_store, open_split, read_meta, write_store
from trmkit.email.bag import BAG_FILE, Bag
from trmkit.email.fewlabels import UNLABELLED
from trmkit.email.tokenizer import SPECIALS, TOKENIZER_FILE, UNK_ID
from trmkit.email.task import email_task
from trmkit.tasks.base import Log
from trmkit.tasks.options import BuildOptions, option

NAME = "email-mlm"  # `trmkit data email-mlm`, and the store's meta.json "task"
MASK_ID = UNK_ID  # never written by the byte-level tokenizer: free to mean "masked"
MASK_SHARE = 0.3  # content tokens masked per row
BAG_DROP = 0.5  # bag ids dropped per row
COPIES = 8  # masked rows per message
HELD_OUT = 300  # messages (at most 5% of them) kept for the test split
READ_SPLITS = ("train", UNLABELLED, "val")  # never "test"


@dataclass(frozen=True, kw_only=True)
class PretrainOptions(BuildOptions):
    """`trmkit data email-mlm --from STORE`: the e-mail store read and how its rows are masked."""

    source: str = option(help="an e-mail store (`trmkit data email`): its train, unlabelled and val messages, "
                              "never test", flag="--from")
    copies: int = option(COPIES, f"masked rows per message (default {COPIES})")
    mask: float = option(MASK_SHARE, f"share of each row's content tokens masked (default {MASK_SHARE})")
    bag_drop: float = option(BAG_DROP, f"share of each row's bag ids dropped (default {BAG_DROP})")
    held_out: int = option(HELD_OUT, f"messages kept for the test split, at most 5%% of them (default {HELD_OUT})")


def run_build(opts: PretrainOptions, log: Log = print) -> Path:
    check_new_store(opts.out, opts.force)
    return build(Path(opts.source), opts.out, copies=opts.copies, mask_share=opts.mask,
                 bag_drop=opts.bag_drop, held_out=opts.held_out, seed=opts.seed, force=opts.force, log=log)


def build(source: Path, out: Path, copies: int = COPIES, mask_share: float = MASK_SHARE,
          bag_drop: float = BAG_DROP, held_out: int = HELD_OUT, seed: int = 0, force: bool = False,
          log: Log = print) -> Path:
    """Write the masked-token store of `source` (an e-mail store) at `out` (a store already there only with
    `force`); returns `out`."""
    check_settings(copies, mask_share, bag_drop, held_out)
    rows, meta, counts = read_rows(source)
    tokens = meta.seq_len - meta.part_positions  # the mixer's positions; the bag after them
    content = rows[:, :tokens] >= len(SPECIALS)
    usable = content.any(axis=1)
    rows = rows[usable]
    test_n = min(held_out, len(rows) // 20)
    order = np.random.default_rng([seed, 1 << 20]).permutation(len(rows))
    test_rows, train_rows = rows[np.sort(order[:test_n])], rows[np.sort(order[test_n:])]
    if not len(train_rows):
        raise ValueError(f"{source}: no message with a content token to mask ({counts}); build the e-mail store "
                         "from a mailbox with text")
    splits = {"train": masked_split(train_rows, tokens, copies, mask_share, bag_drop, seed),
              "test": masked_split(test_rows if test_n else train_rows[:1], tokens, 1, mask_share, bag_drop,
                                   seed + 1)}
    build_meta = {"from": str(source.resolve()), "read": counts, "no_content_token": int((~usable).sum()),
                  "messages": {"train": int(len(train_rows)), "test": int(test_n)}, "copies": copies,
                  "mask_share": mask_share, "bag_drop": bag_drop, "seed": seed, "mask_id": MASK_ID,
                  "source_fingerprint": fingerprint(source)}
    store_meta = {"task": NAME, "vocab": list(meta.vocab), "part_positions": meta.part_positions,
                  "answer_vocab": token_vocab(source, meta),
                  "pad_id": meta.pad_id, "ignore_label_id": meta.pad_id, "blank_id": None,
                  "num_puzzle_identifiers": 1, "source": str(source), "build": build_meta}
    write_store(out, splits, store_meta, force=force)
    log(f"wrote {out}: {len(train_rows)} messages x {copies} masked copies to train on, {test_n} held out "
        f"(read {', '.join(f'{k} {v}' for k, v in counts.items())}, never test, no label; "
        f"{build_meta['no_content_token']} without a content token left out); {mask_share:.0%} of each row's "
        f"content tokens masked, {bag_drop:.0%} of its bag ids dropped")
    return out


def check_settings(copies: int, mask_share: float, bag_drop: float, held_out: int) -> None:
    if copies < 1:
        raise ValueError(f"--copies {copies}: at least 1 masked row per message")
    if not 0.0 < mask_share <= 1.0:
        raise ValueError(f"--mask {mask_share}: a share in (0, 1] of each row's content tokens")
    if not 0.0 <= bag_drop < 1.0:
        raise ValueError(f"--bag-drop {bag_drop}: a share in [0, 1) of each row's bag ids")
    if held_out < 0:
        raise ValueError(f"--held-out {held_out}: 0 or more messages")


def read_rows(source: Path):
    """(every readable split's input rows stacked, the train split's meta, rows read per split)."""
    if not (source / "train").is_dir():
        raise ValueError(f"{source}: not an e-mail store (no train/ split); build one with `trmkit data email`")
    train = open_split(source / "train")
    if train.meta.task != "email":
        raise ValueError(f"{source}: a {train.meta.task} store; pretraining reads an e-mail store "
                         "(`trmkit data email`)")
    parts, counts = [], {}
    for name in READ_SPLITS:
        if (source / name).is_dir():
            split = train if name == "train" else open_split(source / name)
            parts.append(np.asarray(split.inputs))
            counts[name] = len(split)
    return np.concatenate(parts), train.meta, counts


def masked_split(rows: np.ndarray, tokens: int, copies: int, mask_share: float, bag_drop: float,
                 seed: int) -> SplitArrays:
    """`copies` masked rows per message, copy-major; one puzzle and one group per row."""
    n = copies * len(rows)
    inputs, labels = np.empty((n, rows.shape[1]), rows.dtype), np.empty((n, rows.shape[1]), rows.dtype)
    for c in range(copies):
        for r, row in enumerate(rows):
            inputs[c * len(rows) + r], labels[c * len(rows) + r] = mask_row(
                row, tokens, mask_share, bag_drop, np.random.default_rng([seed, c, r]))
    return SplitArrays(inputs=inputs, labels=labels, puzzle_identifiers=np.zeros(n, np.int64),
                       puzzle_indices=np.arange(n + 1), group_indices=np.arange(n + 1))


def mask_row(row: np.ndarray, tokens: int, mask_share: float, bag_drop: float, rng: np.random.Generator
             ) -> tuple[np.ndarray, np.ndarray]:
    """(masked input, labels): at least one content token masked; labels 0 (ignored) elsewhere."""
    x, y = row.copy(), np.zeros_like(row)
    content = np.flatnonzero(row[:tokens] >= len(SPECIALS))
    picked = rng.choice(content, size=max(1, round(mask_share * len(content))), replace=False)
    y[picked], x[picked] = row[picked], MASK_ID
    bag = np.arange(tokens, len(row))
    x[bag[rng.random(len(bag)) < bag_drop]] = 0
    return x, y


def token_vocab(source: Path, meta) -> int:
    """The tokenizer's ids (the bag's come after them): the only ids a masked token can be."""
    bag = source / "train" / BAG_FILE
    return Bag.load(bag).vocab_offset if bag.is_file() else meta.vocab_size


def fingerprint(store: Path) -> str:
    """A hash of the store's tokenizer and bag tables: a classifier reads the pretrained weights only
    with the same ones (the vocabulary's names alone do not show a bag's words)."""
    h = hashlib.sha256()
    for name in (TOKENIZER_FILE, BAG_FILE):
        path = store / "train" / name
        h.update(path.read_bytes() if path.is_file() else b"")
    return h.hexdigest()[:16]


def source_of(pretrain_store: Path) -> dict:
    """What an email-mlm store was built from (meta.json build)."""
    return read_meta(pretrain_store / "train" / META_FILE).build


TASK = email_task(NAME, "pretraining: masked tokens of every message of an e-mail store (labels not read)",
                  PretrainOptions, run_build, "pretrain", classify=False)
