"""Where `trmkit email label`'s answers come from: the terminal, a CSV round-trip, or (benchmarks) an oracle.

Each way saves every answer through label.save_answer as it arrives, so what was answered before
an interruption (Ctrl-C, a closed terminal, an error) is on disk.

    terminal  each proposal shown (subject, sender, the body's first lines, the model's guess); the answer
              is a class name or its number, 's' to skip it, 'q' to stop
    CSV       --csv-out FILE writes the proposals with an empty "label" column; fill it (a class name or
              number, 's' to skip, empty: no answer yet) and read it back with --answers FILE
    oracle    --oracle LABEL_STORE: the true labels from a store of the same mailbox and --seed built
              without --keep-labels, matched by label.message_key (the unlabelled rows' "where" is hidden)
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Callable

from trmkit.config import ConfigError
from trmkit.data.store import META_FILE
from trmkit.email.task import MESSAGES_FILE
from trmkit.email.label import QUIT, REFIT_EVERY, SKIP, Log, Pool, Proposal, message_key, propose, save_answer

BODY_LINES = 6  # lines of the body shown per proposal
LINE_CHARS = 100
CSV_COLUMNS = ("key", "rank", "score", "margin", "guess", "subject", "sender", "body", "label")


def body_lines(body: str, n: int = BODY_LINES) -> list[str]:
    """The body's first `n` non-blank lines, each cut to LINE_CHARS."""
    lines = [line.strip() for line in body.splitlines() if line.strip()][:n]
    return [line if len(line) <= LINE_CHARS else line[:LINE_CHARS - 1] + "…" for line in lines]


def show(pool: Pool, p: Proposal, rank: int, out: Log) -> None:
    r = pool.records[p.row]
    out(f"\n--- #{rank}  model's guess: {pool.classes[p.guess]} (margin {p.margin:.2f}: smaller is less sure; "
        f"score {p.score:.3f})")
    out(f"Subject: {r['subject']}")
    out(f"From:    {r['sender']}")
    for line in body_lines(r["body"]):
        out(f"  | {line}")


def parse_answer(text: str, classes: list[str]) -> str | None:
    """A class name, its number (1-based), SKIP or QUIT; anything else raises ValueError."""
    text = text.strip()
    if text.lower() in (SKIP, QUIT):
        return text.lower()
    if text.isdigit() and 1 <= int(text) <= len(classes):
        return classes[int(text) - 1]
    folded = {c.lower(): c for c in classes}
    if text.lower() in folded:
        return folded[text.lower()]
    raise ValueError(text)


def ask(pool: Pool, prompt: str, read: Callable[[str], str], out: Log) -> str:
    """Read answers until one parses (an empty line or a typo asks again)."""
    while True:
        try:
            return parse_answer(read(prompt), pool.classes)
        except ValueError as err:
            out(f"not an answer: {str(err)!r}; give a class name or number, {SKIP} (skip) or {QUIT} (quit)")


def terminal(pool: Pool, answers: list[dict], path: Path, count: int, read: Callable[[str], str],
             out: Log = print) -> int:
    """Ask about up to `count` messages, the model fitted again every REFIT_EVERY; how many were answered.
    EOF or Ctrl-C stops the session; every answer given is already saved."""
    menu = "  ".join(f"{i}={c}" for i, c in enumerate(pool.classes, 1))
    prompt, given = f"label ({menu}, {SKIP}=skip, {QUIT}=quit): ", 0
    try:
        while given < count:
            batch = propose(pool, answers, min(REFIT_EVERY, count - given), out)
            if not batch:
                out("label: every unlabelled message has an answer")
                break
            for p in batch:
                show(pool, p, given + 1, out)
                reply = ask(pool, prompt, read, out)
                if reply == QUIT:
                    return given
                save_answer(path, answers, pool, p.row, None if reply == SKIP else reply, "terminal")
                given += 1
    except (KeyboardInterrupt, EOFError):
        out(f"\nlabel: stopped; the {given} answer(s) of this session are saved in {path}")
    return given


def write_csv(pool: Pool, proposals: list[Proposal], path: Path) -> None:
    """The proposals with an empty label column, atomically."""
    import io

    from trmkit.files import atomic_write

    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(CSV_COLUMNS)
    for rank, p in enumerate(proposals, 1):
        r = pool.records[p.row]
        writer.writerow([pool.keys[p.row], rank, f"{p.score:.4f}", f"{p.margin:.3f}", pool.classes[p.guess],
                         r["subject"], r["sender"], "\n".join(body_lines(r["body"])), ""])
    atomic_write(path, buf.getvalue())


def read_csv(pool: Pool, answers: list[dict], path: Path, store_path: Path, out: Log = print) -> int:
    """Save every filled-in label of a --csv-out file; how many. A bad label or key is refused before any is saved."""
    rows, parsed = pool.row_of(), []
    with open(path, newline="", encoding="utf-8") as f:
        for n, item in enumerate(csv.DictReader(f), 2):
            if "key" not in item or "label" not in item:
                raise ConfigError(f"{path}: needs the columns key and label (as --csv-out writes them)")
            if not (item["label"] or "").strip():
                continue
            if item["key"] not in rows:
                raise ConfigError(f"{path}:{n}: key {item['key']} names no unlabelled message of {pool.store}")
            try:
                reply = parse_answer(item["label"], pool.classes)
            except ValueError:
                reply = QUIT
            if reply == QUIT:
                raise ConfigError(f"{path}:{n}: label {item['label']!r}: give one of {', '.join(pool.classes)}, "
                                  f"its number, or {SKIP} to skip")
            parsed.append((rows[item["key"]], None if reply == SKIP else reply))
    for row, label in parsed:
        save_answer(store_path, answers, pool, row, label, "csv")
    out(f"label: {len(parsed)} answer(s) read from {path} and saved in {store_path}")
    return len(parsed)


def oracle_labels(pool: Pool, label_store: Path) -> dict[str, str]:
    """{message_key: label} from a store of the same source and --seed built without --keep-labels."""
    meta = json.loads((label_store / "train" / META_FILE).read_text())
    mine, theirs = pool.meta.get("build", {}), meta.get("build", {})
    if theirs.get("keep_labels"):
        raise ConfigError(f"--oracle {label_store}: built with --keep-labels; the oracle needs every label")
    if (meta.get("source"), theirs.get("seed")) != (pool.meta.get("source"), mine.get("seed")):
        raise ConfigError(f"--oracle {label_store}: source/seed {meta.get('source')}/{theirs.get('seed')} differ "
                          f"from {pool.meta.get('source')}/{mine.get('seed')}")
    labels = {}
    for split in ("train", "val", "test"):
        path = label_store / split / MESSAGES_FILE
        if path.is_file():
            labels.update({message_key(r): r["label"] for r in json.loads(path.read_text())})
    return labels


def oracle(pool: Pool, answers: list[dict], path: Path, count: int, label_store: Path, out: Log = print) -> int:
    """Answer `count` proposals from the oracle's labels, the model fitted again every REFIT_EVERY."""
    truth, given = oracle_labels(pool, label_store), 0
    while given < count:
        batch = propose(pool, answers, min(REFIT_EVERY, count - given), out)
        if not batch:
            break
        for p in batch:
            label = truth.get(pool.keys[p.row])
            if label is None:
                raise ConfigError(f"--oracle {label_store} does not hold message {pool.keys[p.row]} "
                                  f"({pool.records[p.row]['subject']!r}): was it built from the same source and seed?")
            save_answer(path, answers, pool, p.row, label, "oracle")
            given += 1
    return given
