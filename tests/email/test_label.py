"""`trmkit email label`: proposals, answers saved at once, Ctrl-C and resume, CSV, oracle, --apply."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from trmkit import cli
from trmkit.config import ConfigError
from trmkit.data.store import open_store
from trmkit.email import label, label_ask
from trmkit.email.fewlabels import UNLABELLED

CLASSES = ("ham", "news", "spam")


def write_mail(folder: Path, per_class: int = 10) -> Path:
    """Hand-made .eml files, a folder per class; each class leans on its own words (random: no duplicates)."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(CLASSES):
        (folder / name).mkdir(parents=True)
        words = [f"{name}word{i}" for i in range(30)] + [f"shared{i}" for i in range(30)]
        for i in range(per_class):
            body = "\n".join(" ".join(rng.choice(words, 8)) for _ in range(4))
            (folder / name / f"{i}.eml").write_text(
                f"From: {name}{i} <{name}{i}@example.org>\nTo: me@example.org\nSubject: {name} note {i}\n"
                f"Message-ID: <{name}.{i}@example.org>\nDate: Mon, 2 Nov 2026 10:{i:02d}:00 +0000\n\n{body}\n")
    return folder


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[Path, Path]:
    """(a --keep-labels 2 store, the same mailbox and seed with every label), built once."""
    root = tmp_path_factory.mktemp("label")
    mail = write_mail(root / "mail")
    common = ["data", "email", "--source", str(mail), "--vocab-size", "300", "--seq-len", "16", "--bag", "16",
              "--seed", "1"]
    assert cli.main([*common, "--keep-labels", "2", "--out", str(root / "few")]) == 0
    assert cli.main([*common, "--out", str(root / "full")]) == 0
    return root / "few", root / "full"


@pytest.fixture
def few(stores, tmp_path) -> Path:
    return Path(shutil.copytree(stores[0], tmp_path / "few"))


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_proposals_never_include_answered_or_skipped_messages(few):
    pool = label.open_pool(few)
    path, answers = label.answers_path(few, None), []
    first = label.propose(pool, answers, 3, log=lambda s: None)
    assert len(first) == 3 and [p.score for p in first] == sorted((p.score for p in first), reverse=True)
    label.save_answer(path, answers, pool, first[0].row, "spam", "test")
    label.save_answer(path, answers, pool, first[1].row, None, "test")  # a skip
    rest = label.propose(pool, answers, len(pool.records), log=lambda s: None)
    assert {p.row for p in rest} == set(range(len(pool.records))) - {first[0].row, first[1].row}


def test_each_answer_is_on_disk_before_the_next_prompt_and_ctrl_c_keeps_them(few, capsys):
    pool, path, answers = label.open_pool(few), few / label.ANSWERS_FILE, []
    replies, seen = iter(["1", "nonsense", "spam", "s"]), []

    def read(prompt: str) -> str:
        seen.append(len(lines(path)) if path.exists() else 0)
        try:
            return next(replies)
        except StopIteration:
            raise KeyboardInterrupt from None

    shown = []
    assert label_ask.terminal(pool, answers, path, 10, read, out=shown.append) == 3
    assert seen == [0, 1, 1, 2, 3]  # the typo asked again; each answer saved before the next question
    first = pool.records[answers[0]["row"]]
    assert f"Subject: {first['subject']}" in shown and f"From:    {first['sender']}" in shown
    assert f"  | {label_ask.body_lines(first['body'])[0]}" in shown and any("not an answer" in s for s in shown)
    assert [a["label"] for a in lines(path)] == ["ham", "spam", None]
    # a rerun through the CLI resumes: the three answered messages are not shown again
    done = {a["key"] for a in lines(path)}
    shown = []
    args = cli.build_parser().parse_args(["email", "label", str(few), "--count", "2"])
    from trmkit.email import label_command

    def read_again(prompt: str) -> str:
        shown.append(len(lines(path)))
        return "news"

    assert label_command.run(args, read=read_again) == 0
    assert shown == [3, 4] and len(lines(path)) == 5
    assert not done & {a["key"] for a in lines(path)[3:]}
    assert "5 answers in" in capsys.readouterr().out


def test_apply_moves_exactly_the_answered_rows(few, tmp_path, capsys):
    pool, path, answers = label.open_pool(few), few / label.ANSWERS_FILE, []
    for row, name in ((0, "spam"), (3, None), (5, "ham")):
        label.save_answer(path, answers, pool, row, name, "test")
    out = tmp_path / "new"
    assert cli.main(["email", "label", str(few), "--apply", "--out", str(out)]) == 0
    assert f"trmkit train configs/email-fast.yaml data.path={out}" in capsys.readouterr().out
    old, new = open_store(few), open_store(out)
    n_train, n_hidden = len(old["train"]), len(old[UNLABELLED])
    assert (len(new["train"]), len(new[UNLABELLED])) == (n_train + 2, n_hidden - 2)
    moved = np.asarray(new["train"].inputs)[n_train:]
    assert (moved == np.asarray(old[UNLABELLED].inputs)[[0, 5]]).all()
    assert np.asarray(new["train"].labels)[n_train:, 0].tolist() == [CLASSES.index("spam"), CLASSES.index("ham")]
    kept = [i for i in range(n_hidden) if i not in (0, 5)]  # the skipped row 3 stays unlabelled
    assert (np.asarray(new[UNLABELLED].inputs) == np.asarray(old[UNLABELLED].inputs)[kept]).all()
    assert (np.asarray(new["test"].inputs) == np.asarray(old["test"].inputs)).all()
    records = json.loads((out / "train" / "messages.json").read_text())
    assert [label.message_key(r) for r in records[n_train:]] == [pool.keys[0], pool.keys[5]]
    assert [r["label"] for r in records[n_train:]] == ["spam", "ham"]
    assert (out / "train" / "tokenizer.json").is_file() and (out / "train" / "bag.json").is_file()
    few_meta = json.loads((out / "train" / "meta.json").read_text())["build"]["keep_labels"]
    assert few_meta["answered"] == {"ham": 1, "spam": 1} and few_meta["unlabelled"] == n_hidden - 2


def test_csv_round_trip_and_oracle(few, stores, tmp_path):
    sheet = tmp_path / "sheet.csv"
    assert cli.main(["email", "label", str(few), "--csv-out", str(sheet), "--count", "3"]) == 0
    text = sheet.read_text().splitlines()
    assert text[0] == ",".join(label_ask.CSV_COLUMNS)
    import csv

    rows = list(csv.DictReader(sheet.open()))
    assert len(rows) == 3
    rows[0]["label"], rows[1]["label"] = "2", "s"  # the third left empty: no answer yet
    with sheet.open("w", newline="") as f:
        writer = csv.DictWriter(f, label_ask.CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    assert cli.main(["email", "label", str(few), "--answers", str(sheet)]) == 0
    saved = lines(few / label.ANSWERS_FILE)
    assert [(a["key"], a["label"]) for a in saved] == [(rows[0]["key"], "news"), (rows[1]["key"], None)]
    # the oracle answers from the full store's true labels, matched by message key
    jsonl = tmp_path / "oracle.jsonl"
    assert cli.main(["email", "label", str(few), "--oracle", str(stores[1]), "--count", "4",
                     "--answers-jsonl", str(jsonl)]) == 0
    pool, truth = label.open_pool(few), {}
    for split in ("train", "val", "test"):
        truth.update({label.message_key(r): r["label"]
                      for r in json.loads((stores[1] / split / "messages.json").read_text())})
    assert [truth[a["key"]] for a in lines(jsonl)] == [a["label"] for a in lines(jsonl)]
    assert len(lines(jsonl)) == 4 and all(a["key"] in pool.keys for a in lines(jsonl))


def test_a_store_with_every_label_is_refused_with_the_fix(stores, capsys):
    with pytest.raises(ConfigError, match="built without --keep-labels.*--keep-labels 10 --out NEW_STORE"):
        label.open_pool(stores[1])
    assert cli.main(["email", "label", str(stores[1])]) != 0
    assert "built without --keep-labels" in capsys.readouterr().err
