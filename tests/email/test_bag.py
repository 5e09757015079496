"""The n-gram bag (email/bag.py): the whole message in fixed positions, idf from training only,
pooled by the model's bag part (email/parts.py; model.part_positions) and not mixed as positions."""

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import torch

from trmkit.email.bag import Bag, bag_text, bucket, ngrams
from trmkit.email.config import EmailModelConfig
from trmkit.email.parts import bag_part, model_of


def test_ngrams_are_word_unigrams_and_bigrams():
    counts = ngrams("free money, free money now")
    assert counts["free"] == 2 and counts["free money"] == 2 and counts["money now"] == 1
    assert "free money money" not in counts


def test_the_hashed_bag_keeps_the_rarest_words_of_a_message_and_is_deterministic():
    train = ["meeting at noon", "meeting tomorrow at noon", "lunch at noon", "viagra discount pharmacy"]
    bag = Bag.fit(train, positions=3, buckets=1 << 12, vocab_offset=100, hashed=True)
    ids = bag.ids("viagra meeting at noon")
    assert ids.shape == (3,) and (ids >= 100).all() and list(ids) == sorted(ids)
    assert 100 + bucket("viagra", 1 << 12) in ids  # rare in training: high idf, kept
    assert 100 + bucket("at", 1 << 12) not in ids  # in every training message: low idf, dropped
    assert np.array_equal(ids, Bag.from_dict(bag.to_dict()).ids("viagra meeting at noon"))
    short = bag.ids("hi")
    assert short[0] >= 100 and (short[1:] == 0).all()  # pads after the message's few n-grams


def _ids_as_first_written(bag: Bag, text: str) -> np.ndarray:
    """The bag's first, plain-Python ids(): stores built with it must read the same ids today."""
    weights: dict[int, float] = {}
    for gram, count in ngrams(text, bag.word_rule).items():
        b = bucket(gram, bag.buckets) if bag.words is None else bag.words.index(gram) if gram in bag.words else -1
        if b < 0:  # words mode: an n-gram without an id
            continue
        weights[b] = weights.get(b, 0.0) + (1 + math.log(count)) * float(bag.idf[b])
    top = sorted(weights, key=lambda b: (-weights[b], b))[: bag.positions]
    out = np.zeros(bag.positions, dtype=np.int64)
    out[: len(top)] = bag.vocab_offset + np.sort(np.array(top, dtype=np.int64))
    return out


def test_the_fast_bag_writes_the_same_ids_as_the_first_one():
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(300)]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(0, 400)))) for _ in range(60)]
    texts += ["", "a a a a b", "x " * 5000 + "y", "tie one two three four five"]  # repeats, ties, no words
    fitted = Bag.fit(texts[:40], positions=16, buckets=1 << 9, vocab_offset=7, hashed=True)  # collisions too
    words = Bag.fit(texts[:40], positions=16, buckets=200, vocab_offset=7)  # words mode, some n-grams left out
    for bag in (fitted, dataclasses.replace(fitted, word_rule="joined"), words):  # before: joined words
        for text in texts:
            assert np.array_equal(bag.ids(text), _ids_as_first_written(bag, text)), text[:40]
            assert np.array_equal(bag.ids(text), _ids_as_first_written(bag, text))  # again, from the cache


def test_ascii_text_splits_into_the_same_words_by_the_faster_rules():
    # bag.ASCII_WORD_RULES and prepare._ASCII_WORD replace the Unicode classes on ASCII text only
    from trmkit.email import prepare
    from trmkit.email.bag import ASCII_WORD_RULES, WORD_RULES

    every = "".join(map(chr, range(128)))
    texts = [every, every[::-1], "don't v1.2 a_b x'y'z 1.2.3 '.' a..b it's_ 9x _q", " ".join(every)]
    for rule, pattern in WORD_RULES.items():
        for text in texts:
            assert ASCII_WORD_RULES[rule].findall(text) == pattern.findall(text), rule
    for text in texts:
        assert prepare._ASCII_WORD.findall(text) == prepare._WORD.findall(text)


def test_words_split_at_punctuation_and_stores_before_keep_their_joined_words():
    """A new bag's words are runs of >= 2 letters or digits (scikit-learn's token pattern): "ankara'da" gives
    "ankara" and "da", one-letter words drop out. A bag.json of format /2 (before the rule) reads joined words,
    as its store was built; /3 carries the rule, and an unknown one is refused with the fix."""
    import pytest

    assert set(ngrams("ankara'da v1.2 a b ok")) == {"ankara", "da", "v1", "ok", "ankara da", "da v1", "v1 ok"}
    assert set(ngrams("ankara'da v1.2 a", "joined")) == {"ankara'da", "v1.2", "a", "ankara'da v1.2", "v1.2 a"}
    train = ["ankara'da toplanti", "ankara'da yemek", "istanbul'da toplanti"]
    bag = Bag.fit(train, positions=4, buckets=10, vocab_offset=0)
    assert bag.word_rule == "split" and "ankara" in bag.words and "ankara'da" not in bag.words
    saved = bag.to_dict()
    assert saved["format"] == "trmkit-email-bag/3" and Bag.from_dict(saved).word_rule == "split"
    before = {k: v for k, v in saved.items() if k != "word_rule"} | {"format": "trmkit-email-bag/2",
                                                                      "words": ["ankara'da", "toplanti"],
                                                                      "idf": [1.0, 1.0], "buckets": 2,
                                                                      "vocab_offset": 10}
    old = Bag.from_dict(before)
    assert old.word_rule == "joined" and old.ids("ankara'da toplanti").tolist() == [10, 11, 0, 0]
    with pytest.raises(ValueError, match="word_rule 'sentences'.*rebuild the store"):
        Bag.from_dict({**saved, "word_rule": "sentences"})


def test_the_word_bag_numbers_the_training_splits_frequent_ngrams_and_leaves_the_others_out():
    """The default bag: n-grams of >= MIN_DF training messages, the most frequent first (ties by text),
    capped at `buckets`; an n-gram without an id never reaches the bag; the table survives a round trip."""
    import pytest

    from trmkit.email.bag import MIN_DF

    assert MIN_DF == 2
    train = ["meeting at noon", "meeting tomorrow at noon", "lunch at noon", "viagra discount pharmacy",
             "viagra pharmacy now"]
    bag = Bag.fit(train, positions=3, buckets=5, vocab_offset=100)
    assert bag.words == ["at", "at noon", "noon", "meeting", "pharmacy"] and bag.buckets == 5  # df 3,3,3,2,2
    # "viagra" (df 2) lost the tie to "pharmacy" at the cap; "lunch" (df 1) never had a chance
    assert bag.ids("lunch with viagra").tolist() == [0, 0, 0]
    # the two rarest, and of three tied common ones the lowest id
    assert bag.ids("pharmacy meeting at noon").tolist() == [100, 103, 104]
    assert np.allclose(bag.idf, np.log(6 / np.array([4, 4, 4, 3, 3])) + 1)
    again = Bag.from_dict(bag.to_dict())
    assert again.words == bag.words and np.array_equal(again.ids("pharmacy meeting at noon"),
                                                       bag.ids("pharmacy meeting at noon"))
    assert Bag.fit(train, positions=3, buckets=100, vocab_offset=0).buckets == 6  # all n-grams with df >= 2
    broken = {**bag.to_dict(), "words": bag.words[:2]}
    with pytest.raises(ValueError, match="2 words for 5 ids"):
        Bag.from_dict(broken)


def test_bag_text_sees_every_field_normalised():
    text = bag_text("WIN Money", "Deals <promo@shop.example>", "Visit https://shop.example/x?y=1 NOW")
    assert "win money" in text and "now" in text and "https" not in text


def test_the_model_pools_the_bag_instead_of_mixing_its_positions():
    cfg = dict(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=1,
               mixer="attention", puzzle_emb_len=0, vocab_size=40, seq_len=10, num_puzzle_ids=1,
               num_classes=2, part_positions=4)
    torch.manual_seed(0)
    model = model_of(cfg)
    assert model.seq_total == 6  # the network sees the 6 token positions only
    tokens = torch.randint(1, 20, (2, 6))
    bags = torch.tensor([[30, 31, 0, 0], [31, 30, 0, 0]])  # the same bag, in another order, pads after
    x = torch.cat([tokens[:1].repeat(2, 1), bags], 1)
    carry = model.initial_carry(2)
    _, _, logits, _ = model(carry.z_H, carry.z_L, x, torch.zeros(2, dtype=torch.long))
    torch.testing.assert_close(logits[0], logits[1])  # a bag is a set: its order does not matter
    other = x.clone()
    other[1, 6:8] = torch.tensor([32, 33])
    _, _, changed, _ = model(carry.z_H, carry.z_L, other, torch.zeros(2, dtype=torch.long))
    assert not torch.allclose(changed[0], changed[1])  # and what it holds does


def test_the_bag_head_reads_the_pooled_bag_beside_the_recursion():
    """email.pooled_head: the class logits add a linear map of the scaled mean bag embedding; it starts at
    zero (the model begins as the one without it) and is refused without a bag."""
    import pytest

    from trmkit.config import ConfigError

    base = dict(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=1,
                mixer="attention", puzzle_emb_len=0, vocab_size=40, seq_len=10, num_puzzle_ids=1, num_classes=3)
    with pytest.raises(ConfigError, match="model.part_positions comes from"):
        model_of(base, {"pooled_head": True})  # seq_len from a store without a bag
    torch.manual_seed(0)
    model = model_of({**base, "part_positions": 4}, {"pooled_head": True})
    x = torch.cat([torch.randint(1, 20, (2, 6)), torch.tensor([[30, 31, 0, 0], [32, 0, 0, 0]])], 1)
    ids, carry = torch.zeros(2, dtype=torch.long), model.initial_carry(2)
    _, _, before, _ = model(carry.z_H, carry.z_L, x, ids)
    with torch.no_grad():
        bag_part(model).pooled_head.weight.normal_()
    _, _, after, _ = model(carry.z_H, carry.z_L, x, ids)
    emb = model.embed_tokens.weight
    pooled = torch.stack([emb[30:32].mean(0), emb[32]]) * model.embed_scale  # pads left out
    torch.testing.assert_close(after - before, bag_part(model).pooled_head(pooled).unsqueeze(1))


def test_the_fitted_bag_linear_model_reaches_scikit_learns_optimum_and_stays_frozen():
    """email.input_linear: fitted before training to the optimum of scikit-learn's class-balanced L2 logistic
    regression on the multi-hot bag (the same predicted probabilities), added to the class logits as
    buffers (not trained, saved with the weights), and refused without a bag."""
    import pytest
    from sklearn.linear_model import LogisticRegression

    from trmkit.config import ConfigError
    from trmkit.email import linear_fit

    base = dict(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=1,
                mixer="attention", puzzle_emb_len=0, vocab_size=60, seq_len=10, num_puzzle_ids=1, num_classes=3)
    no_bag = model_of(base, {"input_linear": True})  # the e-mail task refuses it, naming the rebuild
    store = SimpleNamespace(meta=SimpleNamespace(source="mail/", build={"label_map": "configs/email-sa3.yaml"}))
    with pytest.raises(ConfigError, match="trmkit data email --source mail/ --label-map configs/email-sa3.yaml "
                                          "--seq-len 32 --bag 1024 --out NEW_DIR"):
        linear_fit.before_training(no_bag, store, None, print)
    with pytest.raises(ConfigError, match="email.input_linear_c=-1"):
        EmailModelConfig(input_linear=True, input_linear_c=-1)
    rng = np.random.default_rng(0)
    n = 90
    y = rng.integers(0, 3, n)
    bags = np.zeros((n, 4), dtype=np.int64)
    for i in range(n):  # each class leans on its own ids, with noise: not separable by one id
        own = rng.choice(np.arange(20 + 10 * y[i], 30 + 10 * y[i]), 2, replace=False)
        other = rng.choice(np.arange(20, 50), int(rng.integers(0, 3)), replace=False)
        ids = np.unique(np.concatenate([own, other]))[:4]
        bags[i, :len(ids)] = np.sort(ids)
    inputs = np.concatenate([rng.integers(1, 20, (n, 6)), bags], 1)
    labels = np.full((n, 10), 3)
    labels[:, 0] = y
    torch.manual_seed(0)
    model = model_of({**base, "part_positions": 4}, {"input_linear": True})
    assert not any("linear" in name for name, _ in model.named_parameters())  # frozen: not trained
    counts = np.bincount(y, minlength=3)
    weights = torch.tensor(n / (3 * counts), dtype=torch.float32)
    linear_fit.fit(model, inputs, labels, weights, c=1.0, log=lambda m: None)
    x = linear_fit.multi_hot(bags, 60).to_dense().numpy()
    reference = LogisticRegression(C=1.0, class_weight="balanced", max_iter=5000, tol=1e-8).fit(x, y)
    ours = torch.softmax(bag_part(model).linear_logits(torch.from_numpy(inputs)), 1).detach().numpy()
    np.testing.assert_allclose(ours, reference.predict_proba(x), atol=2e-3)
    assert "parts.0.linear_weight" in model.state_dict()  # saved and restored with the weights
    carry = model.initial_carry(n)
    _, _, logits, _ = model(carry.z_H, carry.z_L, torch.from_numpy(inputs), torch.zeros(n, dtype=torch.long))
    with torch.no_grad():
        bag_part(model).linear_weight.zero_()
        bag_part(model).linear_bias.zero_()
    _, _, without, _ = model(carry.z_H, carry.z_L, torch.from_numpy(inputs), torch.zeros(n, dtype=torch.long))
    added = torch.softmax(logits[:, 0] - without[:, 0], 1).detach().numpy()  # the forward adds exactly the fitted model
    np.testing.assert_allclose(added, reference.predict_proba(x), atol=2e-3)


def test_out_of_fold_fits_give_training_steps_the_logits_of_a_model_that_did_not_see_the_message():
    """email.input_linear_folds=K: K more fits, each the optimum without one fold (scikit-learn's, with the same
    sample weights); a training forward adds each message's out-of-fold logits, an evaluation the whole fit's."""
    import pytest
    from sklearn.linear_model import LogisticRegression

    from trmkit.config import ConfigError
    from trmkit.email import linear_fit
    from trmkit.email import input_linear

    base = dict(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=1,
                mixer="attention", puzzle_emb_len=0, vocab_size=60, seq_len=10, num_puzzle_ids=1, num_classes=3,
                part_positions=4)
    for wrong in (dict(input_linear_folds=1, input_linear=True), dict(input_linear_folds=3)):
        with pytest.raises(ConfigError, match="email.input_linear_folds"):
            EmailModelConfig(**wrong)
    rng = np.random.default_rng(1)
    n = 120
    y = rng.integers(0, 3, n)
    bags = np.zeros((n, 4), dtype=np.int64)
    for i in range(n):
        ids = np.unique(np.concatenate([rng.choice(np.arange(20 + 10 * y[i], 30 + 10 * y[i]), 2, replace=False),
                                        rng.choice(np.arange(20, 50), 2, replace=False)]))[:4]
        bags[i, :len(ids)] = ids
    inputs = np.concatenate([rng.integers(1, 20, (n, 6)), bags], 1)
    labels = np.full((n, 10), 3)
    labels[:, 0] = y
    weights = torch.tensor(n / (3 * np.bincount(y, minlength=3)), dtype=torch.float32)
    model = model_of(base, {"input_linear": True, "input_linear_folds": 3})
    out = linear_fit.fit(model, inputs, labels, weights, c=1.0, log=lambda m: None)
    fold = input_linear.fold_of(torch.from_numpy(bags), 3).numpy()
    assert set(fold) == {0, 1, 2}
    np.testing.assert_array_equal(fold, input_linear.fold_of(torch.from_numpy(bags[:, ::-1].copy()), 3).numpy())
    x = linear_fit.multi_hot(bags, 60).to_dense().numpy()
    expected = np.zeros((n, 3))
    for k in range(3):
        kept = fold != k
        ref = LogisticRegression(C=1.0, max_iter=5000, tol=1e-8).fit(x[kept], y[kept],
                                                                     sample_weight=weights.numpy()[y[kept]])
        expected[~kept] = ref.predict_proba(x[~kept])
    model.train()
    oof = torch.softmax(bag_part(model).linear_logits(torch.from_numpy(inputs)), 1).detach().numpy()
    np.testing.assert_allclose(oof, expected, atol=2e-3)
    assert out["out_of_fold_accuracy"] == pytest.approx(float((expected.argmax(1) == y).mean()))
    assert out["out_of_fold_accuracy"] < out["train_accuracy"]  # the point: it sees errors the whole fit hides
    model.eval()
    whole = torch.softmax(bag_part(model).linear_logits(torch.from_numpy(inputs)), 1).detach().numpy()
    full = LogisticRegression(C=1.0, max_iter=5000, tol=1e-8).fit(x, y, sample_weight=weights.numpy()[y])
    np.testing.assert_allclose(whole, full.predict_proba(x), atol=2e-3)


def _noisy_bags(seed: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inputs (n, 10), labels (n, 10), bags (n, 4)): 3 classes, each leaning on its own ids, with noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    bags = np.zeros((n, 4), dtype=np.int64)
    for i in range(n):
        ids = np.unique(np.concatenate([rng.choice(np.arange(20 + 10 * y[i], 30 + 10 * y[i]), 2, replace=False),
                                        rng.choice(np.arange(20, 50), int(rng.integers(0, 3)), replace=False)]))
        bags[i, :len(ids)] = ids[:4]
    labels = np.full((n, 10), 3)
    labels[:, 0] = y
    return np.concatenate([rng.integers(1, 20, (n, 6)), bags], 1), labels, bags


def test_idf_features_are_the_bags_tfidf_vector_and_auto_takes_the_best_cross_validated_fit():
    """email.input_linear_weighting=idf: the fit is scikit-learn's logistic regression on TfidfTransformer's
    vectors of the binary bags (smooth idf from the training bags, L2 norm); weighting=auto with C=0 scores
    2 x 4 candidates by 5-fold cross-validation on the training split (as scikit-learn's logistic regression
    and f1_score score them on the same folds) and keeps the best, refitted on the whole split."""
    import pytest
    from sklearn.feature_extraction.text import TfidfTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score

    from trmkit.config import ConfigError
    from trmkit.email import linear_fit

    base = dict(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=1,
                mixer="attention", puzzle_emb_len=0, vocab_size=60, seq_len=10, num_puzzle_ids=1, num_classes=3,
                part_positions=4)
    with pytest.raises(ConfigError, match="email.input_linear_weighting='tfidf'"):
        EmailModelConfig(input_linear=True, input_linear_weighting="tfidf")
    inputs, labels, bags = _noisy_bags(2, 120)
    y = labels[:, 0]
    weights = torch.tensor(120 / (3 * np.bincount(y, minlength=3)), dtype=torch.float32)
    model = model_of(base, {"input_linear": True, "input_linear_weighting": "idf"})
    linear_fit.fit(model, inputs, labels, weights, c=10.0, log=lambda m: None)
    tfidf = TfidfTransformer().fit(linear_fit.multi_hot(bags, 60).to_dense().numpy())
    x = tfidf.transform(linear_fit.multi_hot(bags, 60).to_dense().numpy())
    reference = LogisticRegression(C=10.0, class_weight="balanced", max_iter=5000, tol=1e-8).fit(x, y)
    ours = torch.softmax(bag_part(model).linear_logits(torch.from_numpy(inputs)), 1).detach().numpy()
    np.testing.assert_allclose(ours, reference.predict_proba(x), atol=3e-3)

    auto = model_of(base, {"input_linear": True, "input_linear_weighting": "auto", "input_linear_c": 0})
    lines: list[str] = []
    out = linear_fit.fit(auto, inputs, labels, weights, c=0.0, log=lines.append)
    chose = [line for line in lines if "input_linear chose" in line]  # progress lines may come first on a slow machine
    assert len(chose) == 1 and chose[0].count(" C=") == 9  # the choice and all 8 candidates
    folds = linear_fit.stratified_folds(torch.from_numpy(y), linear_fit.CHOICE_FOLDS)
    dense = linear_fit.multi_hot(bags, 60).to_dense().numpy()
    reference = {}
    for weighting, features in (("binary", dense), ("idf", x)):
        for c in linear_fit.C_GRID:
            pred = np.empty_like(y)
            for k in range(linear_fit.CHOICE_FOLDS):
                fitted = LogisticRegression(C=c, class_weight=None, max_iter=5000, tol=1e-8).fit(
                    features[folds != k], y[folds != k], sample_weight=weights.numpy()[y[folds != k]])
                pred[folds == k] = fitted.predict(features[folds == k])
            reference[weighting, c] = f1_score(y, pred, average="macro")
    _, _, ours_scores = linear_fit.choose("auto", auto.cfg, bags, torch.from_numpy(y), weights[y],
                                          linear_fit.document_idf(bags, 60), 0.0, lambda m: None)
    for key, value in reference.items():  # the same out-of-fold predictions, up to a message at a border
        assert ours_scores[key] == pytest.approx(value, abs=0.02), key
    assert len(set(np.round(list(reference.values()), 3))) > 1  # the candidates differ: the choice means something
    assert reference[out["weighting"], out["c"]] >= max(reference.values()) - 0.02
    assert (out["weighting"], out["c"]) == max(ours_scores, key=ours_scores.get)
    fixed = model_of(base, {"input_linear": True, "input_linear_weighting": out["weighting"],
                            "input_linear_c": out["c"]})
    linear_fit.fit(fixed, inputs, labels, weights, c=out["c"], log=lambda m: None)
    torch.testing.assert_close(bag_part(auto).linear_logits(torch.from_numpy(inputs)),
                               bag_part(fixed).linear_logits(torch.from_numpy(inputs)))  # the chosen fit, on all
    assert float(auto.state_dict()["parts.0.linear_use_idf"]) == float(out["weighting"] == "idf")


def test_the_auto_choice_folds_are_stratified_and_its_ties_go_to_the_first_candidate():
    """Every fold holds each class's share (counts differ by at most one), the same in every call; on
    classes each marked by an id of their own every candidate is right on every message: the first wins."""
    from trmkit.email import linear_fit

    y = torch.tensor([0] * 13 + [1] * 7 + [2] * 3)
    folds = linear_fit.stratified_folds(y, 5)
    assert np.array_equal(folds, linear_fit.stratified_folds(y, 5))
    for cls, count in ((0, 13), (1, 7), (2, 3)):
        per_fold = np.bincount(folds[y.numpy() == cls], minlength=5)
        assert per_fold.sum() == count and per_fold.max() - per_fold.min() <= 1
    n = 60
    labels_ = np.arange(n) % 3
    bags = np.zeros((n, 4), dtype=np.int64)
    bags[:, 0] = 40 + labels_  # the class's own id
    bags[:, 1] = 50 + np.arange(n) % 7  # noise shared across classes
    base = dict(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=1,
                mixer="attention", puzzle_emb_len=0, vocab_size=60, seq_len=10, num_puzzle_ids=1, num_classes=3,
                part_positions=4)
    auto = model_of(base, {"input_linear": True, "input_linear_weighting": "auto", "input_linear_c": 0})
    labels = np.full((n, 10), 3)
    labels[:, 0] = labels_
    out = linear_fit.fit(auto, np.concatenate([np.ones((n, 6), np.int64), bags], 1), labels, None, c=0.0,
                         log=lambda m: None)
    assert (out["weighting"], out["c"]) == ("binary", linear_fit.C_GRID[0])
    assert float(auto.state_dict()["parts.0.linear_use_idf"]) == 0.0


def test_counting_the_word_bag_stays_bounded_and_keeps_the_frequent_ngrams(monkeypatch):
    """Past PRUNE_AT distinct n-grams, those seen in one message so far are dropped: memory stays bounded,
    and an n-gram in many messages keeps its count (a once-seen one can come back, counted from then)."""
    from trmkit.email import bag as bag_mod

    monkeypatch.setattr(bag_mod, "PRUNE_AT", 10)
    texts = [f"common word{i} other{i}" for i in range(30)] + ["word1 again", "word1 again"]
    counts, n = bag_mod._document_frequencies(texts)
    assert n == 32 and len(counts) <= 10 + 5  # never much past the bound (one message's n-grams at most)
    assert counts["common"] == 30  # never pruned: counted in every message
    assert counts.get("again") == 2 and "word5" not in counts  # recent pairs kept, an old singleton gone
    bag = bag_mod.Bag.fit(texts, positions=4, buckets=100, vocab_offset=0)
    assert bag.words[0] == "common" and "again" in bag.words
