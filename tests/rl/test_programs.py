"""Code tasks: statements are valid Python of the documented subset; layouts and parsers agree."""

import ast
import random

import pytest

from trmkit.rl import programs as P


def test_every_statement_renders_to_python_that_keeps_digits():
    rng = random.Random(0)
    for i, (name, line) in enumerate(P.STATEMENTS):
        src = P.source((i,))
        ast.parse(src)
        ns = {}
        exec(src, {"__builtins__": {"sorted": sorted, "sum": sum, "range": range, "len": len, "min": min,
                                    "max": max, "abs": abs}}, ns)
        for _ in range(20):
            x = list(P.random_list(rng))
            y = ns["f"](x)
            assert isinstance(y, list) and len(y) <= len(x) and all(0 <= v <= 9 for v in y), (name, x, y)


def test_vocabulary_fits_a_byte_and_layouts_fit_the_longest_task():
    assert len(P.VOCAB) <= 256 and len(set(P.VOCAB)) == len(P.VOCAB)
    rng = random.Random(1)
    for kind in P.TYPES:
        t = P.random_task(rng, kind, P.MAX_STATEMENTS, P.MAX_STATEMENTS)
        t = P.CodeTask(kind, t.program, tuple((9,) * P.MAX_ITEMS for _ in t.inputs),
                       tuple((9,) * P.MAX_ITEMS for _ in t.inputs))
        assert len(P.task_tokens(t)) + 2 == P.layout("solve", kind).prompt
        solve = P.solve_tokens([(9,) * P.MAX_ITEMS] * P.MAX_STATEMENTS, P.answer_tokens(
            t, t.program if kind == "induction" else (9,) * P.MAX_ITEMS))
        assert len(P.prompt("solve", kind, P.task_tokens(t))) == P.layout("solve", kind).length
        assert len(P.check_response(solve, "solve", kind)) == P.layout("solve", kind).response
        assert len(P.prompt("critique", kind, P.task_tokens(t) + solve)) == P.layout("critique", kind).length
        assert len(P.check_response(P.proposal_tokens(t), "propose", kind)) == P.layout("propose", kind).response
        assert P.layout("solve", kind).length <= P.max_length()


def test_parsers_read_back_what_the_layouts_write():
    rng = random.Random(2)
    for kind in P.TYPES:
        t = P.random_task(rng, kind, 1, 5)
        assert P.parse_proposal(P.check_response(P.proposal_tokens(t), "propose", kind), kind) == t
        answer = t.program if kind == "induction" else (3, 1)
        resp = P.check_response(P.solve_tokens([(1, 2), (), (3,)], P.answer_tokens(t, answer)), "solve", kind)
        got = P.parse_solve(resp, kind)
        assert got.answer == answer and got.trace[:3] == ((1, 2), (), (3,)) and got.think_tokens == 3
    assert P.parse_critique(P.check_response(P.critique_tokens(True, 4), "critique", "deduction")) == (True, 4)


def solve_response(think, answer):
    toks = ["<think>"] + think + ["<e>"] * (P.MAX_STATEMENTS * P.MAX_ITEMS - len(think))
    return [P.TOKEN[t] for t in toks + ["</think>", "<answer>"] + answer + ["</answer>"]]


def test_fixed_slots_keep_every_position_meaning_one_thing():
    t = P.CodeTask("deduction", (0,), ((1, 2),))
    resp = P.solve_tokens([(2, 1)], P.answer_tokens(t, (2, 1)))
    assert len(resp) == P.layout("solve", "deduction").response
    assert resp[1:3] == [P.DIGIT0 + 2, P.DIGIT0 + 1] and resp[3] == P.EMPTY
    assert resp[1 + P.MAX_STATEMENTS * P.MAX_ITEMS] == P.TOKEN["</think>"]
    assert P.parse_solve(resp, "deduction").think_tokens == 2


def test_a_proposer_may_leave_gaps_in_its_program_field():
    s0, s1 = P.STMT0, P.STMT0 + 7
    toks = [P.TOKEN["<prog>"], s0, P.EMPTY, s1, P.EMPTY, P.EMPTY, P.TOKEN["<in>"]] + P.list_tokens((4, 2))
    assert P.parse_proposal(toks, "deduction").program == (0, 7)


@pytest.mark.parametrize("think, answer, why", [
    (["1"], ["1", "<e>", "<e>", "<e>", "<e>"], "list slot holds </answer>"),
    (["1", "<e>", "2"], ["1"] + ["<e>"] * 5, "digit after an empty"),
    (["s:sort"], ["1"] + ["<e>"] * 5, "list slot holds s:sort"),
])
def test_malformed_solver_responses_are_named(think, answer, why):
    with pytest.raises(P.Malformed, match=why):
        P.parse_solve(solve_response(think, answer), "deduction")


def test_missing_markers_are_malformed():
    good = solve_response(["1"], ["1"] + ["<e>"] * 5)
    P.parse_solve(good, "deduction")
    for i, name in ((0, "<think>"), (len(good) - 1, "</answer>")):
        bad = list(good)
        bad[i] = P.EMPTY
        with pytest.raises(P.Malformed, match=f"expected {name}"):
            P.parse_solve(bad, "deduction")
    with pytest.raises(P.Malformed, match="empty program"):
        P.parse_solve(solve_response([], ["<e>"] * 5), "induction")


def test_traced_source_returns_every_intermediate_list():
    src = P.source((0, 6), traced=True)
    ns = {}
    exec(src, {"__builtins__": {}}, ns)
    assert ns["f"]([1, 2]) == [[2, 1], [3, 2]]
