"""One output policy for the e-mail commands that write a file the user names: a file that is not the command's
own kind of output (a run's weights, a mailbox, any other file) is refused without --force and left as it was;
the command's own earlier output is replaced; a write is all or nothing (a temporary name, then a rename)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tiny import EMAIL_TINY as TINY
from tests.tiny import mail_csv
from trmkit import cli

MBOX = b"From a@b.c Thu Dec  3 10:00:00 2026\nFrom: a@b.c\nSubject: cheap prize\n\nwin money now\n"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A tiny e-mail store (from a CSV) and a run trained 2 steps on it; a keep-labels store for `email label`."""
    t = tmp_path_factory.mktemp("policy")
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(t / "cache"))
    mail_csv(t / "mail.csv")
    common = ["--source", str(t / "mail.csv"), "--seq-len", "16", "--vocab-size", "300"]
    assert cli.main(["data", "email", *common, "--bag", "0", "--out", str(t / "store")]) == 0
    assert cli.main(["data", "email", *common, "--bag", "64", "--keep-labels", "3", "--out", str(t / "few")]) == 0
    (t / "tiny.yaml").write_text(TINY)
    assert cli.main(["train", str(t / "tiny.yaml"), f"run.dir={t / 'run'}", f"data.path={t / 'store'}"]) == 0
    (t / "inbox.mbox").write_bytes(MBOX)
    yield t
    mp.undo()


def _refused(argv: list[str], target: Path, capsys) -> str:
    before = target.read_bytes()
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert target.read_bytes() == before and "--force" in err and str(target) in err, err
    return err


def test_predict_out_never_replaces_another_runs_weights_or_a_mailbox_without_force(made, tmp_path, capsys):
    other_run_weights = tmp_path / "other-run" / "weights.safetensors"
    other_run_weights.parent.mkdir()
    other_run_weights.write_bytes((made / "run" / "weights.safetensors").read_bytes())
    mbox = tmp_path / "saved.mbox"
    mbox.write_bytes(MBOX)
    predict = ["email", "predict", str(made / "run"), str(made / "inbox.mbox"), "--out"]
    err = _refused(predict + [str(other_run_weights)], other_run_weights, capsys)
    assert "is not a predictions file written by this command" in err
    _refused(predict + [str(mbox)], mbox, capsys)
    assert cli.main(predict + [str(mbox), "--force"]) == 0  # asked for: replaced, with the answers
    assert json.loads(mbox.read_text().splitlines()[0])["label"] in ("ham", "spam", "uncertain")


def test_predict_replaces_its_own_earlier_predictions_all_or_nothing(made, tmp_path, capsys):
    out = tmp_path / "predictions.jsonl"
    predict = ["email", "predict", str(made / "run"), str(made / "inbox.mbox"), "--out", str(out)]
    assert cli.main(predict) == 0
    first = out.read_bytes()
    assert cli.main(predict) == 0 and out.read_bytes() == first  # its own output: replaced without --force
    bad = tmp_path / "latin1.csv"
    bad.write_bytes("text,label\ncaf\xe9 au lait,ham\n".encode("latin-1"))
    capsys.readouterr()
    assert cli.main(predict[:4] + [str(bad), "--out", str(out)]) == 2  # fails mid-stream: the old file stays
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err
    assert out.read_bytes() == first and [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []


def test_baseline_out_refuses_a_file_it_did_not_write(made, tmp_path, capsys):
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}\n')
    baseline = ["email", "baseline", str(made / "store"), "--out"]
    _refused(baseline + [str(notes)], notes, capsys)
    out = tmp_path / "baseline.json"
    assert cli.main(baseline + [str(out)]) == 0 and cli.main(baseline + [str(out)]) == 0  # its own: replaced
    assert json.loads(out.read_text())["stronger"] in ("baseline", "baseline_balanced")


def test_label_csv_out_refuses_a_file_it_did_not_write(made, tmp_path, capsys):
    sheet = tmp_path / "sheet.csv"
    sheet.write_text("name,phone\nann,123\n")
    label = ["email", "label", str(made / "few"), "--count", "2", "--answers-jsonl", str(tmp_path / "a.jsonl"),
             "--csv-out"]
    _refused(label + [str(sheet)], sheet, capsys)
    out = tmp_path / "proposals.csv"
    assert cli.main(label + [str(out)]) == 0 and cli.main(label + [str(out)]) == 0  # its own: replaced
    assert cli.main(label + [str(sheet), "--force"]) == 0 and sheet.read_text().startswith("key,rank,")


def test_predict_on_a_broken_archive_says_so_and_exits_non_zero(made, tmp_path, capsys):
    broken = tmp_path / "inbox.mbox.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(200)))  # gzip's magic, then no gzip stream
    capsys.readouterr()
    code = cli.main(["email", "predict", str(made / "run"), str(broken)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert "inbox.mbox.gz" in captured.err and "none of the" in captured.err and "Traceback" not in captured.err
