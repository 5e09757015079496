"""The LM demo's seeding (scripts/rl-demo.sh, configs/selfplay-lm-tiny.yaml): what seeding trains on is what
generation writes and the parser reads, and micro-batches grouped by length change no gradient, only the cost.

The demo of 2026-12-05 scored 0.000 with every held-out answer unparsable: seeding padded each batch to its
longest row (a 2,000-byte propose example beside 400-byte solve prompts), so 2.5 minutes gave 11 steps and the
model wrote nothing but backticks."""

from pathlib import Path

import pytest
import torch

from trmkit import config as config_mod
from trmkit.rl import commands
from trmkit.rl.azr import roles
from trmkit.rl.azr.tasks import Answer, AzrTask, parse_answer, prompt
from trmkit.rl.config import APPS
from trmkit.rl.lm.update import MicroBatch
from trmkit.rl.lm_objective import length_groups

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "selfplay-lm-tiny.yaml"
TINY = ["rl.model_shape=tiny", "rl.heldout_per_type=20", "rl.eval_per_type=2", "rl.buffer_size=8", "run.threads=1",
        "rl.micro_batch=4"]


class KeepGradients(torch.optim.SGD):
    """An optimizer whose step keeps the (clipped) gradients and leaves the weights alone."""

    def __init__(self, params):
        super().__init__(params, lr=0.0)

    def step(self, closure=None):
        self.kept = torch.cat([p.grad.flatten().clone() for g in self.param_groups for p in g["params"]
                               if p.grad is not None])


@pytest.fixture
def seeding(tmp_path):
    torch.manual_seed(0)
    cfg = config_mod.load(CONFIG, TINY + [f"run.dir={tmp_path / 'seed'}"], APPS)
    objective, cfg = commands.make_objective("seed", cfg, log=lambda m: None)
    model = objective.build_model(torch.device("cpu"), lambda m: None)
    objective.micro = MicroBatch(4, log=lambda m: None)
    yield objective, model
    objective.close()


def test_length_groups_keep_every_row_once_sorted_and_pad_little():
    lengths = [400, 2100, 380, 450, 1700, 30, 420, 2000]
    groups = list(length_groups(lengths, size=16))
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    flat = [lengths[i] for g in groups for i in g]
    assert flat == sorted(lengths)
    for g in groups:  # a group's padded tokens within 1.25x its real ones (a lone row pads nothing)
        assert len(g) * max(lengths[i] for i in g) <= 1.25 * sum(lengths[i] for i in g)
    assert [len(g) for g in groups] == [1, 4, 3]  # the 30 alone; 380-450; 1700-2100
    assert max(len(g) for g in length_groups([100] * 10, size=3)) == 3  # at most `size` rows


def test_grouped_micro_batches_give_the_whole_batch_s_loss_and_gradient(seeding):
    objective, model = seeding
    pairs = objective.game.sft_examples(6)  # solve, propose and critique examples of different lengths
    sums = {}
    for size in (6, 1):  # one padded batch (slack off), then one row per micro-batch
        objective.micro = MicroBatch(size, log=lambda m: None)
        opt = KeepGradients(model.parameters())
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("trmkit.rl.lm_objective.PAD_SLACK", float("inf") if size == 6 else 1.0)
            stats = objective.sft_update(model, opt, pairs)
        sums[size] = (stats["loss"], opt.kept, stats["padding"])
    assert sums[6][0] == pytest.approx(sums[1][0], abs=1e-5) and sums[1][2] == 1.0  # one row: no padding
    assert sums[6][2] > 1.5  # the batch padded as one to its longest row
    objective.micro = MicroBatch(6, log=lambda m: None)
    stats = objective.sft_update(model, KeepGradients(model.parameters()), pairs)
    assert stats["padding"] <= 1.4  # padded tokens over real ones (was 2.5-3.5 with the batch padded as one)
    assert float((sums[6][1] - sums[1][1]).abs().max()) < 1e-5  # pads add nothing


def test_what_seeding_trains_is_what_greedy_generation_writes_and_the_parser_reads(seeding):
    objective, model = seeding
    program = "def f(x):\n    x = x[::-1]\n    return x"
    tasks = [AzrTask("deduction", program, ("[1, 2]",), ("[2, 1]",)),
             AzrTask("abduction", program, ("[5, 3, 4]",), ("[4, 3, 5]",))]
    pairs = [(prompt(t), roles.solve_target(t)) for t in tasks]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(80):  # a tiny model memorises two examples: the alignment, bos, eos and padding must agree
        loss = objective.sft_update(model, opt, pairs)["loss"]
    assert loss < 0.1
    model.eval()
    texts = objective.sample(model, [p for p, _ in pairs], 1, True).texts
    assert texts == [t for _, t in pairs]  # stops at eos right after the closing tag
    answers = [parse_answer(text, t.kind) for text, t in zip(texts, tasks)]
    assert all(isinstance(a, Answer) for a in answers) and answers[0].value == [2, 1]

