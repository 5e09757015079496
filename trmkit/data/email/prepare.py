"""Preparing decoded e-mail for training: duplicates, language, lengths, splits and the report.

The order matters and is the caller's contract: read -> `deduplicate` -> `split` -> tokenizer
trained on the training split only. Duplicates are removed *before* the split, so no copy of a
message can sit in train and in test (spam campaigns send near-identical mail by the thousand;
a split that lets them cross measures memory, not classification).

Duplicates
    exact: the same text after collapsing whitespace and case-folding (hashed with blake2b).
    near:  MinHash (128 hashes) over word 5-shingles, or character 5-shingles for texts of fewer
           than 10 words, with LSH banding to find candidates, then the true Jaccard similarity of
           the two shingle sets must reach `near_threshold`. A message is a near duplicate when it
           is that similar to an earlier *kept* message; the first of each group (input order) is
           kept. Group members with different labels are counted as `conflicts` (the first label
           wins), because a message labelled both ham and spam is noise the user should see.
           near_threshold >= 1 turns the near search off. The seed only picks the MinHash hash
           functions; with (bands, rows) from `lsh_shape` a pair at the threshold is a candidate
           with probability >= 0.995, and every candidate is verified exactly.
    Cost (measured): the 6,046 SpamAssassin messages (12.5 M characters) take about 2 s on one
    core; on 900 of them LSH found exactly the near duplicates an all-pairs Jaccard found.

Language
    `detect_language` is a small heuristic, not a model; its rule is in its docstring.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from trmkit.data.email import Message

LANGUAGES = ("tr", "en", "other")
SPLIT_METHODS = ("stratified", "time")
SPLIT_NAMES = ("train", "val", "test")
SHINGLE = 5  # words (or characters, for short texts) per shingle
NUM_PERM = 128  # MinHash hash functions
MAX_GROUP_EXAMPLES = 10  # duplicate groups kept in DedupResult.groups
_MAX_U64 = np.iinfo(np.uint64).max


def message_text(msg: Message) -> str:
    """The one text of a message used for dedup, language and the baseline: subject, sender, body."""
    return f"{msg.subject}\n{msg.sender}\n{msg.body}"


# ---------------------------------------------------------------- language

# Function words and greetings (plus ASCII spellings of the commonest Turkish ones, since much
# Turkish mail is typed without Turkish letters). Words that are also common in English, Spanish
# or French ("de", "da", "en", "her", "a", "mi", "su", "ya", "ben", "once") cannot vote.
TR_STOPWORDS = frozenset("""
ve bir bu için icin ile çok cok olarak gibi daha ama ne var yok olan olsun kadar sonra önce
biz siz size bize bana sana mı mü veya şu ki değil degil lütfen lutfen
tarafından tüm tum iyi günler gunler teşekkürler tesekkurler saygılarımla hakkında
ilgili diye ise eğer eger nasıl nasil neden şimdi simdi yeni bunu şey sey merhaba selam
selamlar sayın sayin ekte
""".split())
EN_STOPWORDS = frozenset("""
the and to of in is you that for it this with on are be your have from not we or at by will can
i my me our us was were has had been an as if but all any here there what which who when would
should could do does did so no yes please their they them he she his its than then just more
""".split())
TR_LETTERS = frozenset("çğıöşüÇĞİÖŞÜ")  # letters of the Turkish alphabet that ASCII lacks
# Turkish letters as they show up in mail nobody decoded (CSV dumps, broken charsets): UTF-8 read
# as cp1252, ISO-8859-9 read as Latin-1, and quoted-printable escapes of UTF-8 and ISO-8859-9.
# ç ö ü forms (=E7 =F6 =FC, Ã§ ...) also occur in French or German, as ç ö ü themselves do.
TR_UNDECODED = (
    "Ä±", "ÄŸ", "ÅŸ", "Ä°", "Åž", "Äž", "Ã¼", "Ã§", "Ã¶", "Ãœ", "Ã‡", "Ã–",
    "ý", "þ", "ð", "Ý", "Þ", "Ð",
    "=C4=B1", "=C4=9F", "=C5=9F", "=C4=B0", "=C5=9E", "=C4=9E",
    "=FD", "=FE", "=F0", "=DD", "=DE", "=D0", "=E7", "=F6", "=FC",
    "Ä\x9f", "Å\x9f", "Ä\x9e", "Å\x9e",
)
# "From:" and "To:" of a forwarded message inside a body are not evidence of English.
HEADER_LABELS = ("from:", "to:")
_WORD = re.compile(r"[^\W\d_]+")
_NON_LATIN_LETTER = re.compile(r"[^\W\d_\x00-\u024f]")
LANGUAGE_SAMPLE_CHARS = 4000  # the head of the text is enough and keeps the cost flat
MIN_VOTE_SHARE = 0.03  # the winning language needs hits on >= 3 % of the words


_TR_LETTER_WORD = re.compile(r"[çğıöşüÇĞİÖŞÜ][^\W\d_]*")  # one match per word holding one
_TR_UNDECODED = re.compile("|".join(re.escape(m) for m in sorted(TR_UNDECODED, key=len, reverse=True)))


def _fold(text: str) -> str:
    """Lower case for stop-word lookup without str.lower()'s "İ" -> "i" + U+0307."""
    return text.replace("İ", "i").lower()


def detect_language(text: str) -> str:
    """"tr", "en" or "other" from the first 4,000 characters, by counting votes.

    Rule: words are runs of letters. If more than half of the letters are outside the Latin
    script (Cyrillic, CJK, ...) the answer is "other". Turkish votes = Turkish stop words +
    words holding a Turkish letter (ç ğ ı ö ş ü, capitals and İ) + Turkish letters left
    undecoded (TR_UNDECODED: "Ã¼", "ý", "=C4=B1", "=FD", ...); English votes = English stop
    words. The larger vote wins if it reaches max(1, 3 % of the words); otherwise (ties, no
    evidence, another Latin-script language) "other". "from:" and "to:" (header labels of
    forwarded mail) do not vote. Measured in tests/test_email_prepare.py on the
    Turkish CSV and on SpamAssassin.
    """
    sample = text[:LANGUAGE_SAMPLE_CHARS]
    folded = _fold(sample)
    words = _WORD.findall(folded)
    if not words:
        return "other"
    if len(_NON_LATIN_LETTER.findall(sample)) * 2 > sum(map(len, words)):
        return "other"
    tr = sum(map(TR_STOPWORDS.__contains__, words))
    tr += len(_TR_LETTER_WORD.findall(sample)) + len(_TR_UNDECODED.findall(sample))
    en = sum(map(EN_STOPWORDS.__contains__, words))
    en = max(0, en - sum(folded.count(h) for h in HEADER_LABELS))
    needed = max(1.0, MIN_VOTE_SHARE * len(words))
    if tr > en and tr >= needed:
        return "tr"
    if en > tr and en >= needed:
        return "en"
    return "other"


# ---------------------------------------------------------------- duplicates


@dataclass
class DedupResult:
    """Which messages to keep, and what was removed as a duplicate of what."""

    keep: list[int]  # indices of the kept messages, in input order
    exact: int  # removed because their normalised text equals an earlier message's
    near: int  # removed because their shingles are >= near_threshold similar to a kept message
    groups: list[list[int]]  # first few duplicate groups: [kept index, removed indices...]
    conflicts: int  # groups whose members carried different labels (the first label was kept)
    group_count: int = 0  # all duplicate groups (groups holds only the first few)
    duplicate_of: dict[int, int] = field(default_factory=dict)  # removed index -> kept index

    @property
    def removed(self) -> int:
        return self.exact + self.near


def normalize_for_dedup(text: str) -> str:
    """Whitespace collapsed and case-folded: re-wrapped or re-cased copies count as exact."""
    return " ".join(text.casefold().split())


def _exact_firsts(norms: Sequence[str]) -> list[int]:
    """For each text, the index of the first text with the same normalised form."""
    first: dict[bytes, int] = {}
    out = []
    for i, t in enumerate(norms):
        key = hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        out.append(first.setdefault(key, i))
    return out


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: turns small ids into well-spread 64-bit hashes (wrapping math)."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


@dataclass
class Shingles:
    """Every text's sorted unique shingle hashes, concatenated: text i owns
    hashes[offsets[i]:offsets[i + 1]] (never empty)."""

    hashes: np.ndarray  # (total,) uint64
    offsets: np.ndarray  # (n + 1,) int64

    def of(self, i: int) -> np.ndarray:
        return self.hashes[self.offsets[i] : self.offsets[i + 1]]


def _windows(units: np.ndarray, lens: np.ndarray, k: int, salt: int) -> Shingles:
    """Hash every window of k consecutive units inside each text, for all texts at once.

    `units` holds the texts' units (word ids or code points) back to back, `lens` their counts
    (each >= k). Windows are hashed order-sensitively over the whole array and the ones that
    straddle two texts dropped. To sort and de-duplicate per text with one np.sort, the text
    number goes into the top bits of each key and the hash keeps the remaining (>= 40) bits.
    """
    h = _mix64(units)
    n_win = len(h) - k + 1
    acc = np.full(max(n_win, 0), salt, dtype=np.uint64)
    for j in range(k):
        acc = _mix64(acc ^ h[j : j + n_win])
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    text = np.repeat(np.arange(len(lens), dtype=np.uint64), lens)[:n_win]
    valid = np.arange(n_win) - starts[text.astype(np.int64)] <= (lens - k)[text.astype(np.int64)]
    text_bits = np.uint64(max(1, int(len(lens)).bit_length()))
    keys = np.sort((text[valid] << (np.uint64(64) - text_bits)) | (acc[valid] >> text_bits))
    first = np.ones(len(keys), dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    keys = keys[first]  # sort + neighbours: np.unique is ~50x slower here (numpy 2.4)
    text = (keys >> (np.uint64(64) - text_bits)).astype(np.int64)
    offsets = np.searchsorted(text, np.arange(len(lens) + 1)).astype(np.int64)
    return Shingles(keys & (_MAX_U64 >> text_bits), offsets)


def _word_units(texts: Sequence[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Word ids (first-seen order, so deterministic) of all texts back to back, and counts."""
    flat = [w for words in texts for w in words]
    index = {w: i for i, w in enumerate(dict.fromkeys(flat))}  # C-speed unique, in order
    lens = np.array([len(w) for w in texts], dtype=np.int64)
    return np.fromiter(map(index.__getitem__, flat), np.uint64, len(flat)), lens


def _char_units(norms: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Code points of all texts back to back (texts shorter than k padded with zeros)."""
    padded = [t + "\0" * (k - len(t)) if len(t) < k else t for t in norms]
    lens = np.array([len(t) for t in padded], dtype=np.int64)
    joined = "".join(padded).encode("utf-32-le", "surrogatepass")
    return np.frombuffer(joined, dtype=np.uint32).astype(np.uint64), lens


def shingle_sets(norms: Sequence[str], k: int = SHINGLE) -> Shingles:
    """Word k-shingles for texts of at least 2k words, character k-shingles for shorter ones
    (a one-line message has too few word shingles for a meaningful Jaccard)."""
    words = [t.split() for t in norms]
    by_words = np.array([len(w) >= 2 * k for w in words], dtype=bool)
    parts = {}
    for use_words, salt in ((True, 1), (False, 2)):
        idx = np.flatnonzero(by_words == use_words)
        if len(idx) == 0:
            continue
        if use_words:
            units, lens = _word_units([words[i] for i in idx])
        else:
            units, lens = _char_units([norms[i] for i in idx], k)
        parts[use_words] = (idx, _windows(units, lens, k, salt))
    counts = np.zeros(len(norms), dtype=np.int64)
    for idx, sh in parts.values():
        counts[idx] = np.diff(sh.offsets)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    hashes = np.empty(int(offsets[-1]), dtype=np.uint64)
    for idx, sh in parts.values():
        for j, i in enumerate(idx):
            hashes[offsets[i] : offsets[i + 1]] = sh.of(j)
    return Shingles(hashes, offsets)


def _minhash(sh: Shingles, rows: Sequence[int], seed: int, num_perm: int = NUM_PERM) -> np.ndarray:
    """(len(rows), num_perm) MinHash signatures of the given texts: min of a*h + b (mod 2^64),
    a odd. Texts are taken in groups of about 8k shingles and reduced with np.minimum.reduceat
    along the contiguous axis (10x faster than along the other); a text larger than a group is
    reduced block by block, so a multi-megabyte message never needs a big temporary."""
    rng = np.random.default_rng([seed, 1])
    a = rng.integers(0, _MAX_U64, size=(num_perm, 1), dtype=np.uint64, endpoint=True) | np.uint64(1)
    b = rng.integers(0, _MAX_U64, size=(num_perm, 1), dtype=np.uint64, endpoint=True)
    lens = np.array([sh.offsets[i + 1] - sh.offsets[i] for i in rows], dtype=np.int64)
    sig = np.empty((num_perm, len(rows)), dtype=np.uint64)
    block, p_block = 1 << 13, 16
    t0 = 0
    with np.errstate(over="ignore"):
        while t0 < len(rows):
            t1 = t0 + 1
            while t1 < len(rows) and lens[t0 : t1 + 1].sum() <= block:
                t1 += 1
            h = np.concatenate([sh.of(i) for i in rows[t0:t1]])
            starts = np.concatenate([[0], np.cumsum(lens[t0 : t1 - 1])]).astype(np.int64)
            for p0 in range(0, num_perm, p_block):
                ab = slice(p0, p0 + p_block)
                if t1 - t0 == 1:
                    sig[ab, t0] = _min_blocks(h, a[ab], b[ab], block)
                else:
                    vals = a[ab] * h[None, :] + b[ab]  # (p_block, shingles)
                    sig[ab, t0:t1] = np.minimum.reduceat(vals, starts, axis=1)
            t0 = t1
    return sig.T


def _min_blocks(h: np.ndarray, a: np.ndarray, b: np.ndarray, block: int) -> np.ndarray:
    """min over h of a*h + b for one large text, `block` shingles at a time: (len(a),)."""
    out = np.full(len(a), _MAX_U64, dtype=np.uint64)
    for r0 in range(0, len(h), block):
        np.minimum(out, (a * h[None, r0 : r0 + block] + b).min(axis=1), out=out)
    return out


def lsh_shape(threshold: float, num_perm: int = NUM_PERM, recall: float = 0.995) -> tuple[int, int]:
    """(bands, rows) with the most rows per band that still finds a pair at `threshold` with
    probability >= recall: more rows means fewer dissimilar candidates to verify."""
    best = (num_perm, 1)
    for rows in range(1, num_perm + 1):
        if num_perm % rows:
            continue
        bands = num_perm // rows
        if 1.0 - (1.0 - threshold**rows) ** bands >= recall:
            best = (bands, rows)
    return best


def _band_keys(sig: np.ndarray, bands: int, rows: int) -> list[list[int]]:
    """One 64-bit key per (text, band): the band's rows folded with distinct odd multipliers."""
    mult = _mix64(np.arange(1, rows + 1, dtype=np.uint64)) | np.uint64(1)
    with np.errstate(over="ignore"):
        keys = (sig.reshape(len(sig), bands, rows) * mult).sum(axis=2, dtype=np.uint64)
    return keys.tolist()


def jaccard(x: np.ndarray, y: np.ndarray) -> float:
    """Jaccard similarity of two sorted unique arrays."""
    inter = np.intersect1d(x, y, assume_unique=True).size
    return inter / (len(x) + len(y) - inter)


def _similar(x: np.ndarray, y: np.ndarray, threshold: float) -> bool:
    small, large = sorted((len(x), len(y)))
    return small >= threshold * large and jaccard(x, y) >= threshold  # size bound first: cheap


def _near_duplicates(sh: Shingles, order: Sequence[int], threshold: float, seed: int) -> dict[int, int]:
    """Greedy in input order: each text joins the first earlier kept text it matches (an LSH
    candidate whose true Jaccard reaches the threshold), else it is kept. {removed: kept}."""
    bands, rows = lsh_shape(threshold)
    keys = _band_keys(_minhash(sh, order, seed), bands, rows)
    buckets: list[dict[int, list[int]]] = [{} for _ in range(bands)]
    near: dict[int, int] = {}
    for pos, i in enumerate(order):
        candidates: set[int] = set()
        for band, key in enumerate(keys[pos]):
            candidates.update(buckets[band].get(key, ()))
        match = next((j for j in sorted(candidates) if _similar(sh.of(i), sh.of(j), threshold)), None)
        if match is not None:
            near[i] = match
            continue
        for band, key in enumerate(keys[pos]):
            buckets[band].setdefault(key, []).append(i)
    return near


def deduplicate(texts: list[str], labels: list[str | None] | None = None,
                near_threshold: float = 0.9, seed: int = 0) -> DedupResult:
    """Exact then near duplicates; keeps the first of each group. See the module docstring.

    near_threshold >= 1 turns the near-duplicate search off (exact duplicates only)."""
    if not near_threshold > 0.0:
        raise ValueError(f"near_threshold must be > 0 (>= 1 turns near duplicates off), got {near_threshold}")
    if labels is not None and len(labels) != len(texts):
        raise ValueError(f"labels has {len(labels)} entries but texts has {len(texts)}")
    norms = [normalize_for_dedup(t) for t in texts]
    firsts = _exact_firsts(norms)
    unique = [i for i, f in enumerate(firsts) if f == i]
    near: dict[int, int] = {}
    if near_threshold < 1.0 and len(unique) > 1:
        sh = shingle_sets([norms[i] for i in unique])
        found = _near_duplicates(sh, list(range(len(unique))), near_threshold, seed)
        near = {unique[i]: unique[j] for i, j in found.items()}
    duplicate_of = {i: near.get(f, f) for i, f in enumerate(firsts) if near.get(f, f) != i}
    return _dedup_result(len(texts), firsts, near, duplicate_of, labels)


def _dedup_result(n: int, firsts: list[int], near: dict[int, int], duplicate_of: dict[int, int],
                  labels: list[str | None] | None) -> DedupResult:
    groups: dict[int, list[int]] = {}
    for i, kept in sorted(duplicate_of.items()):
        groups.setdefault(kept, [kept]).append(i)
    ordered = [groups[k] for k in sorted(groups)]
    conflicts = 0
    if labels is not None:
        conflicts = sum(1 for g in ordered if len({labels[i] for i in g}) > 1)
    return DedupResult(
        keep=[i for i in range(n) if i not in duplicate_of],
        exact=sum(1 for i, f in enumerate(firsts) if f != i),
        near=len(near),
        groups=ordered[:MAX_GROUP_EXAMPLES],
        conflicts=conflicts,
        group_count=len(ordered),
        duplicate_of=duplicate_of,
    )


# ---------------------------------------------------------------- splits


def _round_half_up(x: float) -> int:
    return int(np.floor(x + 0.5))


def _class_counts(n: int, val_fraction: float, test_fraction: float) -> tuple[int, int]:
    """(n_val, n_test) for one class: rounded shares, at least one each where a share was asked
    for, and at least one message left for training."""
    n_val, n_test = _round_half_up(n * val_fraction), _round_half_up(n * test_fraction)
    if val_fraction > 0:
        n_val = max(n_val, 1)
    if test_fraction > 0:
        n_test = max(n_test, 1)
    while n_val + n_test > n - 1:  # give back from the larger share
        if n_test >= n_val:
            n_test -= 1
        else:
            n_val -= 1
    return n_val, n_test


def _check_fractions(val_fraction: float, test_fraction: float) -> None:
    if val_fraction < 0 or test_fraction < 0 or val_fraction + test_fraction >= 1:
        raise ValueError(
            f"val_fraction ({val_fraction}) and test_fraction ({test_fraction}) must be >= 0 "
            "and leave room for training (sum < 1)"
        )


def _stratified(labels: Sequence[str], val_fraction: float, test_fraction: float,
                seed: int) -> tuple[list[int], list[int], list[int]]:
    missing = [i for i, y in enumerate(labels) if y is None]
    if missing:
        raise ValueError(f"{len(missing)} messages have no label (first: message index {missing[0]}); "
                         "set a label for them or drop them before splitting")
    needed = 1 + (val_fraction > 0) + (test_fraction > 0)
    y = np.asarray(labels, dtype=object)
    rng = np.random.default_rng([seed, 2])
    train: list[int] = []
    val: list[int] = []
    test: list[int] = []
    for cls in sorted(set(labels)):
        idx = np.flatnonzero(y == cls)
        if len(idx) < needed:
            raise ValueError(
                f"class {cls!r} has {len(idx)} message(s); a stratified split needs at least "
                f"{needed} per class (one in each split): merge it into another class with a "
                "label map, or add data"
            )
        idx = rng.permutation(idx)
        n_val, n_test = _class_counts(len(idx), val_fraction, test_fraction)
        test += idx[:n_test].tolist()
        val += idx[n_test : n_test + n_val].tolist()
        train += idx[n_test + n_val :].tolist()
    return train, val, test


def _by_time(dates: Sequence[float | None] | None, n: int, val_fraction: float,
             test_fraction: float) -> tuple[list[int], list[int], list[int]]:
    if dates is None:
        raise ValueError("by='time' needs dates (one per message); pass dates=[...] or use by='stratified'")
    if len(dates) != n:
        raise ValueError(f"dates has {len(dates)} entries but labels has {n}")
    missing = [i for i, d in enumerate(dates) if d is None]
    if missing:
        raise ValueError(
            f"{len(missing)} of {n} messages have no date (first: message index {missing[0]}); "
            "a time split needs every date: use by='stratified' instead"
        )
    order = sorted(range(n), key=lambda i: (dates[i], i))  # ties keep input order
    n_test, n_val = _round_half_up(n * test_fraction), _round_half_up(n * val_fraction)
    n_train = n - n_val - n_test
    return order[:n_train], order[n_train : n_train + n_val], order[n_train + n_val :]


def split(labels: list[str], val_fraction: float, test_fraction: float, seed: int,
          dates: list[float | None] | None = None,
          by: str = "stratified") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train, val, test) row indices, each sorted.

    "stratified": per class (sorted by name), shuffled by np.random.default_rng([seed, 2]);
    round(n * test_fraction) go to test and round(n * val_fraction) to val, at least one each
    where the fraction is > 0. "time": oldest messages train, the next val, the newest test,
    which is how a filter meets mail in use (tomorrow's spam is not in today's training set).
    """
    _check_fractions(val_fraction, test_fraction)
    if by == "stratified":
        parts = _stratified(labels, val_fraction, test_fraction, seed)
    elif by == "time":
        parts = _by_time(dates, len(labels), val_fraction, test_fraction)
    else:
        raise ValueError(f"unknown split method {by!r}; choose one of {', '.join(SPLIT_METHODS)}")
    train, val, test = (np.sort(np.asarray(p, dtype=np.int64)) for p in parts)
    return train, val, test


# ---------------------------------------------------------------- lengths and report


def length_stats(values: Sequence[float] | np.ndarray) -> dict[str, float]:
    """count, min, p50, p90, p99, max and mean (all 0 for an empty input)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"count": 0, "min": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "mean": 0.0}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {"count": int(v.size), "min": float(v.min()), "p50": float(p50), "p90": float(p90),
            "p99": float(p99), "max": float(v.max()), "mean": float(v.mean())}


def _counts(labels: Sequence[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for y in labels:
        out[str(y)] = out.get(str(y), 0) + 1
    return dict(sorted(out.items()))


def _split_rows(rows: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """split()'s (train, val, test) or a {"train": ..., ...} dict, as a dict of all three."""
    if isinstance(rows, Mapping):
        unknown = set(rows) - set(SPLIT_NAMES)
        if unknown:
            raise ValueError(f"unknown split name(s) {sorted(unknown)}; expected {', '.join(SPLIT_NAMES)}")
        return {n: np.asarray(rows.get(n, ()), dtype=np.int64) for n in SPLIT_NAMES}
    if len(rows) != len(SPLIT_NAMES):
        raise ValueError(f"rows must be (train, val, test) as split() returns, got {len(rows)} arrays")
    return {n: np.asarray(r, dtype=np.int64) for n, r in zip(SPLIT_NAMES, rows)}


def _flat_lengths(values: Sequence[int] | Mapping[str, Sequence[int]]) -> np.ndarray:
    if isinstance(values, Mapping):
        parts = [np.asarray(v).ravel() for v in values.values()]
        return np.concatenate(parts) if parts else np.zeros(0)
    return np.asarray(values).ravel()


def dataset_report(*, total_read: int, dedup: DedupResult, labels: Sequence[str],
                   rows: Mapping[str, np.ndarray] | Sequence[np.ndarray], seed: int,
                   split_by: str = "stratified", messages: Sequence[Message] | None = None,
                   languages: Sequence[str] | None = None, char_lengths: Sequence[int] | None = None,
                   token_lengths: Sequence[int] | Mapping[str, Sequence[int]] | None = None,
                   seq_len: int | None = None, skipped: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Everything a user should see before training, as plain JSON-able data.

    `labels` (and `messages`, `languages`, `char_lengths`) describe the *kept* messages (after
    dedup), in the order `rows` indexes them; `rows` is split()'s (train, val, test) or a dict
    of them; character lengths come from `messages` when not given; `token_lengths` may be one
    array or one per split; `skipped` is the reader's {reason: count}, passed through.
    """
    y = list(labels)
    parts = _split_rows(rows)
    all_counts = _counts(y)
    smallest = min(all_counts.values()) if all_counts else 0
    report: dict[str, Any] = {
        "total_read": int(total_read),
        "skipped": dict(skipped or {}),
        "duplicates": {"exact": dedup.exact, "near": dedup.near, "conflicts": dedup.conflicts,
                       "groups": dedup.group_count, "kept": len(dedup.keep)},
        "classes": {"all": all_counts, **{n: _counts([y[i] for i in idx]) for n, idx in parts.items()}},
        "imbalance_ratio": (max(all_counts.values()) / smallest) if smallest else None,
        "split_sizes": {n: int(len(idx)) for n, idx in parts.items()},
        "split": {"method": split_by, "seed": int(seed)},
        "lengths": {},
    }
    if languages is not None:
        report["languages"] = _counts(languages)
    if char_lengths is None and messages is not None:
        char_lengths = [len(message_text(m)) for m in messages]
    if char_lengths is not None:
        report["lengths"]["chars"] = length_stats(char_lengths)
    if token_lengths is not None:
        tokens = _flat_lengths(token_lengths)
        report["lengths"]["tokens"] = length_stats(tokens)
        if seq_len is not None:
            longer = int(np.sum(tokens > seq_len))
            report["lengths"]["longer_than_seq_len"] = {"seq_len": int(seq_len), "count": longer}
    return report


def _fmt_counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "none"


def _fmt_lengths(name: str, s: Mapping[str, float]) -> str:
    return (f"length ({name}): p50 {s['p50']:.0f}, p90 {s['p90']:.0f}, p99 {s['p99']:.0f}, "
            f"max {s['max']:.0f}, mean {s['mean']:.0f}")


def report_lines(report: Mapping[str, Any]) -> list[str]:
    """A short human-readable block of `dataset_report`'s dict."""
    d = report["duplicates"]
    lines = [f"read {report['total_read']} messages"
             + (f" ({sum(report['skipped'].values())} skipped: {_fmt_counts(report['skipped'])})"
                if report.get("skipped") else "")]
    lines.append(f"duplicates removed: {d['exact']} exact, {d['near']} near ({d['groups']} groups); "
                 f"{d['conflicts']} groups with conflicting labels (first label kept); {d['kept']} kept")
    ratio = report["imbalance_ratio"]
    lines.append(f"classes: {_fmt_counts(report['classes']['all'])}; imbalance "
                 + (f"{ratio:.2f}:1 (largest/smallest)" if ratio else "n/a"))
    sp = report["split"]
    lines.append(f"split {sp['method']} (seed {sp['seed']}): "
                 + " | ".join(f"{n} {report['split_sizes'][n]} ({_fmt_counts(report['classes'][n])})"
                              for n in SPLIT_NAMES))
    if "languages" in report:
        lines.append(f"languages: {_fmt_counts(report['languages'])}")
    for name in ("chars", "tokens"):
        if name in report["lengths"]:
            lines.append(_fmt_lengths(name, report["lengths"][name]))
    longer = report["lengths"].get("longer_than_seq_len")
    if longer:
        lines.append(f"{longer['count']} messages longer than seq_len {longer['seq_len']} tokens (truncated)")
    for name in SPLIT_NAMES:  # a time split can leave a class out of a split: say so
        present = report["classes"][name]
        absent = [c for c in report["classes"]["all"] if c not in present]
        if report["split_sizes"][name] and absent:
            lines.append(f"warning: {name} has no {', '.join(absent)} messages")
    return lines
