"""Seeding with rl.seed_pool: every SFT example, the self-play anchor's included, comes from the pool."""

import pytest

from trmkit.config import Config, RLConfig, RunConfig
from trmkit.rl import programs as P
from trmkit.rl.selfplay import SelfPlayObjective


def pool_config(seed=3):
    return Config(run=RunConfig(seed=seed), rl=RLConfig(seed_pool=9, buffer_size=4, heldout_per_type=2))


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
    assert len(anchors[0]) == obj.cfg.rl.anchor_examples
    assert labels_seen(anchors[0], obj.pool) <= {t.key() for t in obj.pool}


def test_the_pool_is_fixed_by_the_run_seed(pooled):
    obj, _ = pooled
    again = SelfPlayObjective(pool_config(), log=lambda m: None)
    try:
        assert again.pool == obj.pool
    finally:
        again.close()
