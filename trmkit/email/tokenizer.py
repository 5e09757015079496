"""The e-mail tokenizer: normalisation in Python, byte-level BPE from Hugging Face `tokenizers`.

Why byte-level BPE (and not Unigram): mail arrives in every charset and script, often
mis-decoded; byte-level BPE represents any string without an <unk>, its merges are learned in
seconds on a CPU, and `encode_batch` is multi-threaded Rust. Unigram would need byte fallback
added by hand and trains slower.

What a byte-level BPE gets wrong for Turkish, and the fix: each of ç ğ ı ö ş ü (and â î û and
the capitals) is two UTF-8 bytes, and the learned merges may join a lead byte to the byte
*before* it (" " + 0xC3), leaving the letter's second byte as a token of its own. So after
training, one merge per letter is pinned at the top of the merge list (and the letter added to
the vocabulary if the trainer had not learned it): these letters always become one token first.
Merges that the pins make unreachable cost a few vocabulary slots and nothing else.

Normalisation (`normalize`, identical at training and encoding time):
    NFC; soft hyphens and zero-width characters dropped (spam uses them to split words);
    URLs -> "[url host]" with the host cut to its last three labels (an IP address -> "ip"):
    the domain is what spam filtering needs, the path is noise; e-mail addresses ->
    "[email domain]" (the local part is private and rarely generalises); Turkish-aware lower
    case ("İ" -> "i", "I" -> "ı" in Turkish text, else "i"; never str.lower()'s "i" + U+0307);
    runs of one character longer than 3 cut to 3; whitespace collapsed.

Layout of one encoded message (exactly seq_len ids, pad id 0):
    <cls> <subject> subject(<=48) <from> sender(<=24) <body> body-head [<tail> body-end] <pad>...
Long bodies are cut in characters *before* tokenising (first 8*seq_len, last 4*tail), so a
2 MB body costs no more than a short one.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from trmkit.email.prepare import detect_language
from trmkit.files import atomic_write

SPECIALS = ("<pad>", "<unk>", "<cls>", "<subject>", "<from>", "<body>", "<tail>")
PAD_ID, UNK_ID, CLS_ID, SUBJECT_ID, FROM_ID, BODY_ID, TAIL_ID = range(len(SPECIALS))
PINNED_LETTERS = "çğıöşüâîûÇĞİÖŞÜÂÎÛ"  # always one token each (see the module docstring)
SUBJECT_CAP, SENDER_CAP = 48, 24  # tokens kept from the subject and the sender
HEAD_CHARS_PER_TOKEN, TAIL_CHARS_PER_TOKEN = 8, 4  # character budget before tokenising
LANGUAGE_HEAD_CHARS = 4000  # body characters that decide a message's language
TRAIN_CHARS = 20_000  # characters of each training text used (bounds the cost of huge mail)
MAX_TOKEN_CHARS = 16  # no learned token longer than this (stops "=====...=" tokens)
MIN_VOCAB = len(SPECIALS) + 256 + len(PINNED_LETTERS) + 1  # specials + bytes + pins + 1 merge
TOKENIZER_FILE = "tokenizer.json"
_INSTALL_HINT = "pip install 'trmkit[email]'"

_INVISIBLE = re.compile("[\u00ad\u200b-\u200f\u2060\ufeff]")
_URL = re.compile(  # scheme or "www.", then up to a space or bracket; trailing punctuation stays text
    r"(?:\b(?:https?|ftp)://|\bwww\.)[^\s<>\"'()\[\]{}]*[^\s<>\"'()\[\]{}.,;:!?]", re.IGNORECASE)
_AT_DOMAIN = re.compile(r"@((?:[\w-]+\.)+[\w-]+)")  # starts with a literal: fast to scan for
_LOCAL_PART = re.compile(r"[\w.+-]+$")
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_REPEAT = re.compile(r"(.)\1\1\1+", re.DOTALL)


def _tokenizers() -> Any:
    """The `tokenizers` package, imported only when a tokenizer is built or loaded."""
    try:
        import tokenizers
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"the e-mail tokenizer needs Hugging Face 'tokenizers': {_INSTALL_HINT}") from exc
    return tokenizers


# ---------------------------------------------------------------- normalisation


def _short_host(host: str) -> str:
    """Lower-cased host without "www.", at most its last three labels; IPv4 -> "ip"."""
    host = host.lower().strip(".")
    if _IPV4.fullmatch(host):
        return "ip"
    host = host.removeprefix("www.")
    return ".".join(host.split(".")[-3:]) or "?"


def _url_marker(match: re.Match) -> str:
    rest = re.sub(r"^[a-z]+://", "", match.group(0), flags=re.IGNORECASE)
    host = re.split(r"[/?#]", rest, maxsplit=1)[0].rsplit("@", 1)[-1].split(":", 1)[0]
    return f" [url {_short_host(host)}] "


def _replace_urls(text: str) -> str:
    if "://" not in text and "www." not in text and "WWW." not in text:
        return text  # most lines: skip the regex scan
    return _URL.sub(_url_marker, text)


def _replace_emails(text: str) -> str:
    """local@domain -> " [email domain] ". Found from the "@" (a literal, so the scan is fast),
    then the local part is looked up just before it; "@handle" without one is left alone."""
    if "@" not in text:
        return text
    out, pos = [], 0
    for m in _AT_DOMAIN.finditer(text):
        local = _LOCAL_PART.search(text, max(pos, m.start() - 64), m.start())
        if local is None:
            continue
        out += [text[pos : local.start()], f" [email {_short_host(m.group(1))}] "]
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def turkish_lower(text: str, lang: str | None) -> str:
    """Lower case that is right for Turkish: "İ" -> "i"; "I" -> "ı" when lang is "tr", else "i".

    str.lower() maps "İ" to "i" + U+0307 (combining dot), which would make "İstanbul" and
    "istanbul" different tokens; a leftover "i" + U+0307 from earlier lowering is repaired too.
    """
    text = text.replace("İ", "i")
    if lang == "tr":
        text = text.replace("I", "ı")
    return text.lower().replace("i\u0307", "i")


def normalize(text: str, lang: str | None = None) -> str:
    """The text exactly as the tokenizer sees it (see the module docstring for each step).

    `lang` ("tr", "en", "other") only decides how "I" is lowered; None detects it.
    """
    text = _INVISIBLE.sub("", unicodedata.normalize("NFC", text))
    text = _replace_emails(_replace_urls(text))
    text = turkish_lower(text, detect_language(text) if lang is None else lang)
    return " ".join(_REPEAT.sub(r"\1\1\1", text).split())


# ---------------------------------------------------------------- training helpers


def _batches(texts: Iterable[str], counter: list[int], size: int = 512) -> Iterator[list[str]]:
    """Normalised training texts in batches (the trainer takes lists faster than single strings)."""
    batch: list[str] = []
    for text in texts:
        counter[0] += 1
        batch.append(normalize(text[:TRAIN_CHARS]))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _byte_pieces(tk: Any, letter: str) -> str:
    """The byte-level symbols of one letter, e.g. "ç" -> "Ã§"."""
    level = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    ((piece, _),) = level.pre_tokenize_str(letter)
    return piece


def _pin_letters(tk: Any, backend: Any) -> Any:
    """Put one merge per PINNED_LETTERS letter first in the merge list (adding the letter to
    the vocabulary where the trainer did not), so these letters are never split into bytes."""
    data = json.loads(backend.to_str())
    model = data["model"]
    vocab: dict[str, int] = model["vocab"]
    as_text = bool(model["merges"]) and isinstance(model["merges"][0], str)  # old "a b" format
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    next_id = 1 + max([*vocab.values(), *(t["id"] for t in data.get("added_tokens", []))])
    pins = []
    for letter in PINNED_LETTERS:
        piece = _byte_pieces(tk, letter)
        if len(piece) != 2:
            raise AssertionError(f"pinned letter {letter!r} is not 2 bytes in UTF-8")
        pins.append((piece[0], piece[1]))
        if piece not in vocab:
            vocab[piece] = next_id
            next_id += 1
    pinned = set(pins)
    merges = pins + [m for m in merges if m not in pinned]
    model["merges"] = [" ".join(m) if as_text else list(m) for m in merges]
    return tk.Tokenizer.from_str(json.dumps(data))


def _tokenizer_file(path: str | os.PathLike) -> Path:
    """`path` itself if it names a .json file, else path/tokenizer.json."""
    p = Path(path)
    return p if p.suffix == ".json" else p / TOKENIZER_FILE


# ---------------------------------------------------------------- the tokenizer


class EmailTokenizer:
    """Normalises and encodes (subject, sender, body) into fixed-length id rows."""

    def __init__(self, backend: Any, source: str = "<memory>"):
        """Wrap a trained `tokenizers.Tokenizer`; `source` names it in errors."""
        for want, token in enumerate(SPECIALS):
            got = backend.token_to_id(token)
            if got != want:
                raise ValueError(f"{source} is not an e-mail tokenizer: special token {token!r} has id "
                                 f"{got}, expected {want}; train one with EmailTokenizer.train")
        backend.encode_special_tokens = True  # "<body>" in an HTML mail is text, not our marker
        self._backend = backend
        self.vocab_size: int = backend.get_vocab_size(with_added_tokens=True)
        self.pad_id: int = PAD_ID
        self.dtype = np.dtype(np.uint16 if self.vocab_size <= 1 << 16 else np.int32)

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8192, min_frequency: int = 2) -> "EmailTokenizer":
        """Learn byte-level BPE merges from `texts` (the training split only: anything else
        leaks val/test vocabulary into the model). At most vocab_size ids result (fewer when
        the texts run out of pairs seen min_frequency times)."""
        if vocab_size < MIN_VOCAB:
            raise ValueError(f"vocab_size must be >= {MIN_VOCAB} ({len(SPECIALS)} specials + 256 bytes + "
                             f"{len(PINNED_LETTERS)} pinned letters + 1), got {vocab_size}")
        tk = _tokenizers()
        backend = tk.Tokenizer(tk.models.BPE())
        backend.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
        backend.decoder = tk.decoders.ByteLevel()
        trainer = tk.trainers.BpeTrainer(
            vocab_size=vocab_size - len(PINNED_LETTERS),  # room for pinned letters not learned
            min_frequency=min_frequency, special_tokens=list(SPECIALS), show_progress=False,
            initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(), max_token_length=MAX_TOKEN_CHARS,
        )
        seen = [0]
        backend.train_from_iterator(_batches(texts, seen), trainer)
        if seen[0] == 0:
            raise ValueError("no training texts: pass the training split's message texts")
        return cls(_pin_letters(tk, backend))

    def save(self, path: str | os.PathLike) -> Path:
        """Write tokenizer.json (plain JSON, the `tokenizers` format; nothing pickled) into the
        directory `path`, or to `path` itself if it ends in .json. Returns the file written."""
        target = _tokenizer_file(path)
        atomic_write(target, self.to_json())  # never a half-written tokenizer
        return target

    @classmethod
    def load(cls, path: str | os.PathLike) -> "EmailTokenizer":
        """Read what `save` wrote (a directory holding tokenizer.json, or the file itself)."""
        target = _tokenizer_file(path)
        if not target.is_file():
            raise FileNotFoundError(f"no tokenizer at {target}: train one with EmailTokenizer.train "
                                    "and save it")
        return cls.from_json(target.read_text(encoding="utf-8"), source=str(target))

    def to_json(self) -> str:
        """The tokenizer.json text (what `save` writes)."""
        return self._backend.to_str(pretty=True)

    @classmethod
    def from_json(cls, text: str, source: str = "<json>") -> "EmailTokenizer":
        """The inverse of `to_json`; `source` names the text in errors."""
        try:
            backend = _tokenizers().Tokenizer.from_str(text)
        except Exception as exc:
            raise ValueError(f"{source} is not a readable tokenizers JSON file: {exc}") from exc
        return cls(backend, source=source)

    def vocab(self) -> list[str]:
        """Token strings by id (byte-level symbols, e.g. "Ġhello"), for the store's meta.json."""
        out = [self._backend.id_to_token(i) for i in range(self.vocab_size)]
        missing = [i for i, t in enumerate(out) if t is None]
        if missing:
            raise ValueError(f"tokenizer ids are not contiguous: no token for id {missing[0]}")
        return out

    def tokens(self, text: str, lang: str | None = None, raw: bool = False) -> list[str]:
        """Each token of `text` decoded on its own (normalised first unless raw): for inspection
        and for checking that no token is a partial UTF-8 sequence ("\\ufffd")."""
        ids = self._backend.encode(text if raw else normalize(text, lang), add_special_tokens=False).ids
        return [self._backend.decode([i], skip_special_tokens=False) for i in ids]

    def decode(self, ids: Sequence[int]) -> str:
        """Readable text of an id row, markers shown, padding dropped."""
        return self._backend.decode([int(i) for i in ids if int(i) != PAD_ID], skip_special_tokens=False)

    def _encode_texts(self, texts: list[str]) -> list[list[int]]:
        """Ids of many normalised texts in one multi-threaded call."""
        fast = getattr(self._backend, "encode_batch_fast", None)  # no offsets: faster (>= 0.20)
        encs = (fast or self._backend.encode_batch)(texts, add_special_tokens=False)
        return [e.ids for e in encs]

    def encode_fields(self, subject: str, sender: str, body: str, seq_len: int, tail: int = 0) -> np.ndarray:
        """One message as (seq_len,) ids; see the module docstring for the layout."""
        return self.encode_batch([(subject, sender, body)], seq_len, tail)[0]

    def encode_batch(self, items: Sequence[tuple[str, str, str]], seq_len: int, tail: int = 0) -> np.ndarray:
        """(n, seq_len) ids for (subject, sender, body) items, pad id 0.

        Each message's language is detected once (subject + body head) and decides "I" -> "ı".
        With tail > 0 and a body that does not fit, the last `tail` body tokens follow <tail>.
        """
        plan = _Plan(seq_len, tail)
        texts: list[str] = []
        cut: list[bool] = []
        for subject, sender, body in items:
            fields, was_cut = plan.texts(subject, sender, body)
            texts += fields
            cut.append(was_cut)
        ids = self._encode_texts(texts)
        out = np.zeros((len(items), seq_len), dtype=self.dtype)
        for i, was_cut in enumerate(cut):
            row = plan.assemble(*ids[4 * i : 4 * i + 4], char_cut=was_cut)
            out[i, : len(row)] = row
        return out

    def count_tokens(self, items: Sequence[tuple[str, str, str]], max_chars: int = 100_000) -> np.ndarray:
        """Untruncated length in tokens (markers included) of each message, for the dataset
        report; bodies longer than max_chars are counted up to max_chars (a lower bound)."""
        texts: list[str] = []
        for subject, sender, body in items:
            lang = detect_language(subject + "\n" + body[:LANGUAGE_HEAD_CHARS])
            texts += [normalize(subject, lang), normalize(sender, lang), normalize(body[:max_chars], lang)]
        ids = self._encode_texts(texts)
        lengths = [4 + sum(len(x) for x in ids[i : i + 3]) for i in range(0, len(ids), 3)]
        return np.array(lengths, dtype=np.int64)


class _Plan:
    """Character budgets before tokenising and the token layout after, for one seq_len/tail."""

    def __init__(self, seq_len: int, tail: int):
        if seq_len < 8:
            raise ValueError(f"seq_len must be >= 8 (4 markers + subject, sender, body), got {seq_len}")
        if tail < 0:
            raise ValueError(f"tail must be >= 0, got {tail}")
        self.seq_len, self.tail = seq_len, tail
        self.subject_cap = min(SUBJECT_CAP, max(1, (seq_len - 4) // 3))
        self.sender_cap = min(SENDER_CAP, max(1, (seq_len - 4) // 6))
        self.head_chars = HEAD_CHARS_PER_TOKEN * seq_len
        self.tail_chars = TAIL_CHARS_PER_TOKEN * tail

    def texts(self, subject: str, sender: str, body: str) -> tuple[list[str], bool]:
        """Four normalised strings (subject, sender, body head, body end or "") and whether the
        body was cut in characters (then the end is taken from its last characters)."""
        cut = len(body) > self.head_chars + self.tail_chars
        head = body[: self.head_chars] if cut else body
        lang = detect_language(subject + "\n" + head[:LANGUAGE_HEAD_CHARS])
        end = normalize(self._end(body), lang) if cut and self.tail else ""
        return [
            normalize(subject[: HEAD_CHARS_PER_TOKEN * self.subject_cap], lang),
            normalize(sender[: HEAD_CHARS_PER_TOKEN * self.sender_cap], lang),
            normalize(head, lang),
            end,
        ], cut

    def _end(self, body: str) -> str:
        """The body's last tail_chars characters, less a word cut in half at their start."""
        end = body[-self.tail_chars :]
        if not body[-self.tail_chars - 1].isspace() and not end[:1].isspace():
            parts = end.split(None, 1)
            end = parts[1] if len(parts) == 2 else end
        return end

    def assemble(self, subject: list[int], sender: list[int], head: list[int], end: list[int],
                 char_cut: bool) -> list[int]:
        """The id row (<= seq_len ids, unpadded)."""
        row = [CLS_ID, SUBJECT_ID, *subject[: self.subject_cap], FROM_ID, *sender[: self.sender_cap], BODY_ID]
        room = self.seq_len - len(row)
        if not char_cut and len(head) <= room:
            return row + head
        n_tail = min(self.tail, (room - 1) // 2)
        if n_tail <= 0:
            return row + head[:room]
        n_head = room - 1 - n_tail
        last = end[-n_tail:] if char_cut else head[len(head) - n_tail :]
        return row + head[:n_head] + [TAIL_ID] + last
