"""Test-time variants and the vote (data/variants.py; tasks' Variants for Maze and Sudoku):
every symmetry is undone exactly (an oracle that answers each variant right scores 1.0 after
the vote), ballots that break the task's rules are not counted, and bad maps are refused."""

import numpy as np
import pytest

from trmkit.data.store import open_store
from trmkit.data.variants import Variants, vote
from trmkit.tasks import maze
from trmkit.tasks.maze.generate import PATH
from trmkit.tasks.maze.variants import maze_variants
from trmkit.tasks.sudoku.build import build_sudoku
from trmkit.tasks.sudoku.variants import keeps_rules, sudoku_variants


def one_hot(tokens: np.ndarray, vocab: int) -> np.ndarray:
    return np.eye(vocab, dtype=np.float32)[tokens]  # (b, L, V)


def oracle_vote(split, variants: Variants) -> np.ndarray:
    """Each variant answered right (the label under the same symmetry), undone and voted."""
    inputs, labels = np.asarray(split.inputs), np.asarray(split.labels)
    probs = []
    for v in range(len(variants)):
        answer = variants.apply(labels, v)
        assert not np.array_equal(answer, labels) or v == 0 or len(variants) == 1  # the variant moved cells
        probs.append(variants.undo(one_hot(answer, split.meta.vocab_size), v))
    return vote(inputs, probs, variants.check)


def test_the_vote_undoes_every_maze_symmetry(tmp_path):
    maze.build("generate", tmp_path / "m", size=9, num=6, test_fraction=1, seed=4, log=lambda m: None)
    split = open_store(tmp_path / "m")["test"]
    variants = maze_variants(split.meta, 8)
    assert len(variants) == 8 and len({v.tobytes() for v in variants.cells}) == 8
    assert variants.check(split.inputs, split.labels).all()  # a true path passes the check
    np.testing.assert_array_equal(oracle_vote(split, variants), split.labels)
    with pytest.raises(ValueError, match="8 symmetries"):
        maze_variants(split.meta, 9)


def test_the_vote_undoes_every_sudoku_symmetry_and_relabelling(tmp_path):
    build_sudoku("generate", tmp_path / "s", test_fraction=1.0, num_generate=5, givens="30", seed=1)
    split = open_store(tmp_path / "s")["test"]
    variants = sudoku_variants(split.meta, 6)
    assert len({t.tobytes() for t in variants.tokens}) == 6  # the digits are relabelled
    assert (variants.tokens[:, :2] == [0, 1]).all()  # pad and blank stay what they are
    np.testing.assert_array_equal(oracle_vote(split, variants), split.labels)


def test_a_ballot_that_breaks_the_rules_is_not_counted(tmp_path):
    build_sudoku("generate", tmp_path / "s", test_fraction=1.0, num_generate=2, givens="30", seed=2)
    split = open_store(tmp_path / "s")["test"]
    inputs, labels = np.asarray(split.inputs), np.asarray(split.labels)
    broken = labels.copy()
    broken[:, 0], broken[:, 1] = labels[:, 1], labels[:, 0]  # two cells swapped: a row still holds 1..9, columns not
    assert keeps_rules(inputs, labels).all() and not keeps_rules(inputs, broken).any()
    hot = lambda t: one_hot(t, split.meta.vocab_size)  # noqa: E731
    # three rule-breaking ballots against one valid one: the valid one wins
    voted = vote(inputs, [hot(broken)] * 3 + [hot(labels)], keeps_rules)
    np.testing.assert_array_equal(voted, labels)
    # no check: the mean probabilities decide, and the majority's grid wins
    np.testing.assert_array_equal(vote(inputs, [hot(broken)] * 3 + [hot(labels)], None), broken)


def test_maze_check_reads_the_question_alone():
    question = np.array([[3, 2, 2], [1, 1, 2], [4, 2, 2]])  # S . . / # # . / G . .
    path = np.array([[0, 1, 1], [0, 0, 1], [0, 1, 1]], dtype=bool)
    assert maze.is_path(question, path)
    assert not maze.is_path(question, path & ~np.eye(3, dtype=bool)[::-1])  # a gap
    longer = path.copy()
    longer[1, 1] = True  # a wall cell: never a path
    assert not maze.is_path(question, longer)
    answer = np.where(path, PATH, question).reshape(1, -1)
    meta = type("Meta", (), {"grid_shape": (3, 3), "seq_len": 9, "vocab_size": 6})
    assert maze_variants(meta, 4).check(question.reshape(1, -1), answer).all()


def test_variant_maps_are_checked():
    with pytest.raises(ValueError, match="variant 0 must be the example itself"):
        Variants(np.array([[1, 0]]), np.array([[0, 1]]))
    with pytest.raises(ValueError, match="permutation"):
        Variants(np.array([[0, 1], [0, 0]]), np.array([[0, 1], [0, 1]]))


def test_a_maze_vote_prefers_the_shorter_of_two_paths_over_more_ballots():
    """Of the ballots that pass the check, the task's ranking (prefer) goes first: a maze's shorter valid
    path wins against a longer valid one with three times the ballots; without prefer the count wins."""
    from types import SimpleNamespace

    from trmkit.tasks.maze.generate import GOAL, OPEN, START, WALL

    grid = np.array([[START, OPEN, OPEN, OPEN],
                     [OPEN, WALL, WALL, OPEN],
                     [GOAL, WALL, WALL, OPEN],
                     [OPEN, OPEN, OPEN, OPEN]])
    inputs = grid.reshape(1, 16)
    short, long_ = inputs.copy(), inputs.copy()
    short[0, 4] = PATH  # S, down, G: 1 cell
    long_[0, [1, 2, 3, 7, 11, 15, 14, 13, 12]] = PATH  # round the walls: 9 cells
    meta = SimpleNamespace(grid_shape=(4, 4), seq_len=16, vocab_size=6)
    variants = maze_variants(meta, 1)
    assert variants.check(inputs, short).all() and variants.check(inputs, long_).all()  # both are paths
    ballots = [one_hot(long_, 6)] * 3 + [one_hot(short, 6)]
    np.testing.assert_array_equal(vote(inputs, ballots, variants.check, prefer=variants.prefer), short)
    np.testing.assert_array_equal(vote(inputs, ballots, variants.check), long_)
