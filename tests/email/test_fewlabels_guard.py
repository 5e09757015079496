"""The few-label guard (email/guard.py): its choice from the K labels alone, printed and kept in the run's
summary, and the rival named beside the model after a few-label run."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from trmkit import cli
from trmkit.email import baseline, guard, linear_fit, nb_em
from trmkit.email.commands import few_label_lines

from tests.email.test_fewlabels import write_csv

VOCAB = 400


def _bags(rng, y: np.ndarray, topic: np.ndarray) -> np.ndarray:
    """Each message: 2 ids of its class's 40, 6 of its topic's 60, 2 noise ids. Where the topic is drawn
    apart from the class, the unlabelled messages' strongest structure is not the classes'."""
    out = np.zeros((len(y), 10), dtype=np.int64)
    for i, (c, t) in enumerate(zip(y, topic)):
        out[i] = np.concatenate([rng.choice(np.arange(10 + 40 * c, 50 + 40 * c), 2, replace=False),
                                 rng.choice(np.arange(100 + 60 * t, 160 + 60 * t), 6, replace=False),
                                 rng.choice(np.arange(300, 400), 2, replace=False)])
    return out


def _choose(seed: int, per_class: int, topic_is_class: bool) -> guard.Choice:
    rng = np.random.default_rng(seed)
    y_l, y_u = np.repeat([0, 1], per_class), rng.integers(0, 2, 600)
    t_l, t_u = (y.copy() if topic_is_class else rng.integers(0, 2, len(y)) for y in (y_l, y_u))
    x_l, x_u = linear_fit.multi_hot(_bags(rng, y_l, t_l), VOCAB), linear_fit.multi_hot(_bags(rng, y_u, t_u), VOCAB)
    said: list[str] = []
    choice = guard.choose(x_l, torch.from_numpy(y_l), nb_em.Rows.of(x_u), x_l, 2, VOCAB,
                          lambda xs, ys: linear_fit._fit_one(xs, ys, torch.ones(len(ys)), 2, 10.0)[:2], said.append)
    assert said == [f"few labels: {choice.reason}"]
    return choice


def test_the_guard_trusts_em_unless_the_labels_show_past_their_noise_that_it_misleads():
    kept = _choose(3, 30, topic_is_class=True)  # the unlabelled mail's structure is the classes'
    assert kept.method == "em" and kept.unlabelled_weight == guard.DEFAULT
    assert "no other candidate beats it" in kept.reason
    left = _choose(3, 30, topic_is_class=False)  # EM follows the topics: 60 labels say so past their noise
    assert (left.method, left.unlabelled_weight) != ("em", guard.DEFAULT)
    assert left.scores[left.name] > left.scores["EM weight 4"] + 0.1 and left.p_values[left.name] < guard.LEVEL
    assert f"{left.name} instead of EM weight 4" in left.reason
    assert left.metrics()["few_labels/unlabelled_weight"] in (-1.0, 1.0, 0.3, 0.0)


def test_one_label_per_class_keeps_the_default_and_says_why():
    """--keep-labels 1: no fold can be left out (a fit on nothing crashed the LR candidate's L-BFGS)."""
    one = _choose(3, 1, topic_is_class=True)
    assert (one.method, one.unlabelled_weight, one.scores) == ("em", guard.DEFAULT, {})
    assert "nothing to cross-fit" in one.reason and "--keep-labels 2" in one.reason


def test_sign_test_is_the_exact_binomial_tail():
    right = torch.tensor([True] * 7 + [False] * 3)
    default = torch.tensor([False] * 7 + [True] * 3)
    assert guard.sign_test(right, default) == pytest.approx(sum(__import__("math").comb(10, i) for i in range(7, 11))
                                                            / 1024)
    assert guard.sign_test(default, default) == 1.0  # no discordant message: no evidence


TINY = """
run: {seed: 0, threads: 1, compile: "off", dtype: float32}
model: {mixer: attention, hidden_size: 16, num_heads: 2, L_layers: 1, H_cycles: 1, L_cycles: 1,
        halt_max_steps: 2, puzzle_emb_len: 0}
email: {input_linear: true, input_linear_weighting: auto, input_linear_c: 0, input_linear_unlabelled: em}
train: {batch_size: 8, max_steps: 2, eval_every: 2, log_every: 1, checkpoint_minutes: 0, ema_decay: 0.0,
        best_metric: macro_f1, restore_best: false, early_stop_evals: 0}
"""


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A --keep-labels store of a tiny CSV mailbox, and a copy whose test labels are scrambled."""
    tmp = tmp_path_factory.mktemp("guard")
    write_csv(tmp / "mail.csv")
    store = tmp / "store"
    assert cli.main(["data", "email", "--source", str(tmp / "mail.csv"), "--vocab-size", "300", "--seq-len", "16",
                     "--bag", "64", "--seed", "1", "--keep-labels", "5", "--out", str(store)]) == 0
    scrambled = tmp / "scrambled"
    shutil.copytree(store, scrambled)
    labels = np.load(scrambled / "test" / "labels.npy")
    labels[:, 0] = 1 - labels[:, 0]  # every test message now carries the other class
    np.save(scrambled / "test" / "labels.npy", labels)
    records = json.loads((scrambled / "test" / "messages.json").read_text())
    for r in records:
        r["label"] = {"ham": "spam", "spam": "ham"}[r["label"]]
    (scrambled / "test" / "messages.json").write_text(json.dumps(records))
    (tmp / "tiny.yaml").write_text(TINY)
    return tmp, store, scrambled


def _train(tmp: Path, store: Path, capsys) -> tuple[dict, str]:
    run = tmp / f"run-{store.name}"
    assert cli.main(["train", str(tmp / "tiny.yaml"), f"run.dir={run}", f"data.path={store}", "--force"]) == 0
    return json.loads((run / "summary.json").read_text()), capsys.readouterr().out


def test_the_choice_reads_no_test_label_and_is_printed_and_kept(stores, capsys, monkeypatch):
    tmp, store, scrambled = stores
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp / "cache"))
    summary, out = _train(tmp, store, capsys)
    other, _ = _train(tmp, scrambled, capsys)
    said = [line for line in out.splitlines() if line.startswith("few labels: ") and "cross-fitted" in line]
    assert len(said) == 1 and "on the 10 labels" in said[0]
    chosen = {k: v for k, v in summary["final_metrics"].items() if k.startswith("few_labels/")}
    assert "few_labels/unlabelled_weight" in chosen and "few_labels/cv_macro_f1/em_weight_4" in chosen
    assert chosen == {k: v for k, v in other["final_metrics"].items() if k.startswith("few_labels/")}
    # the test labels were read by the scores alone: the model's and the rival's flip, the choice does not
    assert summary["final_metrics"]["rival_macro_f1"] != other["final_metrics"]["rival_macro_f1"]
    rival, _ = baseline.rival_macro_f1(str(store.resolve()), ("ham", "spam"))
    assert summary["final_metrics"]["rival_macro_f1"] == rival
    assert f"rival_macro_f1 {rival:.3f}" in [line for line in out.splitlines() if line.startswith("final: ")][0]
    saved = json.loads((tmp / "run-store" / "classification.json").read_text())["summary"]["few_labels"]
    assert saved["guard"]["reason"] in said[0] and saved["rival_macro_f1"] == rival
    assert cli.main(["eval", str(tmp / "run-store")]) == 0  # stdout: the JSON result alone, the rival's line apart
    captured = capsys.readouterr()
    assert json.loads(captured.out)["rival_macro_f1"] == rival and "few labels: test macro-F1" in captured.err


def test_a_model_below_the_rival_is_warned_about_in_training_and_by_the_baseline(stores, monkeypatch):
    _, store, _ = stores
    from trmkit.data.store import open_split

    split = open_split(store / "test")
    said: list[str] = []
    scorer = guard.FewLabelScorer(split, ["ham", "spam"], said.append)
    labels = np.asarray(split.labels)[:, 0]
    wrong = np.eye(2)[1 - labels][:, None, :]  # every answer wrong: macro-F1 0
    scorer.add(type("Batch", (), {"labels": np.asarray(split.labels)})(), (1 - labels)[:, None], None, wrong)
    monkeypatch.setattr(baseline, "rival_macro_f1", lambda *a, **k: (0.5, "TF-IDF + LR"))
    result = scorer.result()
    assert result["rival_macro_f1"] == 0.5 and result["vs_rival"] == pytest.approx(result["macro_f1"] - 0.5)
    assert said and said[-1].startswith("WARNING: few labels: test macro-F1 0.0000 against 0.5000")
    fine = {"stronger": "baseline", "baseline": {"macro_f1": 0.80}, "trm": {"macro_f1": 0.795}}
    assert few_label_lines(fine, {"labelled": {"ham": 5, "spam": 5}})[0].startswith("few labels: test macro-F1")
    below = {**fine, "trm": {"macro_f1": 0.70, "few_labels": {"guard": {"name": "EM weight 4", "reason": "r"}}}}
    lines = few_label_lines(below, {"labelled": {"ham": 5, "spam": 5}})
    assert lines[0].startswith("WARNING: few labels: test macro-F1 0.7000 against 0.8000 for TF-IDF + LR fitted "
                               "on the same 10 labels (-0.1000)")
    assert lines[1] == "the run's few-label guard chose EM weight 4: r"
