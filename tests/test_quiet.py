"""Quiet by default, honest about time: the plan's lines only on `train` (and with --verbose), one `final:`
line, `email baseline` as a short table, `--version`, a bundle's model card without this machine's paths,
progress through an export, and the time before training counted inside `--minutes`."""

from __future__ import annotations

import ast
import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from tests.tiny import EMAIL_TINY, PAIRS_TINY, mail_csv, pairs_jsonl
from trmkit import cli

ROOT = Path(__file__).resolve().parents[1]



@pytest.fixture(scope="module")
def w(tmp_path_factory) -> dict:
    """A tiny pairs run (with what its training printed) and a tiny e-mail run, built once."""
    t = tmp_path_factory.mktemp("quiet")
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(t / "cache"))
    pairs = pairs_jsonl(t / "pairs.jsonl")
    (t / "ask.jsonl").write_text(json.dumps({"input": pairs[0]["input"]}) + "\n")
    assert cli.main(["data", "pairs", "--source", str(t / "pairs.jsonl"), "--out", str(t / "pstore")]) == 0
    (t / "tiny.yaml").write_text(PAIRS_TINY)
    mail_csv(t / "mail.csv")
    assert cli.main(["data", "email", "--source", str(t / "mail.csv"), "--seq-len", "16", "--bag", "0",
                     "--vocab-size", "300", "--out", str(t / "estore")]) == 0
    (t / "etiny.yaml").write_text(EMAIL_TINY)
    assert cli.main(["train", str(t / "etiny.yaml"), f"run.dir={t / 'erun'}", f"data.path={t / 'estore'}"]) == 0
    yield {"t": t, "prun": t / "prun", "erun": t / "erun", "estore": t / "estore"}
    mp.undo()


@pytest.fixture(scope="module")
def trained_pairs(w) -> str:
    """What `trmkit train` printed for the tiny pairs run (stdout and stderr together)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli.main(["train", str(w["t"] / "tiny.yaml"), f"run.dir={w['prun']}", f"data.path={w['t'] / 'pstore'}"])
    assert code == 0, out.getvalue()
    return out.getvalue()


def _lines(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_train_prints_the_plan_and_one_final_line(trained_pairs):
    assert len(_lines(trained_pairs, "plan: ")) >= 5
    finals = _lines(trained_pairs, "final: ")
    assert len(finals) == 1 and "summary.json" in finals[0]


def test_eval_and_predict_leave_the_plan_out_unless_verbose(w, trained_pairs, capsys):
    run = str(w["prun"])
    assert cli.main(["eval", run]) == 0
    quiet = capsys.readouterr()
    assert not _lines(quiet.err, "plan: ") and "exact_accuracy" in quiet.out
    assert cli.main(["eval", run, "--verbose"]) == 0
    assert len(_lines(capsys.readouterr().err, "plan: ")) >= 5
    assert cli.main(["predict", run, str(w["t"] / "ask.jsonl")]) == 0
    assert not _lines(capsys.readouterr().err, "plan: ")
    assert cli.main(["predict", run, str(w["t"] / "ask.jsonl"), "--verbose"]) == 0
    assert len(_lines(capsys.readouterr().err, "plan: ")) >= 5


def test_version_is_printed_and_kept_in_one_leaf_module(capsys):
    from trmkit.version import __version__

    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"trmkit {__version__}"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1) == __version__
    store = ast.parse((ROOT / "trmkit" / "train" / "checkpoint" / "store.py").read_text())
    froms = {(n.module, a.name) for n in ast.walk(store) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert ("trmkit.version", "__version__") in froms
    assert ("trmkit", "__version__") not in froms  # not through the package's front door


def test_email_baseline_prints_a_table_and_the_json_only_to_a_file(w, tmp_path, capsys):
    store, run = str(w["estore"]), str(w["erun"])
    assert cli.main(["email", "baseline", store, "--run", run]) == 0
    shown = capsys.readouterr().out
    assert "macro-F1" in shown and "TRM" in shown and len(shown.splitlines()) < 20
    assert not shown.lstrip().startswith("{")
    assert cli.main(["email", "baseline", store, "--run", run, "--json", str(tmp_path / "b.json")]) == 0
    result = json.loads((tmp_path / "b.json").read_text())
    assert len(result["baseline"]["preds"]) == result["baseline"]["n"]


def test_an_exported_bundle_names_no_path_of_this_machine_and_shows_its_phases(w, tmp_path, capsys):
    assert cli.main(["email", "export", str(w["erun"]), "--out", str(tmp_path / "bundle")]) == 0
    said = capsys.readouterr().out
    assert [line[:11] for line in _lines(said, "export: ")] == ["export: 1/3", "export: 2/3", "export: 3/3"]
    card = (tmp_path / "bundle" / "model_card.md").read_text()
    for f in sorted((tmp_path / "bundle").iterdir()):  # every file a bundle holds, not only the card
        if f.suffix in (".md", ".json", ".txt", ".yaml"):
            text = f.read_text()
            assert str(w["t"]) not in text and str(w["t"].resolve()) not in text, f.name
    assert "the store's" in card and "`mail.csv`" in card


def test_the_time_before_training_counts_inside_minutes(w, tmp_path, monkeypatch, capsys):
    """A fit before training that takes longer than the whole budget leaves one step, said so."""
    def slow_fit(model, train, class_weights, log) -> None:
        time.sleep(4.0)

    monkeypatch.setattr("trmkit.email.linear_fit.before_training", slow_fit)
    assert cli.main(["train", str(w["t"] / "etiny.yaml"), f"run.dir={tmp_path / 'run'}",
                     f"data.path={w['estore']}", "train.max_steps=100000", "--minutes", "0.05"]) == 0
    said = capsys.readouterr().out
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 1
    spent = re.search(r"(\d+) s of it went to preparing the run", said)
    assert spent and int(spent.group(1)) >= 4 and "of the budget, so little is left for training" in said


def test_a_long_fit_before_training_says_each_candidate_and_each_em_round(monkeypatch):
    """Past a few seconds (here: at once), the cross-validation says each candidate and EM each round."""
    from types import SimpleNamespace

    import torch

    from trmkit.email import linear_fit, nb_em

    monkeypatch.setattr("trmkit.email.progress.SLOW_S", 0.0)
    rng = np.random.default_rng(0)
    y = torch.from_numpy(np.repeat([0, 1], 20))
    ids = rng.integers(1, 30, size=(40, 6)) + 30 * y.numpy()[:, None]  # each class its own ids
    cfg = SimpleNamespace(vocab_size=64, num_classes=2)
    lines: list[str] = []
    linear_fit.choose("auto", cfg, ids, y, torch.ones(40), linear_fit.document_idf(ids, 64), 0.0, lines.append)
    steps = [line for line in lines if "cross-validation" in line]
    assert len(steps) == 8 and steps[0].startswith("model: input_linear cross-validation 1/8: binary C=1 macro-F1")
    lines.clear()
    nb_em.fit(linear_fit.multi_hot(ids[::4], 64), y[::4], linear_fit.multi_hot(ids, 64), 2, 64, lines.append)
    rounds = [line for line in lines if "EM round" in line]
    assert len(rounds) == nb_em.ITERATIONS and "unlabelled answers changed" in rounds[0]


def test_a_bundles_build_record_keeps_file_names_not_this_machines_folders():
    from trmkit.email.outputs import without_machine_paths

    build = {"label_map": "/home/me/maps/sa3.yaml", "seq_len": 16, "relative": "configs/email-sa3.yaml",
             "import": {"skipped_examples": ["/home/me/Mail/inbox.mbox:12: no body"]}}
    kept = without_machine_paths(build)
    assert kept == {"label_map": "sa3.yaml", "seq_len": 16, "relative": "configs/email-sa3.yaml",
                    "import": {"skipped_examples": ["inbox.mbox:12: no body"]}}
