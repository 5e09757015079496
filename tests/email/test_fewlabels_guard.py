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


def _threads(seed: int) -> tuple:
    """60 labelled bags (topic drawn apart from the class) and 520 unlabelled: 3 thread-mates of each labelled
    message (its class, topic and 4 thread ids) and 340 others; each message's thread id."""
    rng = np.random.default_rng(seed)
    y_l, h_l = np.repeat([0, 1], 30), np.arange(60)
    t_l = rng.integers(0, 2, 60)
    y_u = np.concatenate([np.repeat(y_l, 3), rng.integers(0, 2, 340)])
    t_u = np.concatenate([np.repeat(t_l, 3), rng.integers(0, 2, 340)])
    h_u = np.concatenate([np.repeat(h_l, 3), 60 + np.arange(340) % 40])

    def bags(y, t, h):
        return np.concatenate([_bags(rng, y, t), 400 + 4 * h[:, None] + np.arange(4)], 1)

    vocab = 400 + 4 * 100
    return (linear_fit.multi_hot(bags(y_l, t_l, h_l), vocab), torch.from_numpy(y_l),
            linear_fit.multi_hot(bags(y_u, t_u, h_u), vocab), vocab, h_l, h_u)


def test_on_a_store_split_by_thread_each_fold_reads_no_unlabelled_thread_mate_of_its_held_out_messages():
    """The test split of such a store shares no thread with the rest, but a held-out labelled message has its
    thread-mates among the unlabelled ones: read through them, EM scores itself on what the test cannot show
    (on the mailing lists 0.873 cross-fitted, 0.708 on test: docs/results.md)."""
    x_l, y_l, x_u, vocab, h_l, h_u = _threads(1)
    fit = lambda xs, ys: linear_fit._fit_one(xs, ys, torch.ones(len(ys)), 2, 10.0)[:2]  # noqa: E731
    said: list[str] = []
    blind = guard.choose(x_l, y_l, nb_em.Rows.of(x_u), x_l, 2, vocab, fit, said.append)
    apart = guard.choose(x_l, y_l, nb_em.Rows.of(x_u), x_l, 2, vocab, fit, said.append,
                         groups=guard.Groups("thread", h_l, h_u))
    assert blind.scores["EM weight 4"] != apart.scores["EM weight 4"]
    for name in ("naive Bayes on the labels alone", "TF-IDF + LR on the bag"):  # they read no unlabelled bag
        assert blind.scores[name] == apart.scores[name]
    assert "whole threads" not in said[0] and "whole threads" in said[1] and "(36-36 of 520 left out" in said[1]
    folds = guard._folds(y_l)
    per_fold = guard._unlabelled_per_fold(nb_em.Rows.of(x_u), folds, guard.Groups("thread", h_l, h_u))
    dense = x_u.to_dense()
    for k, rows in per_fold.items():
        kept = ~np.isin(h_u, h_l[folds == k])
        assert len(rows) == 520 - 3 * int((folds == k).sum()) == kept.sum()
        assert torch.equal(rows.x.to_dense(), dense[torch.from_numpy(kept)])


def test_the_groups_are_the_threads_the_store_was_split_by(tmp_path):
    from trmkit.email.prepare import thread_key

    rng = np.random.default_rng(0)
    lines = ["subject,text,label"]
    for i in range(80):
        label = ("ham", "spam")[i % 2]
        subject = f"{'Re: ' * (i % 3)}topic {i // 4}" if i % 10 else ""  # a thread of 4; some with no subject
        lines.append(f"{subject}," + " ".join(rng.choice([f"{label}{j}" for j in range(30)], 12)) + f",{label}")
    (tmp_path / "mail.csv").write_text("\n".join(lines) + "\n")
    stores = {}
    for split in ("thread", "stratified"):
        stores[split] = tmp_path / split
        assert cli.main(["data", "email", "--source", str(tmp_path / "mail.csv"), "--vocab-size", "300",
                         "--seq-len", "16", "--bag", "64", "--split", split, "--keep-labels", "5", "--seed", "1",
                         "--out", str(stores[split])]) == 0
    assert guard.groups_of(stores["stratified"]) is None
    groups = guard.groups_of(stores["thread"])
    assert groups is not None and groups.by == "thread"
    keys = [thread_key(r["subject"]) for split in ("train", "unlabelled")
            for r in json.loads((stores["thread"] / split / "messages.json").read_text())]
    ids = np.concatenate([groups.labelled, groups.unlabelled])
    assert len(ids) == len(keys) == 10 + len(groups.unlabelled)
    for i in range(len(keys)):
        for j in range(len(keys)):
            assert (ids[i] == ids[j]) == (i == j or (keys[i] != "" and keys[i] == keys[j]))


def test_the_fallback_regression_reads_the_ids_of_two_labelled_messages_and_predict_reads_the_same(monkeypatch):
    """Where the guard chooses logistic regression it reads the bag ids found in LR_MIN_DF+ labelled messages
    (as the rival reads words), and the model's frozen read weighs the others 0."""
    from trmkit.email.parts import bag_part, model_of

    base = dict(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=1,
                mixer="attention", puzzle_emb_len=0, vocab_size=60, seq_len=10, num_puzzle_ids=1, num_classes=2,
                part_positions=4)
    model = model_of(base, {"input_linear": True, "input_linear_weighting": "idf", "input_linear_unlabelled": "em"})
    y = np.arange(8) % 2
    bags = np.stack([[10 + c, 20 + i % 3, 30 + i, 0] for i, c in enumerate(y)])  # 30 + i: in one message only
    inputs = np.concatenate([np.ones((8, 6), np.int64), bags], 1)
    labels = np.full((8, 10), 3)
    labels[:, 0] = y
    chosen = guard.Choice(method=guard.LR, unlabelled_weight=0.0, scores={}, p_values={}, labels=8)
    monkeypatch.setattr(guard, "choose", lambda *a, **k: chosen)
    said: list[str] = []
    linear_fit.fit(model, inputs, labels, None, c=0.0, log=said.append, unlabelled=bags[:, ::-1].copy())
    part = bag_part(model)
    assert "the 5 ids in 2+ labelled messages" in said[-1]
    once = np.arange(30, 38)
    assert part.linear_weight[once].abs().max() == 0 and part.linear_idf[once].abs().max() == 0
    assert part.linear_idf[[10, 11, 20, 21, 22]].min() > 0
    with_once, without = inputs[:1].copy(), inputs[:1].copy()
    without[0, -2] = 0  # the message without its once-seen id
    logits = part.linear_logits(torch.from_numpy(np.concatenate([with_once, without])))
    assert torch.equal(logits[0], logits[1]) and int(logits[0].argmax()) == y[0]


def _fits_with(stores, choice: guard.Choice, monkeypatch) -> tuple[dict, dict]:
    """The bag model's fit on the store's labelled and unlabelled messages when the guard makes `choice`: without
    the store's text ("none"), with it ("store"), with the test labels scrambled ("scrambled"); (weights, logs)."""
    from trmkit.data.store import open_split
    from trmkit.email.parts import bag_part, model_of
    from trmkit.email.selftrain import ids_of

    _, store, scrambled = stores
    train = open_split(store / "train")
    meta = train.meta
    base = dict(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=1,
                mixer="attention", puzzle_emb_len=0, vocab_size=meta.vocab_size, seq_len=meta.seq_len,
                num_puzzle_ids=1, num_classes=2, part_positions=meta.part_positions)
    monkeypatch.setattr(guard, "choose", lambda *a, **k: choice)
    monkeypatch.setattr(guard, "_CHOICES", {})  # the fit remembers the stand-in choice: not past this test
    unlabelled = ids_of(open_split(store / "unlabelled"), meta.part_positions)
    weights, said = {}, {}
    for name, where in (("none", None), ("store", store), ("scrambled", scrambled)):
        model = model_of(base, {"input_linear": True, "input_linear_weighting": "idf",
                                "input_linear_unlabelled": "em"})
        lines: list[str] = []
        linear_fit.fit(model, train.inputs, train.labels, None, c=0.0, log=lines.append, unlabelled=unlabelled,
                       store=None if where is None else str(where))
        weights[name], said[name] = bag_part(model).linear_weight.clone(), "\n".join(lines)
    return weights, said


def test_once_chosen_the_regression_also_reads_the_unlabelled_mail_as_the_text_teacher_labels_it(stores,
                                                                                                 monkeypatch):
    """The guard cross-fits logistic regression on the labels alone; chosen, it is fitted with the unlabelled
    messages too, as TF-IDF + LR of the labelled messages' text labels them (email/text_teacher.py). Without the
    store's text it reads the labels alone; with the test labels scrambled the fit is the same."""
    chosen = guard.Choice(method=guard.LR, unlabelled_weight=0.0, scores={}, p_values={}, labels=10)
    weights, said = _fits_with(stores, chosen, monkeypatch)
    unlabelled = len(json.loads((stores[1] / "unlabelled" / "messages.json").read_text()))
    assert "the unlabelled ones not read (no text of them)" in said["none"]
    assert (f"the 10 labelled messages, and the {unlabelled} unlabelled ones as TF-IDF + LR of the labelled "
            "messages' text labels them") in said["store"]
    assert not torch.equal(weights["none"], weights["store"])
    assert torch.equal(weights["store"], weights["scrambled"])


def test_em_starts_from_the_classes_the_text_taught_where_the_store_has_its_text(stores, monkeypatch):
    """Where the guard keeps EM and the store holds the messages' text, EM starts from the unlabelled messages'
    classes by the logistic regression the text taught, not from naive Bayes on the labels alone; the same fit
    with the test labels scrambled."""
    kept = guard.Choice(method="em", unlabelled_weight=guard.DEFAULT, scores={}, p_values={}, labels=10)
    weights, said = _fits_with(stores, kept, monkeypatch)
    assert "EM starts from" not in said["none"]
    assert "EM starts from the unlabelled messages' classes by the logistic regression the text taught" in said["store"]
    assert torch.equal(weights["store"], weights["scrambled"])


def test_em_from_a_given_start_moves_from_it_and_from_its_own_start_is_unchanged():
    rng = np.random.default_rng(0)
    y_l, y_u = np.repeat([0, 1], 10), rng.integers(0, 2, 200)
    x_l = linear_fit.multi_hot(_bags(rng, y_l, rng.integers(0, 2, 20)), VOCAB)
    x_u = nb_em.Rows.of(linear_fit.multi_hot(_bags(rng, y_u, rng.integers(0, 2, 200)), VOCAB))
    y = torch.from_numpy(y_l)
    own = nb_em.solve(nb_em.Rows.of(x_l), y, x_u, 2, VOCAB, 4.0)
    w0, b0 = nb_em._m_step(nb_em.Rows.of(x_l), torch.nn.functional.one_hot(y, 2).float(), None, None, 0.0, VOCAB)
    same = nb_em.solve(nb_em.Rows.of(x_l), y, x_u, 2, VOCAB, 4.0, start_from=nb_em._e_step(x_u, w0, b0))
    assert torch.equal(own[0], same[0]) and own[2] == same[2]
    truth = torch.nn.functional.one_hot(torch.from_numpy(y_u), 2).float()  # a start that knows the classes
    told = nb_em.solve(nb_em.Rows.of(x_l), y, x_u, 2, VOCAB, 4.0, start_from=truth)
    assert not torch.equal(own[0], told[0])
    assert float((told[3] == torch.from_numpy(y_u)).float().mean()) > float((own[3] == torch.from_numpy(y_u))
                                                                           .float().mean())
    assert torch.equal(nb_em.solve(nb_em.Rows.of(x_l), y, x_u, 2, VOCAB, 0.0, start_from=truth)[0],
                       nb_em.solve(nb_em.Rows.of(x_l), y, x_u, 2, VOCAB, 0.0)[0])  # weight 0: no round, no start
