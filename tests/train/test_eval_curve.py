"""`eval --steps K1,K2,...` in one pass (evaluate_curve): each readout is exactly the evaluation at that K."""

import dataclasses

import numpy as np
import torch

from trmkit.config import ModelConfig
from trmkit.data.stream import Batch
from trmkit.model.trm import TRM
from trmkit.train.evaluate import evaluate, evaluate_curve
from trmkit.train.step import StepContext

CTX = StepContext(micro_batch=8, ignore_label_id=0, device=torch.device("cpu"))


class CountingScorer:
    """A task's scorer: counts answers whose first cell is 3 and remembers the halting logits' sum."""

    def __init__(self) -> None:
        self.threes, self.q = 0, 0.0

    def add(self, batch, preds, q_halt) -> None:
        self.threes += int((preds[:, 0] == 3).sum())
        self.q += float(q_halt.sum())

    def result(self) -> dict:
        return {"threes": self.threes, "q_sum": round(self.q, 4)}


def _batches():
    rng = np.random.default_rng(0)
    return [Batch(inputs=rng.integers(1, 11, (6, 9)), labels=rng.integers(1, 11, (6, 9)),
                  puzzle_ids=rng.integers(0, 5, 6)) for _ in range(3)]


def test_each_readout_of_the_one_pass_is_the_evaluation_at_that_k():
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_heads=2, L_layers=1, H_cycles=2, L_cycles=2, halt_max_steps=2,
                      puzzle_emb_len=2, vocab_size=11, seq_len=9, num_puzzle_ids=5)
    model = TRM(cfg)
    with torch.no_grad():
        model.q_head.bias.fill_(0.0)  # halting logits near 0: some examples would stop at some step, some never
    ks = [1, 3, 6]
    curve = evaluate_curve(model, _batches(), CTX, None, {k: CountingScorer() for k in ks})
    assert list(curve) == ks
    for k in ks:
        model.cfg = dataclasses.replace(cfg, halt_max_steps=k)
        alone = evaluate(model, _batches(), CTX, None, CountingScorer())
        assert {m: v for m, v in curve[k].items() if m != "seconds"} == alone, k
        assert curve[k]["seconds"] >= 0
    assert len({curve[k]["loss"] for k in ks}) == 3  # the readouts differ: the steps moved the answer
    assert 1 < np.mean([curve[k]["act_steps"] for k in ks]) < 6  # the halting head stopped some, not all
