"""Preparing decoded e-mail for training: language, splits, lengths and the dataset report.

The order matters and is the caller's contract: read -> `dedup.deduplicate` -> `split` ->
tokenizer trained on the training split only. Duplicates are removed *before* the split, so no
copy of a message can sit in train and in test (spam campaigns send near-identical mail by the
thousand; a split that lets them cross measures memory, not classification).

Language
    `detect_language` is a small heuristic, not a model; its rule is in its docstring.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import numpy as np

from trmkit.email.dedup import DedupResult
from trmkit.email.mail import Message

LANGUAGES = ("tr", "en", "other")
SPLIT_METHODS = ("stratified", "time", "thread", "sender")
SPLIT_NAMES = ("train", "val", "test")


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
_ASCII_WORD = re.compile(r"[A-Za-z]+")  # _WORD's words in ASCII text, found 2 x faster
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
    forwarded mail) do not vote. Measured in tests/email/test_prepare.py on the
    Turkish CSV and on SpamAssassin.
    """
    sample = text[:LANGUAGE_SAMPLE_CHARS]
    folded = _fold(sample)
    ascii_only = sample.isascii()  # then there is no non-Latin or Turkish letter to count (most mail)
    words = (_ASCII_WORD if ascii_only else _WORD).findall(folded)
    if not words:
        return "other"
    if not ascii_only and len(_NON_LATIN_LETTER.findall(sample)) * 2 > sum(map(len, words)):
        return "other"
    tr = sum(map(TR_STOPWORDS.__contains__, words))
    tr += (0 if ascii_only else len(_TR_LETTER_WORD.findall(sample))) + len(_TR_UNDECODED.findall(sample))
    en = sum(map(EN_STOPWORDS.__contains__, words))
    en = max(0, en - sum(folded.count(h) for h in HEADER_LABELS))
    needed = max(1.0, MIN_VOTE_SHARE * len(words))
    if tr > en and tr >= needed:
        return "tr"
    if en > tr and en >= needed:
        return "en"
    return "other"


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
                f"{needed} per class (one in each split): fold rare classes into Other with "
                "--min-class-count N, merge it into another class with a label map, or add data"
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


_REPLY_PREFIX = re.compile(r"^\s*((re|fwd?|fw|aw|wg|sv|vs|ynt|ilt|cevap|yan[ıi]t)\s*(\[\d+\])?\s*:|\[[^\]]*\])\s*",
                           re.IGNORECASE)


def thread_key(subject: str) -> str:
    """The subject without reply / forward prefixes and list tags ("Re: [x] Fwd: Hi" -> "hi")."""
    text = subject
    while True:
        cut = _REPLY_PREFIX.sub("", text, count=1)
        if cut == text:
            return " ".join(text.lower().split())
        text = cut


def sender_key(sender: str) -> str:
    """The sender's address, lower case ("Ann <Ann@X.org>" -> "ann@x.org"); "" when none."""
    from email.utils import parseaddr

    return parseaddr(sender)[1].strip().lower()


GROUP_SPLITS = ("thread", "sender")


def group_key(msg: Message, by: str) -> str:
    """The message's thread (`thread_key` of its subject) or sender (`sender_key`): by = thread | sender."""
    return thread_key(msg.subject) if by == "thread" else sender_key(msg.sender)


def _by_group(groups: Sequence[str] | None, n: int, val_fraction: float, test_fraction: float,
              seed: int) -> tuple[list[int], list[int], list[int]]:
    """Whole groups (threads, senders) to one split each, in a seeded random order: test first until
    it holds its share, then val, the rest train. An empty key is a group of one message."""
    if groups is None or len(groups) != n:
        raise ValueError("a split by thread or sender needs one key per message")
    members: dict[str, list[int]] = {}
    for i, key in enumerate(groups):
        members.setdefault(key or f"\0{i}", []).append(i)
    order = np.random.default_rng([seed, 3]).permutation(len(members))
    keys = list(members)
    want_test, want_val = _round_half_up(n * test_fraction), _round_half_up(n * val_fraction)
    train: list[int] = []
    val: list[int] = []
    test: list[int] = []
    for j in order:
        rows = members[keys[j]]
        target = test if len(test) < want_test else val if len(val) < want_val else train
        target += rows
    return train, val, test


def split(labels: list[str], val_fraction: float, test_fraction: float, seed: int,
          dates: list[float | None] | None = None, by: str = "stratified",
          groups: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train, val, test) row indices, each sorted.

    "stratified": per class (sorted by name), shuffled by np.random.default_rng([seed, 2]);
    round(n * test_fraction) go to test and round(n * val_fraction) to val, at least one each
    where the fraction is > 0. "time": oldest messages train, the next val, the newest test,
    which is how a filter meets mail in use (tomorrow's spam is not in today's training set).
    "thread" / "sender": every message of a thread (`thread_key`) or a sender (`sender_key`),
    given as `groups`, lands in one split, so no reply or no sender's look-alike crosses it.
    """
    _check_fractions(val_fraction, test_fraction)
    if by == "stratified":
        parts = _stratified(labels, val_fraction, test_fraction, seed)
    elif by == "time":
        parts = _by_time(dates, len(labels), val_fraction, test_fraction)
    elif by in GROUP_SPLITS:
        parts = _by_group(groups, len(labels), val_fraction, test_fraction, seed)
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
