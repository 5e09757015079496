"""`trmkit email pretrain`: the masked-token store (email/pretrain.py) and `train.init_from` (train/init.py)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from tests.email.test_fewlabels import build, write_csv
from trmkit import cli, rundir
from trmkit.config import ConfigError, ModelConfig
from trmkit.data.store import open_split
from trmkit.email import pretrain
from trmkit.email.parts import model_of
from trmkit.email.tokenizer import BODY_ID, CLS_ID, FROM_ID, SPECIALS, SUBJECT_ID
from trmkit.train.init import init_from
from trmkit.train.optim import EMA


def test_a_row_masks_content_tokens_only_and_labels_them_alone():
    row = np.array([CLS_ID, SUBJECT_ID, 10, 11, 12, FROM_ID, 13, BODY_ID, 14, 15, 0, 0, 100, 101, 102, 103, 0, 0])
    for seed in range(20):
        x, y = pretrain.mask_row(row, 12, 0.3, 0.5, np.random.default_rng(seed))
        masked = np.flatnonzero(x[:12] == pretrain.MASK_ID)
        assert len(masked) == 2  # 30% of the 6 content tokens
        assert set(masked) <= {2, 3, 4, 6, 8, 9} and (row[masked] >= len(SPECIALS)).all()
        assert (y[masked] == row[masked]).all() and np.count_nonzero(y) == 2  # 0 (the pad id) is ignored
        assert (x[:12][x[:12] != pretrain.MASK_ID] == row[:12][x[:12] != pretrain.MASK_ID]).all()
        assert set(x[12:]) <= {0, 100, 101, 102, 103} and not y[12:].any()
    one = np.array([CLS_ID, SUBJECT_ID, 10, 0, 7, 0])
    x, y = pretrain.mask_row(one, 4, 0.3, 0.0, np.random.default_rng(0))
    assert x[2] == pretrain.MASK_ID and y[2] == 10 and x[4] == 7  # at least one, and no bag id dropped at 0


@pytest.fixture(scope="module")
def few_store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pre")
    write_csv(root / "mail.csv")
    return build(root, "k3", "--keep-labels", "3", "--bag", "16")


def test_the_store_reads_the_labelled_and_unlabelled_messages_never_test_nor_a_label(few_store, tmp_path):
    out = pretrain.build(few_store, tmp_path / "mlm", copies=2, held_out=2, seed=0, log=lambda m: None)
    train, test = open_split(out / "train"), open_split(out / "test")
    source = {name: open_split(few_store / name) for name in ("train", "unlabelled", "test")}
    read = len(source["train"]) + len(source["unlabelled"])
    assert train.meta.build["read"] == {"train": 6, "unlabelled": len(source["unlabelled"])}
    assert len(train) == 2 * (read - len(test)) and len(test) == min(2, read // 20)
    originals = {tuple(r) for n in ("train", "unlabelled") for r in np.asarray(source[n].inputs)}
    tests = {tuple(r) for r in np.asarray(source["test"].inputs)}
    tokens = train.meta.seq_len - train.meta.part_positions
    for x, y in zip(np.asarray(train.inputs), np.asarray(train.labels)):  # each row: a training message, masked
        filled = x.copy()
        filled[:tokens][y[:tokens] > 0] = y[:tokens][y[:tokens] > 0]
        candidates = [o for o in originals if o[:tokens] == tuple(filled[:tokens])]
        assert candidates and not any(o[:tokens] == tuple(filled[:tokens]) for o in tests)
    assert train.meta.answer_vocab == json.loads((few_store / "train" / "bag.json").read_text())["vocab_offset"]
    assert int(np.asarray(train.labels).max()) < train.meta.answer_vocab and train.meta.ignore_label_id == 0
    assert train.meta.build["source_fingerprint"] == pretrain.fingerprint(few_store)


def write_run(run: Path, model: torch.nn.Module, vocab: list[str]) -> Path:
    run.mkdir()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(rundir.path(run, rundir.WEIGHTS)))
    rundir.path(run, rundir.DATA_META).write_text(json.dumps({"task": "email-mlm", "vocab": vocab}))
    return run


def test_init_from_takes_the_network_and_embeddings_leaves_the_class_head_and_checks_the_vocabulary(tmp_path):
    sizes = dict(mixer="attention", hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1,
                 halt_max_steps=2, puzzle_emb_len=0, vocab_size=40, seq_len=12, num_puzzle_ids=1, part_positions=4)
    torch.manual_seed(0)
    pretrained = model_of({**sizes, "answer_vocab": 30})  # with the bag's part, as the tasks build it
    vocab = [f"t{i}" for i in range(40)]
    run = write_run(tmp_path / "pre", pretrained, vocab)
    clf = model_of({**sizes, "num_classes": 3})
    head = clf.class_head.weight.detach().clone()
    ema, said = EMA(clf, 0.99, False), []
    init_from(clf, ema, str(run), vocab, said.append)
    assert torch.equal(clf.embed_tokens.weight, pretrained.embed_tokens.weight)
    for name, p in pretrained.net.named_parameters():
        assert torch.equal(dict(clf.net.named_parameters())[name], p)
    assert torch.equal(clf.class_head.weight, head)  # left at its start
    assert torch.equal(ema.shadow["embed_tokens.weight"], clf.embed_tokens.weight)
    assert "left at their start: class_head.bias, class_head.weight" in said[0]
    assert "not used: lm_head.weight" in said[0]
    with pytest.raises(ConfigError, match="another vocabulary.*1 differ"):
        init_from(clf, ema, str(run), vocab[:-1] + ["other"], said.append)
    with pytest.raises(ConfigError, match="none of its network's weights fit"):
        init_from(model_of({**sizes, "hidden_size": 8, "num_classes": 3}), None, str(run), vocab, said.append)
    with pytest.raises(ConfigError, match="not found; let that run finish"):
        init_from(clf, ema, str(tmp_path / "nothing"), vocab, said.append)


def test_a_token_head_over_part_of_the_vocabulary_is_checked():
    with pytest.raises(ConfigError, match="answer_vocab=50"):
        ModelConfig(vocab_size=40, seq_len=8, num_puzzle_ids=1, answer_vocab=50)
    with pytest.raises(ConfigError, match="answer_vocab=10"):
        ModelConfig(vocab_size=40, seq_len=8, num_puzzle_ids=1, answer_vocab=10, num_classes=2)


TINY = ["model.hidden_size=16", "model.num_heads=2", "model.L_layers=1", "model.L_cycles=1", "run.threads=1",
        "run.compile=off", "train.batch_size=8", "train.max_minutes=0", "train.fit_to_time=false",
        "train.warmup_steps=1", "train.eval_every=0", "train.checkpoint_every=2"]


def test_the_command_pretrains_resumes_and_the_classifier_starts_from_it(few_store, tmp_path, capsys):
    store, run = tmp_path / "mlm", tmp_path / "pre"
    args = ["email", "pretrain", str(few_store), "--store-out", str(store), "--run-dir", str(run), "--copies", "2"]
    assert cli.main([*args, *TINY, "train.max_steps=2"]) == 0
    err = capsys.readouterr().err
    assert f"train.init_from={run}" in err and (run / rundir.WEIGHTS).is_file()
    assert cli.main([*args, *TINY, "train.max_steps=4"]) == 0  # the same store, the run resumed
    err = capsys.readouterr().err
    assert "was built from" in err and "-> reused" in err and "resumed exactly" in err
    assert json.loads((run / rundir.SUMMARY).read_text())["steps"] == 4
    fine = tmp_path / "fine"
    assert cli.main(["train", "configs/email-fast.yaml", f"data.path={few_store}", f"run.dir={fine}", *TINY,
                     "train.max_steps=2", f"train.init_from={run}", "email.input_linear_c=1"]) == 0
    out = capsys.readouterr()
    assert "init: train.init_from=" in out.out + out.err and "left at their start: class_head.bias" in out.out + out.err


def test_the_softmax_loss_is_cross_entropy_on_the_labelled_cells_only():
    from trmkit.model.losses import IGNORE, act_loss, softmax_cross_entropy

    logits = torch.randn(2, 3, 5)
    labels = torch.tensor([[1, IGNORE, 4], [IGNORE, IGNORE, 0]])
    cells = softmax_cross_entropy(logits, labels)
    want = torch.nn.functional.cross_entropy(logits[0, 0:1], labels[0, 0:1])
    assert cells[0, 1] == 0 and cells[1, :2].eq(0).all() and torch.allclose(cells[0, 0], want)
    soft, _ = act_loss(logits, labels, torch.zeros(2), 0.0, kind="softmax")
    stable, _ = act_loss(logits, labels, torch.zeros(2), 0.0)
    assert torch.allclose(soft, cells[0].sum() / 2 + cells[1].sum()) and not torch.allclose(soft, stable.float())
