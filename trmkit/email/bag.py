"""A message's bag of n-grams: the whole message, in a few fixed positions.

The token sequence sees the first seq_len tokens of a message (subject, sender, body head and
tail); the classic baseline, TF-IDF + logistic regression, sees every word of it, and won on
long and small sets. The bag gives the TRM that view too: the message's word unigrams and
bigrams (lower case, the tokenizer's normalisation), each mapped to an id, and the
`positions` with the highest tf-idf (idf from the training split only) written after the
tokens, sorted by id, pads after. The model's bag part pools them (email/parts.py; model.part_positions: their
mean embedding is added to every token position's input) and the recursion reads both.

Two ways to map an n-gram to an id (`buckets` ids in all; vocab_offset: the tokenizer's size):
- words (the default; measured in docs/results.md): the training split's n-grams
  that occur in at least MIN_DF messages, the `buckets` most frequent by document frequency (ties
  by the n-gram's text), numbered in that order; any other n-gram is left out of the bag.
      id = vocab_offset + rank(n-gram)
- hashed (stores built before; `--bag-hashed`): every n-gram, hashed. Collisions cost: logistic
  regression on SpamAssassin's bags fell from 0.93 to 0.91 macro-F1 (measured, docs/results.md).
      id = vocab_offset + (blake2b-64(n-gram) mod buckets)

Words (`WORD_RULES`): a word is a run of 2 or more
letters or digits ("split": scikit-learn's default token pattern without the underscore), so
"ankara'da" gives "ankara" and "da", and one-letter words are left out. Stores and bundles built
before hold "joined" words ("don't" and "v1.2" whole, one letter kept) and keep reading them so:
the rule is saved in bag.json (format /3; /1 and /2 mean "joined"). On the Turkish e-mail CSV the
split words gave class-balanced logistic regression 0.9755 macro-F1 where joined ones gave 0.9586
(idf features, C chosen by cross-validation; docs/results.md).

The table (idf, the words and their rule) travels with the store (train/bag.json) and with an
exported bundle, so predict computes the same bag. Only the standard library and numpy are used.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from itertools import repeat
from typing import Iterable, Iterator, Sequence

import numpy as np

BAG_FILE = "bag.json"
FORMATS = ("trmkit-email-bag/1", "trmkit-email-bag/2", "trmkit-email-bag/3")  # hashed; words; either + word_rule
WORD_RULES = {"split": re.compile(r"[^\W_]{2,}"),  # runs of >= 2 letters or digits (the default)
              "joined": re.compile(r"[^\W_]+(?:['.][^\W_]+)*")}  # stores before: "don't", "v1.2" whole
WORD_RULE = "split"  # what a new bag uses
# The same rules for ASCII text, where a letter or digit is [A-Za-z0-9]: the same words, found
# 1.6 x faster than with the Unicode classes (88 % of SpamAssassin's bag texts are ASCII).
ASCII_WORD_RULES = {"split": re.compile(r"[A-Za-z0-9]{2,}"),
                    "joined": re.compile(r"[A-Za-z0-9]+(?:['.][A-Za-z0-9]+)*")}
MAX_WORDS = 20_000  # words read per message: the cost of a huge message stays bounded
_CACHE_LIMIT = 1 << 18  # n-grams whose bucket is remembered (cleared when full: memory stays bounded)
MIN_DF = 2  # words mode: an n-gram seen in fewer training messages gets no id (as the baseline's min_df)
PRUNE_AT = 2_000_000  # words mode: distinct n-grams counted (about 250 MB) before those seen once are dropped
_LOGS = np.array([0.0] + [math.log(c) for c in range(1, 4097)])  # math.log of the small counts a message has


def smooth_idf(n: int, df: np.ndarray) -> np.ndarray:
    """log((1 + n) / (1 + df)) + 1 of each document frequency df among n documents: scikit-learn's smooth idf,
    which the bag, the bag's linear model and the few-label text teacher all read."""
    return np.log((1 + n) / (1 + df)) + 1


def bag_text(subject: str, sender: str, body: str) -> str:
    """The text a message's bag is read from: its fields as the tokenizer normalises them."""
    from trmkit.email.tokenizer import normalize

    return normalize(f"{subject}\n{sender}\n{body}")


def ngrams(text: str, rule: str = WORD_RULE) -> Counter:
    """Counts of word unigrams and bigrams of a (normalised) text, its words found by WORD_RULES[rule]."""
    words = (ASCII_WORD_RULES if text.isascii() else WORD_RULES)[rule].findall(text)[:MAX_WORDS]
    counts = Counter(words)
    counts.update(map(" ".join, zip(words, words[1:])))  # "a b"; map: no Python frame per bigram
    return counts


def _log_counts(counts: np.ndarray) -> np.ndarray:
    """math.log of each count (the standard library's, so a bag is the same with any numpy build)."""
    if counts.max() < len(_LOGS):
        return _LOGS[counts]
    return np.array([math.log(c) for c in counts.tolist()])


def bucket(gram: str, buckets: int) -> int:
    return int.from_bytes(hashlib.blake2b(gram.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little") % buckets


@dataclass
class Bag:
    """N-gram ids (a word list, or hash buckets when `words` is None) with the training split's idf per id."""

    positions: int  # ids written per message
    buckets: int  # ids in all
    vocab_offset: int  # the first id after the tokenizer's vocabulary
    idf: np.ndarray  # (buckets,) log((1 + N) / (1 + df)) + 1, from the training split
    words: list[str] | None = None  # words mode: the n-gram of each id, in id order; None: hashed
    word_rule: str = WORD_RULE  # how a text splits into words (WORD_RULES)
    _cache: dict[str, int] = field(default_factory=dict, repr=False, compare=False)  # n-gram -> bucket
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)  # words mode: n-gram -> id

    def __post_init__(self) -> None:
        if self.word_rule not in WORD_RULES:
            raise ValueError(f"word rule {self.word_rule!r} is not one of {sorted(WORD_RULES)}")
        if self.words is not None:
            self._index = {w: i for i, w in enumerate(self.words)}

    @classmethod
    def fit(cls, texts: Iterable[str], positions: int, buckets: int, vocab_offset: int, hashed: bool = False
            ) -> "Bag":
        """The table of the training split's texts: hashed (idf per bucket), or its `buckets` most
        frequent n-grams of document frequency >= MIN_DF (fewer if it has fewer)."""
        if hashed:
            df, n = np.zeros(buckets, dtype=np.int64), 0
            for text in texts:
                n += 1
                df[list({bucket(g, buckets) for g in ngrams(text, WORD_RULE)})] += 1
            return cls(positions, buckets, vocab_offset, smooth_idf(n, df))
        counts, n = _document_frequencies(texts)
        kept = sorted((g for g, c in counts.items() if c >= MIN_DF), key=lambda g: (-counts[g], g))[:buckets]
        df = np.array([counts[g] for g in kept], dtype=np.float64)
        return cls(positions, len(kept), vocab_offset, smooth_idf(n, df), words=kept)

    def ids(self, text: str) -> np.ndarray:
        """(positions,) ids of the message's top n-grams by tf-idf (sub-linear tf), 0 (pad) after.

        Ties in weight go to the lower bucket. Weights are summed per bucket in the order the
        n-grams first appear, so the ids are the same, bit for bit, on every machine."""
        counts = ngrams(text, self.word_rule)
        out = np.zeros(self.positions, dtype=np.int64)
        if not counts:
            return out
        b = np.fromiter(self._ids_of(counts), dtype=np.int64, count=len(counts))
        tf = 1.0 + _log_counts(np.fromiter(counts.values(), dtype=np.int64, count=len(counts)))
        if self.words is not None:  # n-grams without an id are left out
            known = b >= 0
            if not known.any():
                return out
            b, tf = b[known], tf[known]
        present, sums = self._sum_by_id(b, tf * self.idf[b])  # ids ascending: a stable sort keeps the lower on ties
        nonzero = sums != 0
        present, sums = present[nonzero], sums[nonzero]
        top = present[np.argsort(-sums, kind="stable")[: self.positions]]
        out[: len(top)] = self.vocab_offset + np.sort(top)
        return out

    def _sum_by_id(self, ids: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the distinct ids ascending, the sum of each one's weights, added in the order given).

        Only the message's own ids are summed: a bincount over all `buckets` ids, and the scan of
        it for the nonzero ones, was a third of `ids` (SpamAssassin, 32,768 ids). In words mode each
        n-gram has its own id, so there is nothing to add (0.0 + w is w) and a sort is enough."""
        if self.words is not None:
            order = np.argsort(ids)
            return ids[order], weights[order]
        present, slot = np.unique(ids, return_inverse=True)
        return present, np.bincount(slot, weights=weights, minlength=len(present))

    def _ids_of(self, grams: Iterable[str]) -> Iterator[int]:
        """Each gram's id (words mode: -1 when it has none), by map: no Python frame for each of a
        message's hundreds of grams."""
        if self.words is not None:
            return map(self._index.get, grams, repeat(-1))
        return map(self._bucket, grams)

    def _bucket(self, gram: str) -> int:
        """Hashed mode: bucket(gram), remembered: a mailbox repeats its words, and hashing was most of the cost."""
        found = self._cache.get(gram)
        if found is None:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            found = self._cache[gram] = bucket(gram, self.buckets)
        return found

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.ids(t) for t in texts]) if texts else np.zeros((0, self.positions), np.int64)

    def append_to(self, tokens: np.ndarray, fields: Sequence[tuple[str, str, str]]) -> np.ndarray:
        """Token rows (N, L) with each message's bag after them: (N, L + positions), int64.
        `fields`: each message's (subject, sender, body), as the tokenizer read them."""
        return np.concatenate([tokens.astype(np.int64), self.encode([bag_text(*f) for f in fields])], axis=1)

    def vocab(self) -> list[str]:
        """Names of the bag's ids, appended to the tokenizer's vocabulary in meta.json."""
        return [f"<bag{i}>" for i in range(self.buckets)]

    def describe(self) -> str:
        words = f"{self.word_rule} words"
        if self.words is None:
            return f"hashed uni- and bigrams of {words} ({self.buckets} buckets)"
        return (f"uni- and bigrams of {words}: the {self.buckets} most frequent in at least {MIN_DF} training "
                "messages (others left out)")

    def to_dict(self) -> dict:
        return {"format": FORMATS[-1], "positions": self.positions, "buckets": self.buckets,
                "vocab_offset": self.vocab_offset, "word_rule": self.word_rule, "words": self.words,
                "idf": [round(float(v), 5) for v in self.idf]}

    @classmethod
    def from_dict(cls, data: dict, where: str = BAG_FILE) -> "Bag":
        kind = data.get("format")
        if kind not in FORMATS:
            raise ValueError(f"{where}: not a trmkit e-mail bag (format {kind!r}; this trmkit reads {FORMATS})")
        rule = data.get("word_rule") if kind == FORMATS[-1] else "joined"  # /1 (hashed), /2 (words): joined
        if rule not in WORD_RULES:
            raise ValueError(f"{where}: word_rule {rule!r} is not one of {sorted(WORD_RULES)}: the file was written "
                             "by another trmkit or edited; rebuild the store with `trmkit data email`")
        words = data.get("words") if kind != FORMATS[0] else None
        words = [str(w) for w in words] if words is not None else None
        bag = cls(int(data["positions"]), int(data["buckets"]), int(data["vocab_offset"]),
                  np.asarray(data["idf"], dtype=np.float64), words=words, word_rule=rule)
        if len(bag.idf) != bag.buckets or (words is not None and len(words) != bag.buckets):
            raise ValueError(f"{where}: {len(bag.idf)} idf values and "
                             f"{'no' if words is None else len(words)} words for {bag.buckets} ids")
        return bag

    @classmethod
    def load(cls, path: str | Path) -> "Bag":
        return cls.from_dict(json.loads(Path(path).read_text()), str(path))


def _document_frequencies(texts: Iterable[str]) -> tuple[dict[str, int], int]:
    """(n-gram -> number of texts it occurs in, number of texts). Memory stays bounded: past PRUNE_AT
    distinct n-grams, those seen in one text so far are dropped (they could only reach MIN_DF late)."""
    counts: dict[str, int] = {}
    n = 0
    for text in texts:
        n += 1
        for gram in ngrams(text, WORD_RULE):
            counts[gram] = counts.get(gram, 0) + 1
        if len(counts) > PRUNE_AT:
            counts = {g: c for g, c in counts.items() if c > 1}
    return counts, n
