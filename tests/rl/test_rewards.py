"""Self-play rewards (solve/critique/propose), leave-one-out advantages, RunningStats against numpy, and
the byte-bounded LRU cache."""

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from trmkit.rl.cache import ByteLRU, estimate_bytes
from trmkit.rl.rewards import (RunningStats, critique_reward, expert_advantages, group_advantages, leave_one_out,
                               propose_reward, solve_reward)

# --------------------------------------------------------------------------- rewards


def test_rewards_are_the_executors_verdict():
    assert solve_reward(True, True, -0.5) == 1.0 and solve_reward(False, True, -0.5) == 0.0
    assert solve_reward(True, False, -0.5) == -0.5  # malformed: the penalty only
    assert critique_reward(True, True, -0.5) == 1.0 and critique_reward(False, True, -0.5) == 0.0
    assert critique_reward(True, False, -0.25) == -0.25
    with pytest.raises(ValueError, match="format_penalty"):
        solve_reward(True, True, 0.5)


def test_propose_reward_peaks_at_mixed_outcome():
    assert propose_reward(0.5, True, -0.5) == pytest.approx(1.0)
    assert propose_reward(0.25, True, -0.5) == pytest.approx(0.75) == propose_reward(0.75, True, -0.5)
    assert propose_reward(0.0, True, -0.5) == 0.0 and propose_reward(1.0, True, -0.5) == 0.0
    assert propose_reward(None, True, -0.5) == 0.0  # the executor could not complete it
    assert propose_reward(0.5, False, -0.5) == -0.5
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="solve_rate"):
            propose_reward(bad, True, -0.5)


def test_leave_one_out_advantages_have_zero_mean_per_task():
    rewards = [[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]]
    loo = leave_one_out(rewards)
    assert loo[0] == pytest.approx([1 - 1 / 3, -2 / 3, -2 / 3, 1 - 1 / 3])
    for row in loo:
        assert sum(row) == pytest.approx(0.0)  # no systematic push on whatever was sampled
    adv = group_advantages(rewards)
    assert adv[1] == [0.0] * 4  # every attempt scored the same: no gradient from this task
    assert np.std([a for row in adv for a in row]) == pytest.approx(1.0)  # normalised within the round
    assert group_advantages([[1.0, 1.0], [0.0, 0.0]]) == [[0.0, 0.0], [0.0, 0.0]]
    with pytest.raises(ValueError, match="at least 2"):
        leave_one_out([[1.0]])


# --------------------------------------------------------------------------- RunningStats


def test_running_stats_match_numpy_over_random_batches_of_several_keys():
    rng = np.random.default_rng(0)
    stats, seen = RunningStats(), {}
    keys = [("deduction", "solve"), ("abduction", "critique"), "propose"]
    for _ in range(60):
        key = keys[rng.integers(len(keys))]
        batch = rng.normal(rng.uniform(-1, 1), rng.uniform(0.01, 2), size=rng.integers(1, 40))
        stats.update(key, batch.tolist())
        seen.setdefault(key, []).extend(batch.tolist())
    for key, values in seen.items():
        assert stats.count(key) == len(values)
        assert stats.mean(key) == pytest.approx(np.mean(values), abs=1e-12)
        assert stats.std(key) ** 2 == pytest.approx(np.var(values), abs=1e-12)
        assert stats.std(key) == pytest.approx(np.std(values), abs=1e-12)
    assert stats.mean("deduction|solve") == stats.mean(("deduction", "solve"))  # same statistics
    assert stats.keys() == ["abduction|critique", "deduction|solve", "propose"]


def test_running_stats_one_value_at_a_time_equals_one_batch():
    values = [0.1, -0.5, 0.7, 0.7, 2.0, -1.3]
    one, many = RunningStats(), RunningStats()
    one.update("k", values)
    for v in values:
        many.update("k", [v])
    assert many.mean("k") == pytest.approx(one.mean("k"), abs=1e-15)
    assert many.std("k") == pytest.approx(one.std("k"), abs=1e-15)


def test_normalize():
    stats = RunningStats()
    assert stats.count("new") == 0 and stats.mean("new") == 0.0 and stats.std("new") == 0.0
    assert stats.normalize("new", [0.5]) == [0.5]
    stats.update("k", [2.0])
    assert stats.std("k") == 0.0
    assert stats.normalize("k", [3.0, 1.0]) == [1.0, -1.0]  # under 2 values: only centred
    stats.update("k", [4.0])  # mean 3, std 1
    assert stats.normalize("k", [3.0, 5.0]) == pytest.approx([0.0, 2.0 / (1.0 + 1e-6)], abs=1e-15)
    stats.update("same", [1.0, 1.0, 1.0])  # no spread: divided by eps, finite
    assert stats.normalize("same", [1.0, 1.0 + 1e-6]) == pytest.approx([0.0, 1.0])
    stats.update("k", [])  # an empty batch changes nothing
    assert stats.count("k") == 2


def test_running_stats_reject_bad_input():
    stats = RunningStats()
    with pytest.raises(ValueError, match="not finite"):
        stats.update("k", [1.0, float("nan")])
    assert stats.count("k") == 0  # nothing half-merged
    for bad in (("a|b", "c"), ("a", 1), (), 3):
        with pytest.raises(ValueError, match="key"):
            stats.update(bad, [1.0])
    with pytest.raises(ValueError, match="state_dict"):
        stats.load_state_dict({"keys": {"k": {"count": 1}}})
    with pytest.raises(ValueError, match="eps"):
        RunningStats(eps=0.0)


def test_state_dict_round_trips_through_json_exactly():
    rng = np.random.default_rng(1)
    a = RunningStats(eps=1e-4)
    for key in [("induction", "solve"), ("deduction", "propose")]:
        a.update(key, rng.normal(0.3, 0.7, size=17).tolist())
    b = RunningStats()
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.state_dict() == a.state_dict()
    more = rng.normal(size=9).tolist()
    for s in (a, b):
        s.update(("induction", "solve"), more)
        s.update("fresh", more)
    for key in ["induction|solve", "deduction|propose", "fresh"]:
        assert (b.count(key), b.mean(key), b.std(key)) == (a.count(key), a.mean(key), a.std(key))
        assert b.normalize(key, more) == a.normalize(key, more)  # bit for bit


# --------------------------------------------------------------------------- ByteLRU


def fixed(size):
    """A size_of that gives keys 0 bytes and every value ``size`` bytes, for exact arithmetic."""
    return lambda obj: 0 if isinstance(obj, str) else size


def test_lru_evicts_least_recently_used_first():
    cache = ByteLRU(30, size_of=fixed(10))
    for key in "abc":
        assert cache.put(key, 1)
    assert cache.get("a") == 1  # a is now the most recent: b goes first
    cache.put("d", 1)
    assert "b" not in cache and list("acd") == [k for k in "abcd" if k in cache]
    cache.put("e", 1)
    assert "c" not in cache and {"a", "d", "e"} == {k for k in "abcde" if k in cache}
    assert cache.stats["evictions"] == 2 and len(cache) == 3 and cache.bytes_used == 30


def test_lru_replacing_a_key_updates_its_bytes():
    sizes = {"small": 5, "big": 25}
    cache = ByteLRU(40, size_of=lambda obj: sizes.get(obj, 0))
    cache.put("x", "small")
    cache.put("y", "small")
    cache.put("x", "big")  # 25 + 5 = 30, no eviction; x becomes the most recent
    assert cache.bytes_used == 30 and cache.stats["evictions"] == 0
    cache.put("z", "small")  # 35
    cache.put("w", "small")  # 40: fits exactly
    assert cache.bytes_used == 40 and len(cache) == 4
    cache.put("v", "small")  # y (least recent) goes
    assert "y" not in cache and "x" in cache and cache.bytes_used == 40


def test_lru_never_exceeds_its_byte_bound():
    rng = np.random.default_rng(2)
    cache = ByteLRU(4096)
    for i in range(400):
        key = f"k{rng.integers(60)}"
        if rng.random() < 0.5:
            cache.get(key)
        else:
            cache.put(key, np.zeros(int(rng.integers(1, 120)), dtype=np.float32))
        assert cache.bytes_used <= 4096
        assert cache.bytes_used == sum(estimate_bytes(k) + estimate_bytes(cache._entries[k][0])
                                       for k in cache._entries)
    assert cache.stats["evictions"] > 0


def test_lru_hit_rate_and_counters():
    cache = ByteLRU(100, size_of=fixed(10))
    assert cache.hit_rate == 0.0
    cache.put("a", 1)
    assert cache.get("a") == 1 and cache.get("b") is None and cache.get("b", "none") == "none"
    assert "a" in cache and "zz" not in cache  # membership does not count
    assert cache.hit_rate == pytest.approx(1 / 3)
    assert cache.stats == {"hits": 1, "misses": 2, "evictions": 0, "too_large": 0,
                           "entries": 1, "bytes": 10}
    cache.reset_counters()
    assert cache.hit_rate == 0.0 and cache.stats["misses"] == 0 and len(cache) == 1


def test_lru_does_not_store_a_value_larger_than_the_bound():
    sizes = {"ok": 10, "huge": 101}
    cache = ByteLRU(100, size_of=lambda obj: sizes.get(obj, 0))
    cache.put("a", "ok")
    cache.put("b", "ok")
    assert cache.put("c", "huge") is False
    assert "c" not in cache and len(cache) == 2 and cache.bytes_used == 20
    assert cache.stats["too_large"] == 1 and cache.stats["evictions"] == 0
    assert cache.put("a", "huge") is False  # the old value of a is superseded, not kept
    assert "a" not in cache and cache.bytes_used == 10 and cache.stats["too_large"] == 2
    with pytest.raises(ValueError, match="positive"):
        ByteLRU(0)
    with pytest.raises(ValueError, match="non-negative"):
        ByteLRU(10, size_of=lambda obj: -1).put("a", 1)


def test_estimate_bytes():
    assert estimate_bytes(b"abcd") == 4 and estimate_bytes("hello") == 5
    assert estimate_bytes(7) == 28
    assert estimate_bytes(np.zeros((10, 4), dtype=np.float32)) == 160
    assert estimate_bytes(torch.zeros(3, 5, dtype=torch.int64)) == 120

    class Tensorish:  # duck typing: element_size() * numel(), no nbytes
        def element_size(self):
            return 2

        def numel(self):
            return 50

    assert estimate_bytes(Tensorish()) == 100
    assert estimate_bytes((1, 2)) == 56 + 16 + 56
    assert estimate_bytes([b"ab", (3,)]) == 56 + 16 + 2 + (56 + 8 + 28)
    assert estimate_bytes({"k": 1}) == 56 + 16 + 1 + 28
    shared = np.zeros(100, dtype=np.uint8)
    assert estimate_bytes([shared, shared]) == 56 + 16 + 100 + 8  # the same array counts once
    inner = [b"x" * 100]
    assert estimate_bytes([inner, inner]) == 56 + 16 + (56 + 8 + 100) + 8  # so does a list
    @dataclasses.dataclass(slots=True)
    class Result:
        ok: bool
        out: bytes

    assert estimate_bytes(Result(True, b"x" * 10)) == 56 + 16 + 8 + 10
    loop = []
    loop.append(loop)
    assert estimate_bytes(loop) == 56 + 8 + 8  # a cycle terminates
    assert math.isfinite(estimate_bytes(object()))


def test_expert_iteration_imitates_only_what_execution_verified():
    # solver rows: right 1, wrong 0, malformed -0.5; a proposal's 4r(1-r) keeps its weight
    assert expert_advantages([[1.0, 0.0, -0.5], [0.75]]) == [[1.0, 0.0, 0.0], [0.75]]
    assert expert_advantages([[0.0, 0.0]]) == [[0.0, 0.0]]  # nothing verified: no update at all
