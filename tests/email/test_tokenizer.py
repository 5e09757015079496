"""Tests for trmkit.email.tokenizer: normalisation, Turkish letters, layout, save/load."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import numpy as np
import pytest

from trmkit.email.tokenizer import (
    BODY_ID,
    CLS_ID,
    FROM_ID,
    PAD_ID,
    SPECIALS,
    SUBJECT_ID,
    TAIL_ID,
    EmailTokenizer,
    normalize,
)

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TURKISH_CSV = DATA / "email" / "turkish" / "trspam_v01.csv"
TURKISH_LETTERS = "çğıöşü ÇĞIİÖŞÜ"

ENGLISH = [
    "Dear customer, your account has been selected for a special offer. Click below to claim your prize.",
    "Hi Bob, the meeting is moved to Thursday at noon. Please bring the quarterly report and the slides.",
    "Café résumé naïve: the exposé about the fiancée was a déjà vu for the entrée committee.",
    "Get cheap meds online now!!! Best prices, fast delivery, no prescription needed.",
    "Re: build failure on the main branch. The tests pass locally; could you check the CI logs?",
]


def read_turkish_texts(limit: int | None = None) -> list[str]:
    if not TURKISH_CSV.exists():
        pytest.fail(f"real e-mail data missing at {TURKISH_CSV}: ../shared/data from the repository root "
                    "must hold email/turkish/trspam_v01.csv")
    with open(TURKISH_CSV, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f))[1:]
    texts = [",".join(r[:-1]) for r in rows if r and r[-1] in ("ham", "spam")]  # skips the junk last row
    return texts[:limit]


@pytest.fixture(scope="module")
def english_tok() -> EmailTokenizer:
    """Trained on English only: Turkish letters never occur, so only pinning keeps them whole."""
    return EmailTokenizer.train(ENGLISH * 40, vocab_size=400, min_frequency=2)


@pytest.fixture(scope="module")
def turkish_texts() -> list[str]:
    return read_turkish_texts(400)


@pytest.fixture(scope="module")
def turkish_tok(turkish_texts) -> EmailTokenizer:
    return EmailTokenizer.train(turkish_texts, vocab_size=2000)


# ---------------------------------------------------------------- normalisation


def test_turkish_casing():
    assert normalize("İSTANBUL") == "istanbul"
    assert "\u0307" not in normalize("İSTANBUL İZMİR", "en")
    assert normalize("I\u0307STANBUL", "tr") == "istanbul"  # decomposed İ composes first (NFC)
    assert normalize("IRMAK", "tr") == "ırmak"
    assert normalize("IRMAK", "en") == "irmak"
    assert normalize("I am here", "en") == "i am here"
    assert normalize("ISPARTA ve IĞDIR için") == "ısparta ve ığdır için"  # detected as Turkish
    assert normalize("ÇĞÖŞÜ", "tr") == "çğöşü"


def test_urls_addresses_repeats_and_whitespace():
    text = ("Visit http://www.Shop.Example.CO.UK/a/b?c=1 or www.deals.com.tr/x, "
            "mail Foo.Bar@Mail.Yahoo.com now!!!!!!!! \u200bfr\u00adee\n\n\t ok (@handle) "
            "http://10.1.2.3:80/p")
    assert normalize(text, "en") == ("visit [url example.co.uk] or [url deals.com.tr] , "
                                     "mail [email mail.yahoo.com] now!!! free ok (@handle) [url ip]")
    assert normalize("Ooooooooh", "en") == "ooo" + "h"


# ---------------------------------------------------------------- Turkish letters


@pytest.mark.parametrize("which", ["english_tok", "turkish_tok"])
def test_turkish_letters_are_never_split_into_bytes(which, request):
    tok = request.getfixturevalue(which)
    sentence = "Şişli'de güzel bir gün; ÇAĞRI İĞNE ÖĞÜN"
    for text in (TURKISH_LETTERS, sentence, normalize(TURKISH_LETTERS)):
        pieces = tok.tokens(text, raw=True)
        assert all("\ufffd" not in p for p in pieces), pieces  # no partial UTF-8 sequence
        assert "".join(pieces).replace(" ", "") == text.replace(" ", "")


# ---------------------------------------------------------------- vocabulary and files


def test_vocab_matches_vocab_size(english_tok):
    v = english_tok.vocab()
    assert len(v) == english_tok.vocab_size <= 400
    assert tuple(v[: len(SPECIALS)]) == SPECIALS and english_tok.pad_id == 0
    rows = english_tok.encode_batch([("Subject", "a@b.com", t) for t in ENGLISH], seq_len=64)
    assert rows.dtype == np.uint16 and rows.max() < english_tok.vocab_size


def test_save_load_round_trip_is_plain_json(turkish_tok, turkish_texts, tmp_path):
    items = [("Konu: " + t[:40], "Ali <ali@firma.com.tr>", t) for t in turkish_texts[:50]]
    before = turkish_tok.encode_batch(items, seq_len=128, tail=16)
    written = turkish_tok.save(tmp_path / "tok")
    assert written == tmp_path / "tok" / "tokenizer.json"
    assert [p.name for p in (tmp_path / "tok").iterdir()] == ["tokenizer.json"]
    json.loads(written.read_text(encoding="utf-8"))  # plain JSON, nothing pickled
    loaded = EmailTokenizer.load(tmp_path / "tok")
    assert np.array_equal(loaded.encode_batch(items, seq_len=128, tail=16), before)
    assert loaded.vocab() == turkish_tok.vocab()
    from_text = EmailTokenizer.from_json(turkish_tok.to_json())
    assert np.array_equal(from_text.encode_batch(items, seq_len=128, tail=16), before)


def test_load_errors_name_the_problem(tmp_path, english_tok):
    with pytest.raises(FileNotFoundError, match="no tokenizer at"):
        EmailTokenizer.load(tmp_path / "missing")
    path = english_tok.save(tmp_path / "x.json")
    data = json.loads(path.read_text())
    for token in data["added_tokens"]:
        if token["content"] == "<cls>":
            token["content"] = "<CLS>"
    data["model"]["vocab"]["<CLS>"] = data["model"]["vocab"].pop("<cls>")
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="not an e-mail tokenizer: special token '<cls>'"):
        EmailTokenizer.load(path)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken.json is not a readable tokenizers JSON"):
        EmailTokenizer.load(tmp_path / "broken.json")
    with pytest.raises(ValueError, match="vocab_size must be >="):
        EmailTokenizer.train(ENGLISH, vocab_size=100)


# ---------------------------------------------------------------- layout and truncation


def test_layout_of_a_short_message(english_tok):
    row = english_tok.encode_fields("Meeting", "bob@example.com", "See you at noon.", seq_len=48)
    assert row.shape == (48,)
    ids = row.tolist()
    assert ids[:2] == [CLS_ID, SUBJECT_ID]
    assert ids.index(FROM_ID) < ids.index(BODY_ID)
    assert TAIL_ID not in ids
    n = ids.index(PAD_ID)
    assert all(i == PAD_ID for i in ids[n:]) and n > ids.index(BODY_ID) + 3
    assert english_tok.decode(row).endswith("see you at noon.")


def test_huge_body_keeps_subject_and_tail_and_costs_nothing(english_tok):
    body = "Start of the message. " + "filler words again " * 110_000 + "the final zebraend"  # ~2 MB
    start = time.process_time()  # CPU seconds (all of this process's threads): a busy machine stretches wall time
    row = english_tok.encode_fields("Invoice overdue", "billing@shop.com", body, seq_len=64, tail=8)
    assert time.process_time() - start < 0.5
    ids = row.tolist()
    assert len(ids) == 64 and PAD_ID not in ids  # cut: every slot used
    text = english_tok.decode(row)
    assert text.startswith("<cls><subject> invoice overdue<from>") and "<body> start of the message." in text
    assert ids.count(TAIL_ID) == 1 and len(ids) - 1 - ids.index(TAIL_ID) == 8
    assert text.endswith("zebraend")


def test_tail_when_the_body_overflows_in_tokens_only(english_tok):
    body = " ".join(f"q{i}" for i in range(100))  # ~390 chars: no character cut at seq_len 64
    row = english_tok.encode_fields("s", "f", body, seq_len=64, tail=6).tolist()
    assert row.count(TAIL_ID) == 1 and PAD_ID not in row
    assert english_tok.decode(row).endswith("q99")
    no_tail = english_tok.encode_fields("s", "f", body, seq_len=64).tolist()
    assert TAIL_ID not in no_tail
    assert english_tok.decode(no_tail).startswith("<cls><subject> s<from> f<body> q0 q1")


def test_subject_and_sender_are_capped(english_tok):
    row = english_tok.encode_fields("word " * 200, "name " * 100, "body text", seq_len=256).tolist()
    assert row.index(FROM_ID) - 2 == 48  # subject tokens between <subject> and <from>
    assert row.index(BODY_ID) - row.index(FROM_ID) - 1 == 24
    assert english_tok.decode(row).endswith("body text")


def test_markers_in_the_text_are_not_special(english_tok):
    row = english_tok.encode_fields("<body> <cls>", "", "<tail> <pad> html", seq_len=32).tolist()
    assert row.count(BODY_ID) == 1 and row.count(CLS_ID) == 1 and TAIL_ID not in row
    assert row.index(PAD_ID) > 10


def test_encode_batch_equals_encode_fields(english_tok):
    items = [("Hello", "x@y.org", t) for t in ENGLISH] + [("", "", "")]
    batch = english_tok.encode_batch(items, seq_len=40, tail=4)
    for i, item in enumerate(items):
        assert np.array_equal(batch[i], english_tok.encode_fields(*item, seq_len=40, tail=4))
    with pytest.raises(ValueError, match="seq_len must be >= 8"):
        english_tok.encode_batch(items, seq_len=4)


# ---------------------------------------------------------------- real data


def test_train_on_real_turkish_texts_in_seconds():
    texts = read_turkish_texts(400)
    start = time.process_time()  # CPU seconds of every thread of this process, not the wall clock
    tok = EmailTokenizer.train(texts, vocab_size=3000)
    seconds = time.process_time() - start
    assert seconds < 15, f"training took {seconds:.1f} CPU seconds"
    assert 1500 < tok.vocab_size <= 3000
    for word in ("için", "ve", "bir", "üniversitesi"):
        assert len(tok.tokens(word, lang="tr")) <= 2, (word, tok.tokens(word, lang="tr"))
    counts = tok.count_tokens([("", "", t) for t in texts[:20]])
    assert counts.shape == (20,) and np.all(counts >= 4)
