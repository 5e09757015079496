"""`trmkit adapt` across sizes: a conv maze run adapts to a larger grid (its replayed mazes placed in
that grid, one length per batch, its own held-out split still scored at its size); a model with learned
positions or a store-fed run is refused by name; `trmkit data pairs --canvas/--symbols` builds a small puzzle's
store with a larger one's vocabulary and length, refusing a canvas smaller than the data.

Tiny sizes, bounded by steps: a conv model of 2.6k parameters trained 4 steps on 7 x 7 mazes, adapted 4 steps
on 11 x 11 ones.
"""

import json
import sys

import numpy as np
import pytest
import torch

from tests.adapt.test_adapt import SMALL, accept_all, plugins
from trmkit import config as config_mod
from trmkit import hardware, registry, rundir
from trmkit.adapt.command import adapt, new_config, trace_steps
from trmkit.adapt.config import AdaptConfig, adapt_config
from trmkit.adapt.stream import MIN_BATCH, InGrid, MixedStream, Reblank
from trmkit.model.losses import IGNORE
from trmkit.train.step import labelled_steps, step_labels
from trmkit.api import task_hooks
from trmkit.config import ConfigError
from trmkit.data.generated import GeneratedStream
from trmkit.data.store import read_meta
from trmkit.monitor.loggers import read_metrics
from trmkit.tasks import maze
from trmkit.tasks.maze.sampler import maze_sampler
from trmkit.tasks.pairs.build import build_pairs
from trmkit.train.run import run

CONV = """
run: {seed: 2, threads: 1, dtype: float32, compile: "off", grad_checkpointing: "off"}
model: {mixer: conv, hidden_size: 16, mlp_width: 32, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 2,
        puzzle_emb_len: 0}
data: {stream: generate, curriculum_samples: 0, trace: 2}
train: {batch_size: 16, max_steps: 4, lr: 3e-3, warmup_steps: 1, ema_decay: 0.9, checkpoint_every: 0,
        checkpoint_minutes: 0, log_every: 1, mask_given: true, eval_every: 0}
"""
ATTENTION = """
run: {seed: 2, threads: 1, dtype: float32, compile: "off", grad_checkpointing: "off"}
model: {mixer: attention, hidden_size: 16, num_heads: 2, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 2,
        puzzle_emb_len: 1}
train: {batch_size: 4, max_steps: 1, warmup_steps: 1, checkpoint_minutes: 0, checkpoint_every: 0, eval_every: 0}
"""
@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A finished conv maze run on 7 x 7 (generated samples, trace labels) and 11 x 11 / 7 x 7 new sources."""
    root = tmp_path_factory.mktemp("sizes")
    for name, size, num, min_path, test in (("m7", 7, 8, 6, 1.0), ("m11", 11, 8, 12, 1.0), ("new7", 7, 8, 6, 1.0),
                                            ("m7-store", 7, 8, 6, 0.5)):
        maze.build("generate", root / name, size=size, num=num, min_path=min_path, test_fraction=test,
                   seed=len(name) + size, log=lambda m: None)
    for name, text in (("conv", CONV), ("attention", ATTENTION)):
        (root / f"{name}.yaml").write_text(text)
    cfg = config_mod.load(root / "conv.yaml", [f"data.path={root / 'm7'}", f"run.dir={root / 'run'}"],
                          registry.SECTIONS)
    run(cfg, hardware.probe(), log=lambda m: None, **task_hooks(cfg))
    return root


def test_a_conv_maze_run_adapts_to_a_larger_grid(root, tmp_path):
    said: list[str] = []
    p = plugins(accept_all)
    cfg = new_config(root / "run", root / "m11", p, overrides=SMALL, out=str(tmp_path / "a"), log=said.append)
    result = adapt(cfg, p, log=said.append)
    assert result["steps"] == 4
    saved = config_mod.load(rundir.path(tmp_path / "a", rundir.CONFIG), [], registry.SECTIONS)
    assert (saved.model.seq_len, saved.model.grid_height) == (121, 11)  # trained at the new grid's size
    assert saved.train.batch_size == MIN_BATCH  # 16 x 49 tokens keep 6 rows of 121: raised to the floor, said why
    assert any(f"train.batch_size={MIN_BATCH}" in line and "raised to" in line for line in said)
    assert any("placed in that grid" in line for line in said)
    kept = [r for r in read_metrics(rundir.path(tmp_path / "a", rundir.METRICS)) if "adapt/round" in r]
    assert kept[0]["adapt/kept"] > 0 and kept[-1]["adapt/heldout_problems"] == 2
    summary = json.loads(rundir.path(tmp_path / "a", rundir.SUMMARY).read_text())
    assert summary["samples"] == 8 and "valid_path_accuracy" in summary  # the run's own 7 x 7 split, at 7 x 7
    assert saved.data.path == str(root / "m7")


def test_replayed_mazes_are_the_run_s_own_placed_in_the_new_grid(root):
    meta = read_meta(root / "m7" / "test" / "meta.json")
    placed = InGrid(maze_sampler, 11)
    cfg = config_mod.load(root / "conv.yaml", [f"data.path={root / 'm7'}"], registry.SECTIONS)
    sampler = placed(meta, cfg)
    for i in range(6):
        q, labels = sampler(np.random.default_rng(i), 1.0)
        grid = q.reshape(11, 11)
        open_rows = np.flatnonzero((grid != maze.WALL).any(axis=1))
        assert q.shape == (121,) and labels.shape == (2, 121)  # the trace's labels per supervision step
        assert open_rows[-1] - open_rows[0] < 7  # a 7 x 7 maze (the run's size) somewhere in the 11 x 11 walls
        assert (grid == maze.START).sum() == 1 and (grid == maze.GOAL).sum() == 1


def test_replayed_mazes_are_labelled_for_the_run_s_own_steps_and_then_halt(root):
    """Adapting with a longer N_sup (5), a replayed maze keeps the labels of the run's N_sup (2) only; the trainer
    halts a sample once no later step holds a label, and its halting target is its last labelled row."""
    meta = read_meta(root / "m7" / "test" / "meta.json")
    cfg = config_mod.load(root / "conv.yaml", [f"data.path={root / 'm7'}", "model.halt_max_steps=5"],
                          registry.SECTIONS)
    sampler = InGrid(maze_sampler, 11, n_sup=2)(meta, cfg)
    q, labels = sampler(np.random.default_rng(0), 1.0)
    assert labels.shape == (5, 121) and (labels[2:] == meta.ignore_label_id).all()
    assert (labels[:2] > 0).any(axis=1).all()
    assert "11 x 11 grid" in sampler.describe(1.0)  # the placed sampler's own words
    full = torch.full((3, 5, 4), IGNORE)
    full[0] = 1  # every step labelled
    full[1, :2] = 2  # the first 2 only
    full[2, 4] = 3  # the last only (a kept answer without a trace)
    assert labelled_steps(full).tolist() == [5, 2, 5]
    now, done = step_labels(full, torch.tensor([1, 1, 1], dtype=torch.int32))
    assert done[:, 0].tolist() == [1, 2, 3] and now[:, 0].tolist() == [1, 2, IGNORE]


def test_a_trace_run_s_kept_answer_labels_only_the_last_supervision_step():
    inputs = np.arange(1, 13).reshape(2, 6)
    class Traced:  # a generator with trace labels (3 supervision steps), all 7
        def __call__(self, rng, progress):
            return np.ones(6, np.int64), np.full((3, 6), 7)

        def describe(self, progress):
            return "stand-in"

    stream = MixedStream(GeneratedStream(Traced(), seed=0), inputs, np.zeros(2, np.int64), replay_share=0.5, seed=1,
                         trace_steps=3)
    stream.keep({1: np.full(6, 5)})
    batch = stream.take(40)
    mine = (batch.inputs == inputs[1]).all(axis=1)  # the kept answer's samples; the rest replayed
    assert 0 < mine.sum() < 40 and batch.labels.shape == (40, 3, 6)
    assert (batch.labels[mine, -1] == 5).all() and (batch.labels[mine, :-1] == 0).all()  # 0: ignored
    assert (batch.labels[~mine] == 7).all()  # the replayed samples keep their trace labels


def test_a_trace_run_s_kept_answer_trains_on_the_trace_its_checker_derives(root):
    inputs = np.arange(1, 13).reshape(2, 6)
    seen = []

    def trace_of(x, y):  # a stand-in for Checking.to_trace: step k holds the label + k
        seen.append((x.copy(), y.copy()))
        return np.stack([y + k for k in range(3)])

    class Traced:
        def __call__(self, rng, progress):
            return np.ones(6, np.int64), np.full((3, 6), 7)

        def describe(self, progress):
            return "stand-in"

    stream = MixedStream(GeneratedStream(Traced(), seed=0), inputs, np.zeros(2, np.int64), replay_share=0.5, seed=1,
                         trace_steps=3, trace_of=trace_of)
    stream.keep({1: np.full(6, 5)})
    batch = stream.take(40)
    mine = (batch.inputs == inputs[1]).all(axis=1)
    assert 0 < mine.sum() == len(seen) and all((x == inputs[1]).all() and (y == 5).all() for x, y in seen)
    assert (batch.labels[mine] == np.array([5, 6, 7])[:, None]).all() and (batch.labels[~mine] == 7).all()


def test_a_trace_run_on_a_larger_grid_trains_for_the_steps_its_tries_take(root, tmp_path):
    said: list[str] = []
    p = plugins(accept_all)
    cfg = new_config(root / "run", root / "m11", p, overrides=[*SMALL, "adapt.steps=auto:5"], out=str(tmp_path / "a"),
                     log=said.append)
    adapt(cfg, p, log=said.append)
    saved = config_mod.load(rundir.path(tmp_path / "a", rundir.CONFIG), [], registry.SECTIONS)
    assert saved.model.halt_max_steps == 5 and any("model.halt_max_steps=5 (the run's 2)" in line for line in said)
    plain = trace_steps(new_config(root / "run", root / "m11", p, overrides=[*SMALL, "adapt.steps=auto"],
                                   out=str(tmp_path / "b"), log=said.append), 2, said.append)
    assert plain.model.halt_max_steps == 8 and adapt_config(plain).steps == "auto:8"  # the default cap, 4 x 2, pinned
    mine = new_config(root / "run", root / "m11", p, overrides=[*SMALL, "adapt.steps=auto:5", "model.halt_max_steps=3"],
                      out=str(tmp_path / "c"), log=said.append)
    assert trace_steps(mine, 2, said.append).model.halt_max_steps == 3  # an override's own value stays


def test_a_smaller_grid_or_a_model_with_positions_is_refused_by_name(root, tmp_path):
    small = root / "small-run"
    cfg = config_mod.load(root / "conv.yaml", [f"data.path={root / 'm11'}", f"run.dir={small}", "train.max_steps=1"],
                          registry.SECTIONS)
    run(cfg, hardware.probe(), log=lambda m: None, **task_hooks(cfg))
    p = plugins(accept_all)
    with pytest.raises(ConfigError, match="must hold the run's 11 x 11"):
        adapt(new_config(small, root / "new7", p, overrides=SMALL, out=str(tmp_path / "b"), log=lambda m: None), p,
              log=lambda m: None)
    att = root / "att-run"
    cfg = config_mod.load(root / "attention.yaml", [f"data.path={root / 'm7-store'}", f"run.dir={att}"],
                          registry.SECTIONS)
    run(cfg, hardware.probe(), log=lambda m: None, **task_hooks(cfg))
    with pytest.raises(ConfigError, match=r"mixer=attention\) has learned positions"):
        adapt(new_config(att, root / "m11", p, overrides=SMALL, out=str(tmp_path / "c"), log=lambda m: None), p,
              log=lambda m: None)


def _jsonl(path, grids):
    path.write_text("".join(json.dumps({"input": g, "output": g}) + "\n" for g in grids))
    return path


def test_pairs_canvas_and_symbols_round_trip(tmp_path):
    small = _jsonl(tmp_path / "s.jsonl", [[[1, 0], [0, 2]], [[2, 1], [1, 0]]] * 3)
    large = _jsonl(tmp_path / "l.jsonl", [[[1, 2, 3], [3, 0, 2], [2, 3, 1]]] * 4)
    build_pairs(small, tmp_path / "ps", canvas="3x3", symbols="0-3", test_fraction=0.5, log=lambda m: None)
    build_pairs(large, tmp_path / "pl", symbols="0-3", test_fraction=0.5, log=lambda m: None)
    a, b = (read_meta(tmp_path / name / "test" / "meta.json") for name in ("ps", "pl"))
    assert list(a.vocab) == list(b.vocab) == ["<pad>", "0", "1", "2", "3"] and a.seq_len == b.seq_len == 9
    assert a.build["canvas"] == "3x3" and a.build["symbols"] == "0-3" and b.build["canvas"] is None
    rows = np.load(tmp_path / "ps" / "test" / "inputs.npy").reshape(-1, 3, 3)
    assert (rows[:, 2, :] == 0).all() and (rows[:, :, 2] == 0).all() and (rows[:, :2, :2] > 0).all()  # padding


@pytest.mark.parametrize("canvas, symbols, message", [
    ("2x2", None, r"--canvas 2x2 is smaller than the data's 3x3"),
    ("9", None, r"--canvas '9': this file holds grids, give ROWSxCOLUMNS"),
    (None, "0-x", r"'x' is no grid cell"),
    (None, "5-2", r"runs backwards"),
])
def test_pairs_refuses_a_small_canvas_and_bad_symbols_by_name(tmp_path, canvas, symbols, message):
    source = _jsonl(tmp_path / "l.jsonl", [[[1, 2, 3], [3, 0, 2], [2, 3, 1]]] * 4)
    with pytest.raises(ValueError, match=message):
        build_pairs(source, tmp_path / "out", canvas=canvas, symbols=symbols, log=lambda m: None)
    assert not (tmp_path / "out").exists()


def test_latin_squares_with_more_symbols_show_every_symbol_of_a_square(tmp_path):
    sys.path.insert(0, "examples")
    try:
        import latin_squares
    finally:
        sys.path.pop(0)
    out = tmp_path / "l.jsonl"
    latin_squares.main(["--size", "4", "--symbols", "6", "--num", "30", "--blanks", "12", "--out", str(out)])
    seen = set()
    for line in out.read_text().splitlines():
        pair = json.loads(line)
        square, puzzle = np.array(pair["output"]), np.array(pair["input"])
        symbols = set(square.ravel().tolist())
        assert len(symbols) == 4 and symbols <= set(range(1, 7)) and (puzzle == 0).sum() == 12
        assert symbols == set(puzzle.ravel().tolist()) - {0}  # every symbol of the square among the givens
        seen |= symbols
    assert seen == set(range(1, 7))


def test_reblank_blanks_a_kept_completion_answer_s_givens_up_to_the_new_source_s_blank_counts():
    """adapt.reblank: blank 1, padding 0. The source's problems have 5 and 1 blanks; the kept answer of the
    1-blank one trains with 1 or 5 blanks (4 givens more at most), never at the padding, its label unchanged;
    an answer that changes a given is no completion of its input and keeps its input."""
    inputs = np.array([[1, 1, 1, 1, 1, 3, 0], [2, 1, 3, 4, 5, 6, 0], [2, 1, 3, 4, 5, 6, 0]])
    label = np.array([2, 7, 3, 4, 5, 6, 0])
    reblank = Reblank.of(inputs[:2], blank=1, pad=0)
    assert reblank.counts.tolist() == [5, 1]

    class Never:  # replay_share 0: every sample a kept answer, none replayed
        def take(self, k):
            raise AssertionError(f"asked for {k} replayed samples")

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            assert state == {}

    stream = MixedStream(Never(), inputs, np.zeros(3, np.int64), replay_share=0.0, seed=1, reblank=reblank)
    stream.keep({1: label})
    batch = stream.take(60)
    blanks = (batch.inputs == 1).sum(1)
    assert set(blanks.tolist()) == {1, 5}  # both counts drawn
    assert (batch.labels == label).all() and (batch.inputs[:, -1] == 0).all()
    assert ((batch.inputs == label) | (batch.inputs == 1)).all()  # each cell its given or a blank
    assert stream.reblanked == {"blanked": int((blanks == 5).sum()), "as_is": int((blanks == 1).sum()),
                                "not_completion": 0}
    plain = MixedStream(Never(), inputs, np.zeros(3, np.int64), replay_share=0.0, seed=1)
    plain.keep({1: label})
    assert (plain.take(60).inputs == inputs[1]).all()  # without reblank: the input as it is

    wrong = MixedStream(Never(), inputs, np.zeros(3, np.int64), replay_share=0.0, seed=1, reblank=reblank)
    wrong.keep({2: np.array([2, 7, 3, 4, 5, 5, 0])})  # changes the given 6: not a completion of its input
    assert (wrong.take(20).inputs == inputs[2]).all() and wrong.reblanked["not_completion"] == 20  # counted
    restored = MixedStream(Never(), inputs, np.zeros(3, np.int64), replay_share=0.0, seed=1, reblank=reblank)
    restored.load_state_dict(wrong.state_dict())
    assert restored.reblanked == wrong.reblanked  # a resumed run goes on counting


def test_reblank_without_a_blank_token_or_kept_answers_to_train_is_refused_with_the_fix(tmp_path):
    from types import SimpleNamespace

    from trmkit.adapt.command import _reblank

    meta = SimpleNamespace(blank_id=None, source="new.jsonl", pad_id=0, vocab=("<pad>", "a", "b"))
    problems = SimpleNamespace(meta=meta, inputs=np.ones((3, 4), np.int64))
    with pytest.raises(ConfigError, match=r"--blank SYMBOL.*adapt.reblank=false"):
        _reblank(problems, np.arange(3), "new", str(tmp_path), print)
    with pytest.raises(ConfigError, match="only objective=pseudo trains on them"):
        AdaptConfig(reblank=True, objective="tr-rpg")


def test_eval_checker_scores_a_trace_maze_run_by_its_route(root):
    """`trmkit eval --checker` on a maze run that trains on a trace: its answers folded, judged by the maze's rules."""
    import trmkit
    from trmkit.tasks.maze.checker import RULES

    result = trmkit.evaluate(root / "run", root / "new7", checker="", log=lambda m: None)
    assert result["checker_problems"] == 8 and result["checker"] == RULES
    assert 0.0 <= result["checker_one_shot"] <= 1.0
