"""Training on the search's trace (data.trace): the labels of each supervision step are a wave from G and
then the route from S; the trace tokens fold exactly into the answer they stand for; a training step reads
its own step's row and the halting head the whole trace; a trace run trains, resumes and evaluates."""

import numpy as np
import pytest
import torch

from trmkit.config import ConfigError, ModelConfig
from trmkit.model.losses import (IGNORE, act_loss, all_right, cells_right, log_stablemax, merge_logits,
                                 own_member)
from trmkit.tasks import maze
from trmkit.tasks.maze.trace import (FIRST_TRACE, MOVES, NOT_ROUTE, TRACE_TOKENS, directions, route, route_trace,
                                     trace_labels)
from trmkit.train.step import step_labels

ROUTE = (FIRST_TRACE + 4, FIRST_TRACE + 8)  # "o^" .. "o<"


def test_the_trace_is_a_wave_from_g_then_the_route_from_s():
    rng = np.random.default_rng(4)
    for _ in range(20):
        question, answer, length = maze.generate_maze(11, rng, 0.1, 12)
        labels = trace_labels(question, speed=3, steps=40)  # 120 cells: every route here is done by then
        direction, dist = directions(question)
        open_cells = question == maze.OPEN
        for k, step in enumerate(labels, start=1):
            reached = open_cells & (dist <= 3 * k)
            assert np.array_equal(step >= FIRST_TRACE, reached)  # the wave: exactly the cells within 3k of G
            assert np.array_equal(step[~open_cells], question[~open_cells])  # given cells repeat the input
            traced = (step >= ROUTE[0]) & (step < ROUTE[1])
            # the route is traced from S: its cells j steps from S (L - dist(G)) once 3k >= L + j
            assert np.array_equal(traced, (answer == maze.PATH) & (2 * length - dist <= 3 * k))
        final = labels[-1]
        assert np.array_equal((final >= ROUTE[0]) & (final < ROUTE[1]), answer == maze.PATH)
        for r, c in np.argwhere(final >= FIRST_TRACE):  # every direction is a first move of a shortest route
            dr, dc = MOVES[(int(final[r, c]) - FIRST_TRACE) % 4]
            assert dist[r + dr, c + dc] == dist[r, c] - 1 and direction[r, c] == (final[r, c] - FIRST_TRACE) % 4


def test_a_route_trace_read_from_the_answer_alone_is_the_trace_on_the_route_s_cells():
    rng = np.random.default_rng(8)
    for loops in (0.0, 0.2):  # with loops, several shortest routes: the answer is the trace's own
        for _ in range(10):
            question, _, _ = maze.generate_maze(13, rng, loops, 12)
            cells = route(question, directions(question)[0])
            answer = question.copy()
            for cell in cells[1:-1]:
                answer[cell] = maze.PATH
            full, mine = trace_labels(question, 3, 60), route_trace(question, answer, 3, 60)
            on_route, off_route = answer == maze.PATH, (question == maze.OPEN) & (answer != maze.PATH)
            assert np.array_equal(mine[:, on_route], full[:, on_route])  # step by step, on the route's cells
            assert (mine[:, off_route] == NOT_ROUTE).all()  # the rest of the maze: not the route, folded
            assert np.array_equal(mine[:, question != maze.OPEN], full[:, question != maze.OPEN])


@pytest.mark.parametrize("kind", ["stablemax", "softmax"])
def test_trace_tokens_fold_exactly_into_the_answer_they_stand_for(kind):
    into = tuple(answer for _, answer in TRACE_TOKENS)
    logits = torch.randn(3, 5, 6 + len(into)) * 4
    merged = merge_logits(logits, into, kind)
    probs = (log_stablemax(logits.double()) if kind == "stablemax" else logits.double().log_softmax(-1)).exp()
    want = probs[..., :6].index_add(-1, torch.tensor(into), probs[..., 6:])
    got = (log_stablemax(merged.double()) if kind == "stablemax" else merged.double().log_softmax(-1)).exp()
    assert torch.allclose(got, want, atol=1e-5)
    assert merge_logits(logits, (), kind) is logits  # no trace: the logits themselves


@pytest.mark.parametrize("kind", ["stablemax", "softmax"])
def test_a_folded_label_trains_the_member_the_model_ranks_first_and_scores_the_folded_answer(kind):
    into = tuple(answer for _, answer in TRACE_TOKENS)
    logits = torch.randn(2, 4, 6 + len(into))
    logits[0, 0, FIRST_TRACE + 2] = 5.0  # " v" leads the members of " " at the first cell
    logits[1, 1, FIRST_TRACE + 4] = 6.0  # "o^" leads the second sample's second cell: not a member of " "
    logits.requires_grad_(True)
    labels = torch.tensor([[NOT_ROUTE, FIRST_TRACE, IGNORE, NOT_ROUTE], [maze.WALL, NOT_ROUTE, FIRST_TRACE + 5, 3]])
    own = own_member(logits.detach(), torch.where(labels >= 14, labels - 14, IGNORE), into)
    members = [maze.OPEN, *range(FIRST_TRACE, FIRST_TRACE + 4)]
    assert own[0, 0] == FIRST_TRACE + 2 and own[1, 1] in members and own[1, 1] != FIRST_TRACE + 4
    loss, stats = act_loss(logits, labels, torch.zeros(2), 0.0, kind=kind, fold=into)
    full = log_stablemax(logits.double()) if kind == "stablemax" else logits.double().log_softmax(-1)
    want = [-(full[0, 0, own[0, 0]] + full[0, 1, FIRST_TRACE] + full[0, 3, own[0, 3]]) / 3,
            -(full[1, 0, maze.WALL] + full[1, 1, own[1, 1]] + full[1, 2, FIRST_TRACE + 5] + full[1, 3, 3]) / 4]
    assert torch.allclose(loss.double(), sum(want), atol=1e-5)
    loss.backward()
    assert logits.grad[0, 0, FIRST_TRACE + 2] < 0 and (logits.grad[0, 0, members[:3]] >= 0).all()  # " v" alone up
    sure = torch.full_like(logits, -9.0)
    sure[0, 0, FIRST_TRACE + 2], sure[0, 1, FIRST_TRACE], sure[0, 3, maze.OPEN] = 9.0, 9.0, 9.0  # " v", " ^", " "
    sure[1, :, maze.PATH] = 9.0  # a route token where "not the route" is asked: wrong
    right = cells_right(sure, labels, into, merge_logits(sure, into, kind))
    assert right[0].tolist() == [True, True, False, True] and not right[1, 1]
    assert all_right(sure, labels, into, kind).tolist() == [True, False]
    assert stats["right"].tolist() == cells_right(logits.detach(), labels, into,
                                                  merge_logits(logits.detach(), into, kind)).sum(-1).tolist()


def test_a_step_reads_its_own_row_and_the_halting_head_the_last():
    labels = torch.arange(2 * 4 * 3).view(2, 4, 3)  # (B, K, L)
    mine, done = step_labels(labels, torch.tensor([1, 6], dtype=torch.int32))
    assert torch.equal(mine, torch.stack([labels[0, 0], labels[1, 3]]))  # past K: the last row
    assert torch.equal(done, labels[:, -1])
    flat = torch.zeros(2, 3)
    assert step_labels(flat, torch.tensor([1, 2]))[0] is flat and step_labels(flat, torch.tensor([1, 2]))[1] is None


def test_trace_answers_must_be_answer_ids():
    ModelConfig(vocab_size=6, seq_len=4, trace_answers="2,2,5")
    assert ModelConfig(trace_answers="2, 5").trace_ids == (2, 5)
    for bad in ("2,x", "2,9", "-1"):
        with pytest.raises(ConfigError, match="trace_answers"):
            ModelConfig(vocab_size=6, seq_len=4, trace_answers=bad)


CONFIG = """
run: {seed: 3, threads: 1, dtype: float32, compile: "off", grad_checkpointing: "off"}
model: {mixer: conv, hidden_size: 16, mlp_width: 32, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 4,
        puzzle_emb_len: 0}
data: {stream: generate, trace: 2}
train: {batch_size: 8, max_steps: 6, lr: 3e-3, warmup_steps: 2, ema_decay: 0.9, checkpoint_minutes: 0,
        eval_every: 0, log_every: 1, mask_given: true}
"""


def test_a_trace_run_trains_resumes_exactly_and_evaluates_the_answer(tmp_path, monkeypatch, capsys):
    import json

    from safetensors.torch import load_file

    from trmkit import cli, config as config_mod

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name, size in (("m7", 7), ("m11", 11)):
        maze.build("generate", tmp_path / name, size=size, num=8, min_path=6, test_fraction=1.0, seed=1,
                   log=lambda m: None)
    (tmp_path / "c.yaml").write_text(CONFIG)
    train = ["train", str(tmp_path / "c.yaml"), f"data.path={tmp_path / 'm7'}"]
    assert cli.main([*train, f"run.dir={tmp_path / 'a'}"]) == 0
    assert "data: trace=2 -> every supervision step k" in capsys.readouterr().out
    assert cli.main([*train, f"run.dir={tmp_path / 'b'}", "train.max_steps=3", "train.checkpoint_every=3"]) == 0
    assert cli.main(["train", "--resume", str(tmp_path / "b"), "train.max_steps=6"]) == 0  # (8, 4, 49) labels kept
    a, b = (load_file(str(tmp_path / name / "weights.safetensors")) for name in ("a", "b"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert a["lm_head.weight"].shape[0] == len(maze.VOCAB) + len(TRACE_TOKENS)
    saved = config_mod.load(tmp_path / "a" / "config.yaml")
    assert saved.model.trace_ids == tuple(answer for _, answer in TRACE_TOKENS)
    capsys.readouterr()
    assert cli.main(["eval", str(tmp_path / "a"), "--data", str(tmp_path / "m11"), "--steps", "auto:6",
                     "run.threads=1"]) == 0
    out = capsys.readouterr()
    result = json.loads(out.out)
    assert 0 <= result["valid_path_accuracy"] <= 1 and 1 <= result["steps_used_mean"] <= 6
    assert result["loss"] > 0  # the answer's loss: trace tokens folded in, on the store's plain labels
    assert "eval: a model trained on a trace: evaluation reads the route along the model's arrows" in out.err
    assert cli.main(["eval", str(tmp_path / "a"), "--data", str(tmp_path / "m11"), "maze.read=fold",
                     "run.threads=1"]) == 0
    assert "reads the cells the model marks 'o' (maze.read=fold" in capsys.readouterr().err


def test_a_trace_needs_a_generator_that_writes_one(tmp_path, monkeypatch, capsys):
    from trmkit import cli

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    maze.build("generate", tmp_path / "m7", size=7, num=8, min_path=6, test_fraction=0.5, seed=1, log=lambda m: None)
    (tmp_path / "c.yaml").write_text(CONFIG)
    assert cli.main(["train", str(tmp_path / "c.yaml"), f"data.path={tmp_path / 'm7'}", "data.stream=store",
                     f"run.dir={tmp_path / 'r'}"]) != 0
    assert "data.trace=2 needs data.stream=generate" in capsys.readouterr().err
