"""Tests for trmkit.email.dedup and trmkit.email.prepare: duplicates, language, splits, lengths and the report.

Messages are built directly (no dependency on the mail reader, email/mail/); the real-data tests decode the
corpora minimally here with the standard library.
"""

from __future__ import annotations

import csv
import email
import email.policy
import html
import itertools
import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from trmkit.email.dedup import deduplicate, lsh_shape
from trmkit.email.mail import Message
from trmkit.email.prepare import (
    dataset_report,
    detect_language,
    length_stats,
    message_text,
    report_lines,
    split,
)

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SPAMASSASSIN = DATA / "email" / "spamassassin"
TURKISH_CSV = DATA / "email" / "turkish" / "trspam_v01.csv"
TAG = re.compile(r"<[^>]*>")


def require(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"real e-mail data missing at {path}: the shared data folder (../shared/data from the "
                    "repository root) must hold email/spamassassin and email/turkish/trspam_v01.csv")
    return path


def words_text(rng: np.random.Generator, n: int = 200, vocab: int = 5000) -> list[str]:
    """n made-up words from a large vocabulary: two such texts share almost no 5-shingles."""
    return [f"w{int(x)}" for x in rng.integers(0, vocab, size=n)]


def read_turkish_csv() -> list[tuple[str, str]]:
    """(text, label) rows. Texts hold unquoted commas, so the label is the last column; the
    junk last row (",,496") has no ham/spam label and is skipped."""
    with open(require(TURKISH_CSV), encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f))[1:]
    return [(",".join(r[:-1]), r[-1]) for r in rows if r and r[-1] in ("ham", "spam")]


def read_spamassassin(per_folder: int) -> list[tuple[str, str]]:
    """(message text, folder) for the first files of each folder, minimally decoded."""
    out = []
    for folder in ("easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2"):
        for path in sorted(require(SPAMASSASSIN / folder).iterdir())[:per_folder]:
            msg = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
            try:
                part = msg.get_body(preferencelist=("plain", "html"))
                body = part.get_content() if part is not None else ""
            except (LookupError, ValueError, AttributeError):  # bogus charsets, odd parts
                body = ""
            body = html.unescape(TAG.sub(" ", body)) if isinstance(body, str) else ""  # HTML -> text, roughly
            m = Message(subject=str(msg.get("subject", "") or ""), sender=str(msg.get("from", "") or ""),
                        body=body)
            out.append((message_text(m), folder))
    return out


# ---------------------------------------------------------------- message text


def test_message_text_joins_subject_sender_body():
    assert message_text(Message(subject="Hi", sender="a@b.c", body="text")) == "Hi\na@b.c\ntext"


# ---------------------------------------------------------------- duplicates


def test_exact_duplicates_ignore_case_and_whitespace():
    texts = ["Win a FREE prize now", "win a free   prize\nnow", "Meeting at noon", "WIN A FREE PRIZE NOW"]
    r = deduplicate(texts)
    assert (r.exact, r.near) == (2, 0)
    assert r.keep == [0, 2]
    assert r.groups == [[0, 1, 3]]
    assert r.duplicate_of == {1: 0, 3: 0}


def test_one_word_changed_in_200_is_a_near_duplicate_and_another_text_is_not():
    rng = np.random.default_rng(1)
    base = words_text(rng)
    changed = list(base)
    changed[100] = "different"
    other = words_text(rng)
    r = deduplicate([" ".join(base), " ".join(changed), " ".join(other)])
    assert (r.exact, r.near) == (0, 1)
    assert r.keep == [0, 2]
    assert r.duplicate_of == {1: 0}


def test_near_threshold_is_respected():
    rng = np.random.default_rng(2)
    base = words_text(rng)
    changed = list(base)
    for i in (20, 60, 100, 140, 180):  # 5 words changed: Jaccard 175/225 = 0.78
        changed[i] = f"x{i}"
    texts = [" ".join(base), " ".join(changed)]
    assert deduplicate(texts, near_threshold=0.9).near == 0
    assert deduplicate(texts, near_threshold=0.7).near == 1


def test_short_texts_use_character_shingles():
    texts = ["Your parcel is waiting, confirm delivery", "Your parcel is waiting, confirm delivery!",
             "Lunch tomorrow?"]
    r = deduplicate(texts, near_threshold=0.85)
    assert r.duplicate_of == {1: 0}


def test_lsh_shape_finds_pairs_at_the_threshold():
    bands, rows = lsh_shape(0.9)
    assert bands * rows == 128
    assert 1 - (1 - 0.9**rows) ** bands >= 0.995
    assert 1 - (1 - 0.5**rows) ** bands < 0.1  # dissimilar pairs rarely become candidates


def planted_set(seed: int = 0) -> tuple[list[str], list[str], list[list[int]]]:
    """300 distinct messages of 150-300 words in two classes plus 100 planted copies (exact,
    upper-cased, or with one word changed: Jaccard >= 0.94), shuffled. Returns texts, labels
    and the positions of each original's family (the original and its copies)."""
    rng = np.random.default_rng(seed)
    originals = [words_text(rng, n=int(rng.integers(150, 300))) for _ in range(300)]
    labels = ["spam" if i % 3 == 0 else "ham" for i in range(300)]
    items = [(" ".join(w), labels[i], i) for i, w in enumerate(originals)]
    for k in range(100):
        src = int(rng.integers(0, 300))
        copy = list(originals[src])
        if k % 3 == 1:
            copy = [w.upper() for w in copy]
        elif k % 3 == 2:
            copy[len(copy) // 2] = "changed"
        items.append((" ".join(copy), labels[src], src))
    order = rng.permutation(len(items))
    families: list[list[int]] = [[] for _ in range(300)]
    for pos, i in enumerate(order):
        families[items[i][2]].append(pos)
    return [items[i][0] for i in order], [items[i][1] for i in order], families


def shingles5(text: str) -> set[tuple[str, ...]]:
    w = text.lower().split()
    return {tuple(w[i : i + 5]) for i in range(len(w) - 4)}


def test_planted_duplicates_are_removed_and_none_crosses_the_split():
    texts, labels, families = planted_set()
    r = deduplicate(texts, labels)
    # 100 copies removed, whichever family member comes first; exact + near depends on order
    # (an original after its changed copy is the near duplicate).
    assert (r.removed, r.conflicts) == (100, 0) and r.exact >= 60 and r.near >= 25
    keep = set(r.keep)
    for family in families:  # exactly one of each family survives: its first in input order
        assert [p for p in family if p in keep] == [min(family)]
    kept_labels = [labels[i] for i in r.keep]
    parts = split(kept_labels, 0.15, 0.15, seed=0)
    where = {}
    for name, idx in zip(("train", "val", "test"), parts):
        for j in idx:
            where[r.keep[j]] = name
    # Independent check (Python sets, all pairs): no two kept texts in different splits are
    # >= 0.9 similar, so nothing learned in train is tested again.
    sets = {i: shingles5(texts[i]) for i in r.keep}
    for i, j in itertools.combinations(r.keep, 2):
        if where[i] != where[j]:
            a, b = sets[i], sets[j]
            assert len(a & b) < 0.9 * len(a | b), (i, j)


def test_dedup_is_deterministic_and_counts_label_conflicts():
    texts, labels, _ = planted_set(seed=3)
    first = deduplicate(texts, labels, seed=5)
    again = deduplicate(texts, labels, seed=5)
    other_seed = deduplicate(texts, labels, seed=6)
    assert first == again
    assert first.keep == other_seed.keep  # verified Jaccard: the seed only changes the hashing
    conflicted = list(labels)
    dup, kept = next(iter(first.duplicate_of.items()))
    conflicted[dup] = "ham" if labels[kept] == "spam" else "spam"
    r = deduplicate(texts, conflicted)
    assert r.conflicts == 1 and kept in r.keep and dup not in r.keep


def test_dedup_of_6000_spamassassin_sized_texts_takes_seconds():
    rng = np.random.default_rng(4)
    vocab = np.array([f"w{i}" for i in range(20000)])
    lengths = np.minimum(rng.lognormal(5.3, 1.0, size=6000).astype(int) + 5, 15000)  # median ~200 words
    texts = [" ".join(vocab[rng.integers(0, 20000, size=n)]) for n in lengths]
    texts += texts[:50]
    start = time.process_time()  # CPU seconds of this process: a busy machine stretches the wall clock
    r = deduplicate(texts)  # (beside a loaded suite: 15.5 s of wall clock), not the work done
    seconds = time.process_time() - start
    assert r.exact == 50
    assert seconds < 15, f"dedup of {len(texts)} texts took {seconds:.1f} CPU seconds (a quadratic pairing?)"


# ---------------------------------------------------------------- splits


def test_stratified_split_proportions_per_class():
    labels = ["ham"] * 500 + ["spam"] * 120 + ["phish"] * 37
    rng = np.random.default_rng(0)
    labels = [labels[i] for i in rng.permutation(len(labels))]
    train, val, test = split(labels, 0.1, 0.2, seed=7)
    assert sorted(np.concatenate([train, val, test]).tolist()) == list(range(len(labels)))
    for part in (train, val, test):
        assert np.all(np.diff(part) > 0)  # sorted, no repeats
    y = np.array(labels)
    for cls, n in (("ham", 500), ("spam", 120), ("phish", 37)):
        assert abs(np.sum(y[val] == cls) - n * 0.1) <= 1
        assert abs(np.sum(y[test] == cls) - n * 0.2) <= 1
    again = split(labels, 0.1, 0.2, seed=7)
    assert all(np.array_equal(a, b) for a, b in zip((train, val, test), again))
    assert not np.array_equal(split(labels, 0.1, 0.2, seed=8)[2], test)


def test_every_class_in_every_split():
    labels = ["a"] * 3 + ["b"] * 4 + ["c"] * 50
    for part in split(labels, 0.05, 0.05, seed=0):
        assert {labels[i] for i in part} == {"a", "b", "c"}


def test_tiny_class_is_an_error_naming_it():
    labels = ["ham"] * 40 + ["spam"] * 20 + ["phishing"] * 2
    with pytest.raises(ValueError, match=r"'phishing' has 2 message.*label map"):
        split(labels, 0.1, 0.1, seed=0)
    with pytest.raises(ValueError, match="1 messages have no label.*index 5"):
        split(["ham"] * 5 + [None] + ["spam"] * 5, 0.1, 0.1, seed=0)


def test_thread_and_sender_keys():
    from trmkit.email.prepare import sender_key, thread_key

    assert thread_key("Re: [ILUG] Fwd:  Meeting  Notes") == "meeting notes" == thread_key("meeting notes")
    assert thread_key("YNT: Toplantı") == "toplantı" and thread_key("Re[2]: x") == "x"
    assert thread_key("Reorganisation: plans") == "reorganisation: plans"  # a word, not a prefix
    assert sender_key("Ann Smith <Ann@Example.ORG>") == "ann@example.org" and sender_key("") == ""


def test_a_group_split_keeps_every_thread_in_one_split():
    rng = np.random.default_rng(1)
    groups = [f"thread{int(g)}" for g in rng.integers(0, 60, 500)] + [""] * 40  # "" : a thread of one
    labels = ["ham", "spam"] * 270
    train, val, test = split(labels, 0.1, 0.2, seed=0, by="thread", groups=groups)
    assert sorted(np.concatenate([train, val, test]).tolist()) == list(range(540))
    where = {}
    for name, rows in (("train", train), ("val", val), ("test", test)):
        for i in rows:
            if groups[i]:
                assert where.setdefault(groups[i], name) == name  # no thread crosses a split
    assert 0.15 < len(test) / 540 < 0.3 and len(val) > 0
    with pytest.raises(ValueError, match="one key per message"):
        split(labels, 0.1, 0.2, seed=0, by="sender")


def test_time_split_orders_by_date_and_needs_dates():
    rng = np.random.default_rng(0)
    dates = rng.uniform(1e9, 1.1e9, size=100).tolist()
    labels = ["ham", "spam"] * 50
    train, val, test = split(labels, 0.1, 0.2, seed=0, dates=dates, by="time")
    assert (len(train), len(val), len(test)) == (70, 10, 20)
    d = np.array(dates)
    assert d[train].max() < d[val].min() and d[val].max() < d[test].min()
    dates[3] = dates[50] = None
    with pytest.raises(ValueError, match=r"2 of 100 messages have no date.*stratified"):
        split(labels, 0.1, 0.2, seed=0, dates=dates, by="time")
    with pytest.raises(ValueError, match="stratified"):
        split(labels, 0.1, 0.2, seed=0, by="time")
    with pytest.raises(ValueError, match="unknown split method 'random'"):
        split(labels, 0.1, 0.2, seed=0, by="random")
    with pytest.raises(ValueError, match="sum < 1"):
        split(labels, 0.5, 0.5, seed=0)


# ---------------------------------------------------------------- language


@pytest.mark.parametrize("text, lang", [
    ("Toplantı yarın saat onda, lütfen geç kalmayın.", "tr"),
    ("Yarin toplanti var, gelmeyi unutma lutfen", "tr"),  # Turkish typed without Turkish letters
    ("Kullan=C4=B1c=C4=B1 ad=C4=B1n=C4=B1z de=C4=9Fi=C5=9Fti", "tr"),  # undecoded quoted-printable
    ("Please find the report attached and let me know if you have any questions.", "en"),
    ("Ich habe heute keine Zeit, weil ich arbeiten muss", "other"),
    ("Привет, как дела? Увидимся завтра", "other"),
    ("", "other"),
])
def test_detect_language_sentences(text, lang):
    assert detect_language(text) == lang


def test_detect_language_on_real_data():
    """Measured: 699 of 825 Turkish CSV rows say tr (84.7 %); the rest are base64 (26) or raw
    HTML (22) nobody decoded, a few words (12), or English-dominant (61: notifications,
    English mail). SpamAssassin: 98.3 % en over all 6046; the rest is CJK/Korean/Turkish spam."""
    turkish = read_turkish_csv()
    assert len(turkish) == 825
    tr_share = np.mean([detect_language(t) == "tr" for t, _ in turkish])
    assert tr_share >= 0.82, f"only {tr_share:.1%} of the Turkish CSV detected as tr"
    english = read_spamassassin(per_folder=60)
    assert len(english) == 300
    en_share = np.mean([detect_language(t) == "en" for t, _ in english])
    assert en_share >= 0.9, f"only {en_share:.1%} of 300 SpamAssassin messages detected as en"


# ---------------------------------------------------------------- lengths and report


def test_length_stats():
    s = length_stats(list(range(1, 101)))
    assert (s["count"], s["min"], s["max"], s["mean"]) == (100, 1, 100, 50.5)
    assert s["p50"] == pytest.approx(50.5) and s["p90"] == pytest.approx(90.1)
    assert length_stats([])["count"] == 0


def test_report_mentions_duplicates_imbalance_and_splits():
    texts = ["offer now"] * 3 + [f"message number {i} about things" for i in range(40)]
    labels = ["spam"] * 3 + ["ham"] * 30 + ["spam"] * 10
    labels[1] = "ham"  # a duplicate with a different label: one conflict
    dedup = deduplicate(texts, labels)
    kept = [labels[i] for i in dedup.keep]
    parts = split(kept, 0.1, 0.1, seed=3)
    report = dataset_report(total_read=45, dedup=dedup, labels=kept, rows=parts, split_by="stratified",
                            seed=3, languages=["en"] * len(kept),
                            char_lengths=[len(texts[i]) for i in dedup.keep],
                            token_lengths=[300] * 5 + [10] * (len(kept) - 5), seq_len=256,
                            skipped={"no body": 2})
    assert report["duplicates"] == {"exact": 2, "near": 0, "conflicts": 1, "groups": 1, "kept": 41}
    assert report["classes"]["all"] == {"ham": 30, "spam": 11}
    assert report["imbalance_ratio"] == pytest.approx(30 / 11)
    assert sum(report["split_sizes"].values()) == 41
    text = "\n".join(report_lines(report))
    assert "duplicates removed: 2 exact, 0 near" in text
    assert "1 groups with conflicting labels" in text
    assert "imbalance 2.73:1" in text
    assert "split stratified (seed 3)" in text
    assert "languages: en 41" in text
    assert "5 messages longer than seq_len 256" in text
    assert "2 skipped" in text
    json.dumps(report)  # goes into meta.json as is
    as_dict = dataset_report(total_read=45, dedup=dedup, labels=kept, seed=3,
                             rows=dict(zip(("train", "val", "test"), parts)),
                             messages=[Message(subject="", sender="", body=texts[i]) for i in dedup.keep],
                             token_lengths={"train": [5, 7], "test": [9]})
    assert as_dict["split_sizes"] == report["split_sizes"]
    assert as_dict["lengths"]["chars"]["max"] == len(texts[-1]) + 2  # message_text adds two newlines
    assert as_dict["lengths"]["tokens"]["count"] == 3
    assert not any(line.startswith("warning") for line in report_lines(report))
    lopsided = dataset_report(total_read=4, dedup=deduplicate(["a", "b", "c", "d"]),
                              labels=["x", "x", "y", "y"], rows=([0, 2], [1], [3]), seed=0, split_by="time")
    assert report_lines(lopsided)[-2:] == ["warning: val has no y messages",
                                           "warning: test has no x messages"]
