"""Seeding with rl.seed_pool: every SFT example, the self-play anchor's included, comes from the pool."""

import pytest
import torch

from trmkit.config import Config, ConfigError, RunConfig
from trmkit.rl import programs as P
from trmkit.rl.config import RLConfig, with_rl
from trmkit.rl.selfplay import SelfPlayObjective


def pool_config(seed=3):
    return with_rl(Config(run=RunConfig(seed=seed)), seed_pool=9, buffer_size=4, heldout_per_type=2)


@pytest.fixture(scope="module")
def pooled():
    said = []
    obj = SelfPlayObjective(pool_config(), log=said.append)
    yield obj, said
    obj.close()


def labels_seen(examples, pool) -> set:
    """The pool tasks the examples were built from; fails on any example from outside the pool."""
    tasks = {tuple(P.task_tokens(t)): t.key() for t in pool}
    proposals = {tuple(P.proposal_tokens(t)): t.key() for t in pool}
    width = {k: len(P.task_tokens(next(t for t in pool if t.kind == k))) for k in {t.kind for t in pool}}
    seen = set()
    for role, kind, row, target, _ in examples:
        start = 3 if role == "propose" else 2
        seen.add(tasks[tuple(row[start:start + width[kind]])])  # the task in the prompt (a reference for propose)
        if role == "propose":
            seen.add(proposals[tuple(target)])
    return seen


def test_seed_pool_keeps_seeding_and_the_anchor_inside_the_pool(pooled, monkeypatch):
    obj, said = pooled
    assert len({t.key() for t in obj.pool}) == 9 and "seed_pool=9" in said[0]
    seen = labels_seen(obj.examples(120), obj.pool)
    assert 6 <= len(seen) <= 9  # 120 examples of 9 labelled tasks: most of the pool, nothing else
    anchors = []
    monkeypatch.setattr(obj, "examples", lambda n: anchors.append(SelfPlayObjective.examples(obj, n)) or anchors[-1])
    assert obj.anchor_groups("cpu")
    assert len(anchors[0]) == obj.rl.anchor_examples
    assert labels_seen(anchors[0], obj.pool) <= {t.key() for t in obj.pool}


def test_the_pool_is_fixed_by_the_run_seed(pooled):
    obj, _ = pooled
    again = SelfPlayObjective(pool_config(), log=lambda m: None)
    try:
        assert again.pool == obj.pool
    finally:
        again.close()


def test_pool_val_is_scored_by_evaluations_and_never_trained_on(monkeypatch):
    cfg = with_rl(Config(run=RunConfig(seed=3)), seed_pool=9, pool_val=3, buffer_size=4, heldout_per_type=2)
    said = []
    obj = SelfPlayObjective(cfg, log=said.append)
    try:
        val = {t.key() for t, _ in obj.validation}
        assert len(val) == 3 and len(obj.pool) == 6 and not val & {t.key() for t in obj.pool}
        assert any("pool_val=3" in m for m in said)
        assert labels_seen(obj.examples(60), obj.pool) <= {t.key() for t in obj.pool}  # raises on a val task
        scored = []
        monkeypatch.setattr(obj, "_greedy", lambda model, ctx, role, kind, rows: scored.append(rows) or
                            [[0] * P.layout(role, kind).response for _ in rows])
        out = obj.evaluate(model=torch.nn.Module(), ctx=None)
        assert out["samples"] == 3 and sum(len(r) for r in scored) == 6  # 3 answers and 3 verdicts asked
        assert obj.fresh_task("deduction").key() not in val
    finally:
        obj.close()


def test_pool_val_must_be_a_part_of_the_pool():
    with pytest.raises(ConfigError, match="rl.pool_val=9"):
        RLConfig(seed_pool=9, pool_val=9)


def test_shortcut_tasks_drop_gives_the_solver_no_shortcut_task_and_counts_the_redraws():
    said = []
    cfg = with_rl(Config(run=RunConfig(seed=5)), buffer_size=4, heldout_per_type=2, shortcut_tasks="drop")
    obj = SelfPlayObjective(cfg, log=said.append)
    try:
        tasks = [obj.generated_task(kind, 3, 1) for kind in P.TYPES for _ in range(40)]
        assert not [t for t in tasks if obj.searcher.shortcut(t)]
        assert any("shortcut, drawn again" in k for k in obj.counts), obj.counts  # 1-3 statements: many have one
        assert any("shortcut_tasks=drop" in m for m in said)
    finally:
        obj.close()
    with pytest.raises(ConfigError, match="shortcut_tasks"):
        RLConfig(shortcut_tasks="skip")


def test_evaluation_scores_each_task_of_a_mixed_type_list_as_itself(pooled, monkeypatch):
    """The pool's validation tasks mix the types: each outcome must stay with its own task (it once went to
    the task at its index in the type-sorted order, scrambling every per-type and per-slice figure)."""
    obj, _ = pooled
    items = [(t, obj.searcher.tags(t)) for t in obj.pool]
    assert [t.kind for t, _ in items] != sorted((t.kind for t, _ in items), key=P.TYPES.index)  # mixed
    answered = {t.key() for t, _ in items[::2]}
    monkeypatch.setattr(obj, "_greedy", lambda model, ctx, role, kind, rows: [
        [P.TOKEN["<yes>"]] * P.layout(role, kind).response for _ in rows])
    monkeypatch.setattr(obj, "_check_solutions",
                        lambda tasks, resp: ([t.key() in answered for t in tasks], [() for _ in tasks]))
    monkeypatch.setattr(obj, "validation", items)
    out = obj.evaluate(torch.nn.Linear(1, 1), None)
    assert obj.last_outcomes == [t.key() in answered for t, _ in items]
    nontrivial = [t.key() in answered for t, g in items if not g.shortcut]
    assert out["solve_rate/nontrivial"] == pytest.approx(sum(nontrivial) / len(nontrivial))


def test_shortcut_tasks_drop_ends_where_every_task_has_a_shortcut(monkeypatch):
    """One-statement induction is always the one-statement shortcut: drop draws two statements instead, and a
    window where nothing else can be drawn ends after DROP_TRIES draws, counted, instead of looping forever."""
    from trmkit.rl import selfplay

    cfg = with_rl(Config(run=RunConfig(seed=6)), buffer_size=4, heldout_per_type=2, shortcut_tasks="drop")
    obj = SelfPlayObjective(cfg, log=lambda m: None)
    try:
        assert len(obj.generated_task("induction", 1, 1).program) == 2
        monkeypatch.setattr(obj.searcher, "shortcut", lambda task: "empty")
        obj.generated_task("deduction", 1, 1)
        assert obj.counts["no deduction task without a shortcut in 64 draws: kept one (rl.shortcut_tasks=drop)"] == 1
        assert selfplay.DROP_TRIES == 64
    finally:
        obj.close()
