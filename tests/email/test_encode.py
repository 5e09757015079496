"""One encoding path (email/encode.py): a message gets the same row from `trmkit data email` as from
`email predict`, in one process and in its worker processes, a body longer than the build keeps too."""

import argparse
from types import SimpleNamespace

import numpy as np

from trmkit.data.imports import ImportReport
from trmkit.email import task, workers
from trmkit.email.bag import Bag, bag_text
from trmkit.email.bundle import Classifier
from trmkit.email.encode import MAX_BODY_CHARS, clip_body, encode_messages, message_fields
from trmkit.email.tokenizer import EmailTokenizer

WORDS = "offer meeting invoice prize report slides account delivery thursday committee".split()


def _eml(subject: str, body: str) -> bytes:
    return (f"From: Bob <bob@example.com>\nTo: ann@example.com\nSubject: {subject}\n"
            f"Date: Mon, 3 Mar 2025 10:00:00 +0000\n\n{body}\n").encode()


def test_a_message_encodes_the_same_in_the_build_and_in_predict(tmp_path):
    filler = " ".join(WORDS[i % 7] for i in range(MAX_BODY_CHARS // 10))
    long_body = f"{filler} zebra quartz {filler}"  # its middle is past what the build keeps
    files = {"ham/1.eml": _eml("Meeting on Thursday", "Please bring the report and the slides."),
             "spam/2.eml": _eml("You won a prize", long_body)}
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(data)
    args = argparse.Namespace(source=str(tmp_path), format="auto", label_from="folder", label_map=None,
                              text_column=None, label_column=None, encoding=None, max_message_bytes=0,
                              seq_len=24, tail=4)
    built = sorted(task.read_labelled(args, ImportReport(str(tmp_path)), lambda m: None), key=lambda m: m.where)
    assert len(built[1].body) < len(long_body) and clip_body(built[1].body) == built[1].body
    tok = EmailTokenizer.train([" ".join(f) for f in message_fields(built)] * 20, vocab_size=300)
    texts = [bag_text(*f) for f in message_fields(built)] + [bag_text("", "", long_body)]  # zebra has an id
    bag = Bag.fit(texts * 3, positions=64, buckets=500,
                  vocab_offset=tok.vocab_size)
    rows = {"train": np.arange(2), "val": np.arange(0), "test": np.arange(0)}
    splits, _ = task.encode_splits(built, rows, ["ham", "spam"], tok, args, bag)
    store_rows = np.asarray(splits["train"].inputs)
    assert store_rows.shape == (2, 24 + 64)

    workers._init(tok.to_json(), bag.to_dict(), 24, 4)  # a predict worker, in this process
    items = [(files[name], len(files[name]), name) for name in sorted(files)]
    _, worker_rows, skipped = workers.parse_and_encode(items)
    assert not skipped
    np.testing.assert_array_equal(worker_rows, store_rows)
    from trmkit.email.mail.mime import parse_bounded

    parsed = [parse_bounded(data, where, size) for data, size, where in items]  # predict in one process
    np.testing.assert_array_equal(encode_messages(tok, bag, parsed, 24, 4), store_rows)
    bundle = SimpleNamespace(tokenizer=tok, bag=bag, seq_len=24, tail=4)  # what Classifier.encode reads
    np.testing.assert_array_equal(Classifier.encode(bundle, parsed), store_rows)
