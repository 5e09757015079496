"""A trace model's route read by walking its arrows from S (tasks/maze/trace.py walk, fold.py `maze.read`).

The logits are made by hand from a maze's true trace: each cell's token the trace's last step holds, with
stray "o" marks added off the route. Folded, those marks spoil the answer; walked, they change nothing.
"""

import numpy as np
import pytest
import torch

from trmkit.config import Config, ConfigError, ModelConfig
from trmkit.tasks.maze.config import MazeConfig
from trmkit.tasks.maze.data import is_shortest_path
from trmkit.tasks.maze.fold import AnswerFold, model_parts
from trmkit.tasks.maze.generate import GOAL, OPEN, PATH, START, WALL, generate_maze
from trmkit.tasks.maze.trace import FIRST_TRACE, MOVES, TRACE_TOKENS, directions, trace_labels, walk

INTO = tuple(answer for _, answer in TRACE_TOKENS)


def maze(seed: int = 3, n: int = 11):
    question, answer, length = generate_maze(n, np.random.default_rng(seed), min_path=15)
    return question, answer, length


def hand_logits(question: np.ndarray, stray: np.ndarray) -> torch.Tensor:
    """(1, N*N, 6 + 8): 5 on the token of the trace's last step, 0 elsewhere; the stray cells' direction
    tokens turned into route tokens ("o" plus the same arrow)."""
    labels = trace_labels(question, 8, 40)[-1].copy()
    on_open = (labels >= FIRST_TRACE) & (labels < FIRST_TRACE + 4) & stray
    labels[on_open] += 4
    logits = np.zeros((question.size, 6 + len(INTO)), dtype=np.float32)
    logits[np.arange(question.size), labels.reshape(-1)] = 5.0
    return torch.from_numpy(logits)[None]


def test_walking_the_true_arrows_gives_the_shortest_route():
    question, answer, length = maze()
    arrows, _ = directions(question)
    marked = walk(question, np.maximum(arrows, 0), (answer == PATH).astype(float))
    assert marked is not None and np.array_equal(marked, answer == PATH)
    assert is_shortest_path(question, marked, length)


def test_a_walk_into_a_wall_or_round_a_loop_reads_nothing():
    question, answer, _ = maze()
    arrows, _ = directions(question)
    arrows = np.maximum(arrows, 0)
    route = np.argwhere(answer == PATH)
    cell = tuple(route[len(route) // 2])
    into_wall = arrows.copy()
    walls = [k for k, (dr, dc) in enumerate(MOVES) if question[cell[0] + dr, cell[1] + dc] == WALL]
    into_wall[cell] = walls[0]
    assert walk(question, into_wall, (answer == PATH).astype(float)) is None
    back = arrows.copy()  # the next cell's arrow points back: the walk would go round for ever
    dr, dc = MOVES[arrows[cell]]
    back[cell[0] + dr, cell[1] + dc] = MOVES.index((-dr, -dc))
    assert walk(question, back, (answer == PATH).astype(float)) is None


def test_stray_route_marks_spoil_the_fold_not_the_walk():
    question, answer, length = maze()
    off = (question == OPEN) & (answer != PATH)
    start = np.argwhere(question == START)[0]
    beside_s = np.zeros(question.shape, dtype=bool)
    beside_s[max(0, start[0] - 1):start[0] + 2, max(0, start[1] - 1):start[1] + 2] = True
    stray = off & ~beside_s & (np.random.default_rng(0).random(question.shape) < 0.3)
    logits, x = hand_logits(question, stray), torch.from_numpy(question.reshape(1, -1).astype(np.int64))
    folded = AnswerFold(INTO, read="fold").answer(logits, x).argmax(-1).numpy().reshape(question.shape)
    walked = AnswerFold(INTO, read="walk").answer(logits, x)
    cells = walked.argmax(-1).numpy().reshape(question.shape)
    assert not is_shortest_path(question, (folded == PATH) & (question == OPEN), length)
    assert np.array_equal((cells == PATH) & (question == OPEN), answer == PATH)
    fold = AnswerFold(INTO, read="fold").answer(logits, x).numpy()
    assert np.array_equal(AnswerFold(INTO).answer(logits).numpy(), fold)  # no input: the folded answer
    assert sorted(walked.numpy().ravel()) == pytest.approx(sorted(fold.ravel()))  # logits exchanged, none made


def test_a_route_mark_beside_s_pointing_back_to_s_is_not_where_the_walk_starts():
    question, answer, length = maze()
    start = tuple(np.argwhere(question == START)[0])
    arrows, _ = directions(question)
    arrows = np.maximum(arrows, 0)
    behind = [(start[0] + dr, start[1] + dc) for dr, dc in MOVES]
    behind = [c for c in behind if 0 <= c[0] < 11 and 0 <= c[1] < 11 and question[c] == OPEN and answer[c] != PATH]
    assert behind and MOVES[arrows[behind[0]]] == (start[0] - behind[0][0], start[1] - behind[0][1])
    score = (answer == PATH).astype(float)
    score[behind[0]] = 10.0  # marked most, but its way to G is through S
    marked = walk(question, arrows, score)
    assert marked is not None and is_shortest_path(question, marked, length)


def test_a_walk_that_fails_leaves_the_folded_answer():
    question, answer, _ = maze()
    logits, x = hand_logits(question, np.zeros(question.shape, dtype=bool)), torch.from_numpy(
        question.reshape(1, -1).astype(np.int64))
    route = np.argwhere(answer == PATH)
    r, c = route[len(route) // 2]
    wall = next(k for k, (dr, dc) in enumerate(MOVES) if question[r + dr, c + dc] == WALL)
    at = r * question.shape[1] + c
    logits[0, at, FIRST_TRACE:] = 0.0
    logits[0, at, FIRST_TRACE + 4 + wall] = 5.0  # marked as route, its arrow into a wall
    walked = AnswerFold(INTO, read="walk").answer(logits, x)
    assert torch.equal(walked, AnswerFold(INTO, read="fold").answer(logits, x))


def test_the_read_is_the_maze_sections_and_checked():
    model = ModelConfig(trace_answers=",".join(map(str, INTO)))
    cfg = Config(model=model, sections={"maze": MazeConfig(read="fold")})
    assert [p.read for p in model_parts(cfg)] == ["fold"]
    assert [p.read for p in model_parts(Config(model=model))] == ["walk"]
    with pytest.raises(ConfigError, match="maze.read='both'"):
        MazeConfig(read="both")


class TracingModel:
    """A fake step function that writes a maze's true trace: at step t the one-hot logits of trace_labels' step
    t (the wave from G, 8 cells a step, then the route traced back from S), read through `fold`."""

    def __init__(self, question: np.ndarray, fold: AnswerFold, steps: int) -> None:
        self.labels = trace_labels(question, 8, steps).reshape(steps, -1)
        self.fold = fold

    def initial_carry(self, batch, device):
        from types import SimpleNamespace
        return SimpleNamespace(z_H=torch.zeros(batch, self.labels.shape[1], 1), z_L=torch.zeros(batch, 1, 1))

    def __call__(self, z_H, z_L, inputs, pids):
        t = int(z_H[0, 0, 0]) + 1
        tokens = torch.from_numpy(self.labels[min(t, len(self.labels)) - 1].astype(np.int64))
        logits = 5.0 * torch.nn.functional.one_hot(tokens, 6 + len(INTO)).float()[None].expand(len(inputs), -1, -1)
        return torch.full_like(z_H, float(t)), z_L, logits, torch.full((len(inputs),), -1.0)

    def answer_logits(self, logits, inputs=None):
        return self.fold.answer(logits, inputs)

    def settled(self, logits, inputs):
        return self.fold.settled(logits, inputs)


def test_steps_auto_stops_on_a_walk_once_the_wave_has_passed_s_and_on_the_trace_only_when_it_is_done():
    from trmkit.train.halting import StableAnswer, think_until_stable
    from trmkit.train.step import StepContext

    question, answer, length = maze(n=21)
    x = torch.from_numpy(question.reshape(1, -1).astype(np.int64))
    ctx = StepContext(micro_batch=1, ignore_label_id=0, device=torch.device("cpu"),
                      given_tokens=torch.tensor([WALL, START, GOAL]))
    used, cells = {}, {}
    for read in ("walk", "fold"):
        model = TracingModel(question, AnswerFold(INTO, read=read), 64)
        logits, _, _, took = think_until_stable(model, x, torch.zeros(1, dtype=torch.long), ctx, StableAnswer(cap=64))
        used[read] = int(took[0])
        cells[read] = model.answer_logits(logits, x).argmax(-1).numpy().reshape(question.shape)
        assert np.array_equal((cells[read] == PATH) & (question == OPEN), answer == PATH), read
    s_reached = -(-(length - 1) // 8)  # the first step whose wave (8 cells a step) reaches the cell after S
    assert used["walk"] == s_reached + 2  # the route walked at that step, then 2 steps unchanged
    assert used["fold"] == -(-2 * length // 8) + 2  # the traceback done (2L / 8 steps), then 2 steps unchanged
    assert used["walk"] < used["fold"]
