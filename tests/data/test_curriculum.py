"""data.stream=curriculum (data/curriculum.py): a rated training split drawn easiest first, the
pool growing to every group, resumable exactly; refused without ratings or without a ramp."""

import numpy as np
import pytest

from trmkit.config import ConfigError, DataConfig
from trmkit.data.curriculum import DIFFICULTY_FILE, RatedSampler, difficulty_sidecar
from trmkit.data.generated import GeneratedStream
from trmkit.data.store import SplitArrays, StoreError, open_store, write_store

META = {"task": "toy", "vocab": ["<pad>", "a", "b"] + [str(i) for i in range(40)], "pad_id": 0,
        "ignore_label_id": 0, "blank_id": None, "num_puzzle_identifiers": 1, "source": "test", "build": {}}


def rated_store(tmp_path, groups=40, rated=True):
    """Group g holds 2 examples whose first token is 3 + g; its rating is g (so the token tells the rating)."""
    inputs = np.repeat(3 + np.arange(groups), 2)[:, None].repeat(4, 1).astype(np.uint8)  # (2G, 4)
    arrays = SplitArrays(inputs=inputs, labels=inputs.copy(), puzzle_identifiers=np.zeros(2 * groups, np.uint8),
                         puzzle_indices=np.arange(2 * groups + 1), group_indices=np.arange(0, 2 * groups + 1, 2))
    extras = {"train": {DIFFICULTY_FILE: difficulty_sidecar(np.arange(groups), "toy steps")}} \
        if rated else None
    write_store(tmp_path / "s", {"train": arrays}, META, extras)
    return open_store(tmp_path / "s")["train"]


def test_the_pool_starts_with_the_easiest_and_grows_to_all(tmp_path):
    split = rated_store(tmp_path)
    sampler = RatedSampler(split)
    stream = GeneratedStream(sampler, seed=3, curriculum_samples=400)
    first = stream.take(40).inputs[:, 0] - 3  # the ratings drawn
    assert sampler.pool(0.0) == 8 and sampler.pool(0.1) == 12  # START = 0.2 of the 40 groups, growing
    assert first.max() < 12
    stream.take(400)
    late = stream.take(400).inputs[:, 0] - 3
    assert late.max() >= 35 and late.min() <= 4  # all groups, easy ones too
    assert "easiest 8 of 40" in stream.describe(0.0) and "toy steps <= 7" in stream.describe(0.0)


def test_the_curriculum_stream_resumes_exactly(tmp_path):
    split = rated_store(tmp_path)
    whole = GeneratedStream(RatedSampler(split), seed=5, curriculum_samples=100)
    a = whole.take(30)
    b = whole.take(30)
    resumed = GeneratedStream(RatedSampler(split), seed=0, curriculum_samples=100)
    first = GeneratedStream(RatedSampler(split), seed=5, curriculum_samples=100)
    first.take(30)
    resumed.load_state_dict(first.state_dict())
    np.testing.assert_array_equal(resumed.take(30).inputs, b.inputs)
    assert not np.array_equal(a.inputs, b.inputs)


def test_a_store_without_ratings_and_a_curriculum_without_a_ramp_are_refused(tmp_path):
    with pytest.raises(StoreError, match="no difficulty.json"):
        RatedSampler(rated_store(tmp_path, rated=False))
    with pytest.raises(ConfigError, match="needs data.curriculum_samples > 0"):
        DataConfig(path="x", stream="curriculum")
