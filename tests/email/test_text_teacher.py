"""The few-label guard's logistic regression taught by the text (email/text_teacher.py): the teacher's features
are the rival's, and what it says of the unlabelled messages reaches the bag's model."""

import numpy as np
import pytest
import torch

from trmkit.email import linear_fit
from trmkit.email.text_teacher import Distilled, TextCounts

TEXTS = ["Cheap pills, cheap offer: http://pills.example/buy now", "Meeting agenda for Monday's meeting",
         "cheap offer cheap cheap", "agenda notes: the meeting moved", "Your offer of pills expires now",
         "notes from the agenda", "buy now buy now http://pills.example/buy", "Monday notes, meeting notes"]


def test_the_teachers_features_are_the_rivals_tf_idf():
    """Sublinear tf x smooth idf, rows L2-normalised, the vocabulary and idf of the fitted rows alone (min_df 2):
    scikit-learn's TfidfVectorizer as the rival sets it (with the bag's word rule)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    fit_rows = np.array([0, 1, 2, 3, 4, 6])  # a fold: rows 5 and 7 held out of the vectorizer's fit
    counts = TextCounts.of(TEXTS, TEXTS[5:])
    ours_l, ours_u = counts.features(fit_rows, np.array([2, 0]))
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2, token_pattern=r"[^\W_]{2,}")
    theirs_l = vectorizer.fit_transform([TEXTS[i] for i in fit_rows]).toarray()
    theirs_u = vectorizer.transform([TEXTS[7], TEXTS[5]]).toarray()
    names = sorted(vectorizer.vocabulary_, key=vectorizer.vocabulary_.get)
    grams = sorted({g for t in TEXTS for g in _grams(t)})
    columns = [g for g in grams if sum(g in _grams(t) for t in TEXTS) >= 2]  # TextCounts' columns, in order
    ours = {name: [columns.index(name)] for name in names}
    assert set(names) <= set(columns) and len(names) < len(columns)  # the fold's vocabulary is smaller
    for mine, theirs in ((ours_l, theirs_l), (ours_u, theirs_u)):
        dense = mine.to_dense().numpy()
        picked = np.concatenate([dense[:, ours[name]] for name in names], 1)
        np.testing.assert_allclose(picked, theirs, rtol=1e-5, atol=1e-6)
        assert dense.sum() == pytest.approx(picked.sum(), rel=1e-5)  # nothing outside the fold's vocabulary


def _grams(text: str) -> set[str]:
    from trmkit.email.bag import ngrams

    return set(ngrams(text.lower()))


def test_what_the_teacher_says_of_the_unlabelled_messages_reaches_the_bags_model():
    """Bag id 3 is in one labelled message of each class (no evidence), and in every unlabelled message whose
    text is class 0's: fitted on the labels alone its weight says nothing, taught by the text it says class 0."""
    texts_l = ["cheap pills offer now", "cheap offer pills", "agenda meeting notes", "meeting agenda notes"] * 3
    y_l = torch.tensor([0, 0, 1, 1] * 3)
    texts_u = ["pills offer cheap", "notes agenda meeting"] * 20
    bags_l = np.array([[1, 0], [1, 3], [2, 0], [2, 3]] + [[1, 0], [1, 0], [2, 0], [2, 0]] * 2)
    bags_u = np.array([[3, 0], [0, 0]] * 20)
    x_l, x_u = linear_fit.multi_hot(bags_l, 5), linear_fit.multi_hot(bags_u, 5)

    def fit(x, y, w):
        return linear_fit._fit_one(x, y, w, 2, 10.0)[:2]

    alone = Distilled(x_l, x_u, None, fit).fitted(torch.arange(12), y_l, torch.arange(40))[0]
    taught = Distilled(x_l, x_u, TextCounts.of(texts_l, texts_u), fit)
    labels, known = taught.teach(torch.arange(12), y_l, torch.arange(40))
    assert torch.equal(labels, torch.tensor([0, 1] * 20)) and bool(known.all())
    weight = taught.fitted(torch.arange(12), y_l, torch.arange(40))[0]
    assert abs(float(alone[3, 0] - alone[3, 1])) < 0.05
    assert float(weight[3, 0] - weight[3, 1]) > 1.0
    # a fold: the teacher fitted on the labelled rows it is given, the unlabelled rows it is given
    some, _ = taught.teach(torch.tensor([0, 2, 4, 6, 1, 3]), y_l[[0, 2, 4, 6, 1, 3]], torch.arange(4))
    assert torch.equal(some, torch.tensor([0, 1, 0, 1]))


def test_a_teacher_that_knows_no_word_of_a_message_does_not_label_it():
    """An unlabelled message with none of the teacher's words would get the labelled majority from the bias
    alone: it is left out of the student's fit; with no word in 2+ labelled messages there is no teacher."""
    texts_l = ["cheap pills offer", "cheap offer pills", "agenda meeting notes", "meeting agenda notes"]
    counts = TextCounts.of(texts_l, ["pills offer", "zebra quartz", "agenda notes"])
    assert (counts.labelled_rows, counts.unlabelled_rows) == (4, 3)
    x = linear_fit.multi_hot(np.array([[1], [1], [2], [2]]), 4)
    x_u = linear_fit.multi_hot(np.array([[1], [3], [2]]), 4)
    taught = Distilled(x, x_u, counts, lambda xs, ys, ws: linear_fit._fit_one(xs, ys, ws, 2, 10.0)[:2])
    labels, known = taught.teach(torch.arange(4), torch.tensor([0, 0, 1, 1]), torch.arange(3))
    assert known.tolist() == [True, False, True] and labels[known].tolist() == [0, 1]
    alone = Distilled(x, x_u, None, taught.fit).fitted(torch.arange(4), torch.tensor([0, 0, 1, 1]), torch.arange(3))
    weight = taught.fitted(torch.arange(4), torch.tensor([0, 0, 1, 1]), torch.arange(3))[0]
    assert float(weight[3].abs().max()) == 0.0 and not torch.equal(weight, alone[0])  # id 3: the unknown message's
    none = TextCounts.of(["one", "two", "three", "four"], ["one two", "three", "four"])
    assert none.columns == 0
    blind = Distilled(x, x_u, none, taught.fit).fitted(torch.arange(4), torch.tensor([0, 0, 1, 1]), torch.arange(3))
    assert torch.equal(blind[0], alone[0])


def test_a_store_without_text_has_no_teacher_and_a_broken_text_file_is_named(tmp_path):
    from trmkit.config import ConfigError
    from trmkit.email.text_teacher import read

    for split in ("train", "unlabelled"):
        (tmp_path / split).mkdir()
    (tmp_path / "train" / "messages.json").write_text('[{"subject": "s", "sender": "a", "body": "b"}]')
    assert read(tmp_path) is None  # unlabelled/messages.json missing: the labels alone, said so by the fit
    (tmp_path / "unlabelled" / "messages.json").write_text('[{"subject": "s", "sender": "a"')
    with pytest.raises(ConfigError, match=r"unlabelled/messages.json.*not JSON"):
        read(tmp_path)
    (tmp_path / "unlabelled" / "messages.json").write_text('[{"subject": "s", "sender": "a"}]')
    with pytest.raises(ConfigError, match=r"unlabelled/messages.json: message 0 has no 'body'"):
        read(tmp_path)
