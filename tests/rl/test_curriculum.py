"""The curriculum's update rule on hand-made round statistics: the measured one (only the longest length
moves, by 1, below the mixed-outcome target) and the moving one (both lengths move; the proposer's
share follows its 4 r (1 - r) reward); the share of proposals outside the generator's window."""

import pytest

from trmkit.rl import programs as P
from trmkit.rl.curriculum import MAX_PROPOSER_SHARE, Curriculum


def test_the_measured_curriculum_moves_only_the_longest_length():
    c = Curriculum(step=0.0, mixed_target=0.3, base_share=0.25)
    assert c.lengths("deduction") == (1, P.SEED_MAX_STATEMENTS)
    c.update("deduction", solve_rate=0.9, mixed_share=0.2, propose_rewards=[1.0, 1.0])
    assert c.lengths("deduction") == (1, 4)
    c.update("deduction", solve_rate=0.9, mixed_share=0.45, propose_rewards=[1.0])  # target met: stays
    assert c.lengths("deduction") == (1, 4)
    for _ in range(5):
        c.update("deduction", solve_rate=0.1, mixed_share=0.0, propose_rewards=[])
    assert c.lengths("deduction") == (1, 1)
    assert c.share("deduction") == 0.25 and c.slots("deduction", 16) == 4  # never moves
    assert c.lengths("induction") == (1, P.SEED_MAX_STATEMENTS)  # per type


def test_the_moving_curriculum_moves_both_lengths_toward_mixed_outcomes():
    c = Curriculum(step=0.5, mixed_target=0.5, base_share=0.25)
    seen = []
    for _ in range(6):  # the solver solves most tasks: the whole window moves up
        c.update("abduction", solve_rate=0.8, mixed_share=0.3, propose_rewards=[])
        seen.append(c.lengths("abduction"))
    assert seen == [(2, 4), (2, 4), (3, 5), (3, 5), (4, 5), (4, 5)]  # lengths are the window rounded half up
    c.update("abduction", solve_rate=0.8, mixed_share=0.6, propose_rewards=[])  # mixed enough: stays
    assert c.lengths("abduction") == (4, 5)
    for _ in range(20):  # the solver solves few: down, to one statement at least
        c.update("abduction", solve_rate=0.2, mixed_share=0.1, propose_rewards=[])
    assert c.lengths("abduction") == (1, 1)
    assert c.window["abduction"][0] >= 1.0


def test_the_proposers_share_grows_with_its_reward():
    c = Curriculum(step=0.5, mixed_target=0.5, base_share=0.25)
    c.update("induction", solve_rate=0.5, mixed_share=0.9, propose_rewards=[1.0, 1.0, -0.5, 1.0])
    assert c.share("induction") == pytest.approx(0.25 + 0.5 * 0.1 * 0.75)  # a malformed proposal counts 0
    for _ in range(100):
        c.update("induction", solve_rate=0.5, mixed_share=0.9, propose_rewards=[1.0])  # every task r = 1/2
    assert c.share("induction") == pytest.approx(MAX_PROPOSER_SHARE, abs=1e-3) and c.slots("induction", 16) == 11
    for _ in range(100):
        c.update("induction", solve_rate=0.5, mixed_share=0.9, propose_rewards=[0.0, 0.0])  # trivial tasks
    assert c.share("induction") == pytest.approx(0.25, abs=1e-3)
    assert c.share("deduction") == 0.25  # per type


def test_proposals_outside_the_generators_window_are_counted():
    c = Curriculum(step=0.5, mixed_target=0.5, base_share=0.25)
    c.window["deduction"] = [2.0, 4.0]
    tasks = [P.CodeTask("deduction", (0,) * n, ((1, 2),)) for n in (1, 3, 4, 5)]
    assert c.outside("deduction", tasks) == 0.5
    assert c.outside("deduction", []) is None
    again = Curriculum(step=0.5, mixed_target=0.5, base_share=0.25)
    again.load_state_dict(c.state_dict())
    assert again.lengths("deduction") == (2, 4) and again.state_dict() == c.state_dict()
