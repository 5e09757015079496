"""A maze trace's answer fold (tasks/maze/fold.py) reaches every reader of an answer.

The tiny model's token head is zeroed, so all of its outputs are alike: unfolded, the answer would be
id 0 (the first of equals); folded, id 2 holds its own probability and that of the three trace tokens
standing for it, so the answer is 2 everywhere. Each reader must answer 2.
"""

import dataclasses
from types import SimpleNamespace

import numpy as np
import torch

from trmkit.config import Config, ModelConfig
from trmkit.data.stream import Batch
from trmkit.data.variants import Variants
from trmkit.model.parts import Part
from trmkit.model.trm import TRM
from trmkit.predict.engine import Predictor, Steps, model_parts
from trmkit.tasks import maze
from trmkit.tasks.maze.fold import AnswerFold
from trmkit.train import halting, select, testtime
from trmkit.train.evaluate import evaluate, evaluate_curve
from trmkit.train.step import StepContext

CTX = StepContext(micro_batch=8, ignore_label_id=-100, device=torch.device("cpu"))
V, L, FOLDED = 4, 5, 2


def trace_model() -> TRM:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=2,
                      puzzle_emb_len=2, vocab_size=V, seq_len=L, num_puzzle_ids=2, trace_answers="2,2,2")
    model = TRM(cfg, maze.TASK.model_parts(Config(model=cfg))).eval()
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every output alike: the fold alone decides the answer
    return model


def batch() -> Batch:
    inputs = np.array([[1, 3, 2, 1, 3]] * 3, dtype=np.uint8)
    labels = np.full((3, L), FOLDED, dtype=np.int64)
    return Batch(inputs=inputs, labels=labels, puzzle_ids=np.array([0, 1, 0]), rows=np.arange(3))


def test_the_fold_is_the_maze_tasks_part_and_widens_the_head():
    model = trace_model()
    assert [type(p) for p in model.parts] == [AnswerFold] and model.extra_outputs == 3
    assert model.lm_head.out_features == V + 3
    assert maze.TASK.model_parts(Config(model=dataclasses.replace(model.cfg, trace_answers=""))) == ()
    assert model_parts("maze") is maze.TASK.model_parts and model_parts("email") is None
    assert set(model.state_dict()) == set(TRM(model.cfg, [Part(extra_outputs=3)]).state_dict())  # no weights
    carry = model.initial_carry(3)
    x, pids = torch.ones(3, L, dtype=torch.uint8), torch.zeros(3, dtype=torch.int64)
    _, _, logits, _ = model(carry.z_H, carry.z_L, x, pids)
    assert logits.argmax(-1).eq(0).all() and model.answer_logits(logits).argmax(-1).eq(FOLDED).all()


def test_evaluation_reads_the_folded_answer_one_shot_auto_and_per_k():
    model = trace_model()
    assert evaluate(model, [batch()], CTX, None)["cell_accuracy"] == 1.0
    auto = dataclasses.replace(CTX, halting=halting.StableAnswer(cap=4))
    assert evaluate(model, [batch()], auto, None)["cell_accuracy"] == 1.0  # `eval --steps auto`
    curve = evaluate_curve(model, [batch()], CTX, None, {1: None, 2: None})  # `eval --steps 1,2`
    assert [curve[k]["cell_accuracy"] for k in (1, 2)] == [1.0, 1.0]


def test_select_and_the_vote_read_the_folded_answer():
    model, b = trace_model(), batch()
    answers, _, _ = select.solve(model, CTX, b, select.plan(2, "noise"), 2)  # `eval --select 2`
    assert (answers == FOLDED).all()
    identity = Variants(cells=np.arange(L)[None], tokens=np.arange(V)[None])
    probs, _, _ = testtime._solve_variants_at(model, CTX, b, identity, 1, [1, 2])  # `eval --vote`
    assert [p.shape[-1] for p in probs] == [V, V] and all((p.argmax(-1) == FOLDED).all() for p in probs)


def test_predict_reads_the_folded_answer():
    model = trace_model()
    reader = SimpleNamespace(session=SimpleNamespace(ctx=CTX))
    x = batch().inputs
    for steps in (Steps(2, None, "K"), Steps(None, halting.StableAnswer(cap=4), "auto")):
        tokens, _ = Predictor._think(reader, model, x, steps)
        assert (tokens == FOLDED).all()
