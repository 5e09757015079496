"""The AZR game in text: rewards by execution for each role, unreadable and hostile texts scored 0
and counted, proposals validated before they become tasks, exact resume, held-out evaluation per
kind and source, supervised examples. `generate` is a fake that returns chosen texts."""

import json
import random
import sys
import zlib
from pathlib import Path

import pytest

from trmkit.config import ConfigError
from trmkit.rl.azr import roles
from trmkit.rl.azr.game import LIMO_PROMPT, Game, learnability
from trmkit.rl.azr.policy import AZR
from trmkit.rl.azr.roles import Proposal, parse_proposal, parse_verdict
from trmkit.rl.azr.tasks import KINDS, AzrTask, prompt
from trmkit.rl.config import RLConfig
from trmkit.rl.sandbox import Limits, Sandbox

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the sandbox needs POSIX")

IO_SEEDS = [("def f(a):\n    return a * 2", str(i)) for i in range(3)] + [
    ("def f(s):\n    return s[::-1]", "'abc'"), ("def f(s, k):\n    return s * k", "'ab', 3"),
    ("import math\ndef f(n):\n    return math.factorial(n)", "5"), ("def f(xs):\n    return sorted(xs)", "[3, 1, 2]"),
    ("def f(d):\n    return sorted(d.items())", "{'b': 1, 'a': 2}")]
LIMO = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "rl" / "limo_sample.json"
CODE_F_SEEDS = [(f"def f(x):\n    return x + {c}", ["1", "2", "3", "4"], f"adds a small number ({c})")
                for c in range(8)]


def config(**changes) -> RLConfig:
    sizes = dict(proposals_per_type=1, propose_samples=1, tasks_per_type=4, attempts=2, critiques_per_type=2,
                 critique_samples=2, eval_per_type=3)
    return RLConfig(**{**sizes, **changes})


@pytest.fixture(scope="module")
def box():
    with Sandbox(Limits(cpu_seconds=0.3, wall_seconds=3.0, max_output_chars=2000), policy=AZR) as sandbox:
        yield sandbox


@pytest.fixture
def make(box):
    games = []

    def build(rl=None, seed=0, **attrs):
        rl = rl or config()
        for key, value in attrs.items():  # seed_files, limo_files: set whether RLConfig has the field yet or not
            setattr(rl, key, value)
        game = Game(rl, box, random.Random(seed), log=lambda m: None)
        games.append(game)
        return game
    yield build
    for game in games:
        game.close()


def role_of(text: str) -> str:
    return "propose" if text.startswith("Write a new task") else (
        "critique" if text.startswith("Here is a task") else "solve")


def spy_tasks(game: Game) -> dict[str, AzrTask]:
    """Records every task the game draws from its source, by its solve prompt."""
    drawn, draw = {}, game._source_task

    def spy(kind):
        task, source = draw(kind)
        drawn[prompt(task)] = task
        return task, source
    game._source_task = spy
    return drawn


def fake(answer) -> callable:
    """A generate that answers each prompt with answer(role, prompt, sample index)."""
    calls = []

    def generate(prompts, samples, greedy):
        calls.append((list(prompts), samples, greedy))
        return [answer(role_of(p), p, j) for p in prompts for j in range(samples)]
    generate.calls = calls
    return generate


def by_role(scored) -> dict[str, list]:
    out = {}
    for part in scored:
        out.setdefault(part.role, []).append(part)
    return out


def test_right_answers_earn_1_on_solve_and_agreeing_verdicts_earn_1(make):
    game = make()
    drawn = spy_tasks(game)
    generate = fake(lambda role, p, j: roles.solve_target(drawn[p]) if role == "solve" else
                    "<verdict>yes</verdict>" if role == "critique" else "no idea")
    scored = game.play_round(generate)
    assert [(p.role, p.kind) for p in scored] == [(r, k) for r in ("propose", "solve", "critique") for k in KINDS]
    parts = by_role(scored)
    for part in parts["solve"]:
        assert part.rewards == [1.0] * 8 and part.group == [0, 0, 1, 1, 2, 2, 3, 3]
    assert all(r == 1.0 for p in parts["critique"] for r in p.rewards)
    assert all(r == game.rl.format_penalty for p in parts["propose"] for r in p.rewards)
    assert game.counts["propose/unparsable"] == 3 and game.metrics["solve/solve_rate/induction"] == 1.0


def test_wrong_answers_earn_0_and_garbage_is_counted_unparsable(make):
    game = make()
    wrong = {"deduction": "<answer>'surely not'</answer>", "abduction": "<answer>'zz'</answer>",
             "induction": "```python\ndef f(x):\n    return 'no'\n```"}  # strings: never a list's output
    kind_of = {"Predict": "deduction", "Find an": "abduction", "Write a": "induction"}

    def answer(role, p, j):
        if role == "solve":
            return "I do not know" if j == 1 else wrong[next(v for k, v in kind_of.items() if p.startswith(k))]
        return "<verdict>no</verdict>" if role == "critique" and j == 0 else "hmm"
    parts = by_role(game.play_round(fake(answer)))
    for part in parts["solve"]:
        assert part.rewards == [0.0] * 8
    assert game.counts["solve/unparsable"] == 12  # one of the two samples of every task
    for part in parts["critique"]:  # the judged answers are all wrong: "no" agrees, "hmm" is unreadable
        assert part.rewards == [1.0, 0.0] * 2
    assert game.counts["critique/unparsable"] == 6


HOSTILE_PROGRAMS = [
    "import os\ndef f(x):\n    os.fork()\n    return x",
    "import subprocess\ndef f(x):\n    return subprocess.run(['ls']).returncode",
    "import socket\ndef f(x):\n    return socket.socket().connect(('example.com', 80))",
    "def f(x):\n    open('{marker}', 'w').write('x')\n    return x",
    "def f(x):\n    while True:\n        pass",
    "def f(x):\n    return 'x' * 10 ** 9",
    "def f(x):\n    return [x] * 10 ** 5",
    "def f(x):\n    return __import__('os').system('touch {marker}')",
]


def test_hostile_code_is_contained_and_scored_0(make, tmp_path):
    marker = tmp_path / "written"
    programs = [p.format(marker=marker) for p in HOSTILE_PROGRAMS]
    hostile = {"induction": [f"```python\n{p}\n```" for p in programs],
               "abduction": [f"<answer>__import__('os').system('touch {marker}')</answer>",
                             f"<answer>open('{marker}', 'w')</answer>", "<answer>[0] * 10 ** 9</answer>",
                             "<answer>(lambda: [1 for _ in iter(int, 1)])()</answer>"],
               "deduction": ["<answer>" + "9" * 30_000 + "</answer>", "<answer>__import__('os')</answer>"]}
    proposals = [f"```python\n{p}\n```\n```input\n[1]\n```\n```input\n[2]\n```\n```message\nm\n```"
                 for p in programs if "while" not in p]
    count = {"n": 0}

    def answer(role, p, j):
        count["n"] += 1
        if role == "propose":
            return proposals[count["n"] % len(proposals)]
        kind = "deduction" if p.startswith("Predict") else "abduction" if p.startswith("Find an") else "induction"
        return hostile[kind][count["n"] % len(hostile[kind])]
    game = make(config(tasks_per_type=4, attempts=4, proposals_per_type=1, propose_samples=1))
    parts = by_role(game.play_round(fake(answer)))
    assert all(r == 0.0 for p in parts["solve"] for r in p.rewards)
    assert all(r == game.rl.format_penalty for p in parts["propose"] for r in p.rewards)
    assert not marker.exists()
    refused = {k for k in game.counts if k.startswith("solve/")} - {"solve/wrong"}
    assert {"solve/unparsable", "solve/rejected"} <= refused and len(refused) >= 3, game.counts
    assert sum(v for k, v in game.counts.items() if k.startswith("propose/rejected/")) == 3


def test_invalid_proposal_gets_the_format_penalty_and_a_valid_one_becomes_a_task(make):
    game = make(config(format_penalty=-0.7))
    held = next(t for t, _ in game.builtin.heldout(5) if t.kind == "abduction")
    proposal = {"deduction": "```python\ndef f(x):\n    return x + 1\n```\n```input\n41\n```",
                "abduction": f"```python\n{held.program}\n```\n```input\n{held.inputs[0]}\n```",
                "induction": "```python\ndef f(x):\n    return x[5]\n```\n```input\n[1]\n```\n```input\n[2]\n```"
                             "\n```message\nthe sixth item\n```"}
    mine = AzrTask("deduction", "def f(x):\n    return x + 1", ("41",), ("42",))

    def answer(role, p, j):
        if role == "propose":
            return proposal["deduction" if "predicting" in p else "abduction" if "finding" in p else "induction"]
        if p == prompt(mine):
            return ["<answer>42</answer>", "<answer>41</answer>"][j]  # one of two right: learnability 0.5
        return "no"
    generate = fake(answer)
    parts = by_role(game.play_round(generate))
    propose = {p.kind: p.rewards for p in parts["propose"]}
    assert propose == {"deduction": [0.5], "abduction": [0.0], "induction": [-0.7]}
    assert game.counts["propose/rejected/error"] == 1 and game.counts["propose/heldout_copy"] == 1
    solve = {p.kind: p for p in parts["solve"]}
    assert solve["deduction"].prompts[0] == prompt(mine) and solve["deduction"].rewards[:2] == [1.0, 0.0]
    assert prompt(held) not in solve["abduction"].prompts
    assert game.buffer["deduction"][-1] == (mine, "proposed")
    game.play_round(generate)  # the same proposal again: used, not stored twice
    assert game.counts["propose/already_in_buffer"] == 1
    assert sum(t == mine for t, _ in game.buffer["deduction"]) == 1


@pytest.mark.parametrize("rate, reward", [(0.0, 0.0), (1.0, 0.0), (0.25, 0.75), (0.5, 0.5)])
def test_learnability_is_azr_s(rate, reward):
    assert learnability(rate) == reward


@pytest.mark.parametrize("text, kind, want", [
    ("```python\ndef f(a):\n    return a\n```\n```input\n1, 2\n```", "deduction",
     Proposal("def f(a):\n    return a", ("1, 2",))),
    ("```py\nx\n```\n```python\ndef f(a):\n    return a\n```\n```input\n1\n```\n```input\n2\n```", "abduction",
     Proposal("def f(a):\n    return a", ("1",))),
    ("```python\ndef f(a):\n    return a\n```\n```input\n1\n```\n```input\n2\n```\n```message\nid\n```", "induction",
     Proposal("def f(a):\n    return a", ("1", "2"), "id")),
    ("def f(a): return a", "deduction", "no ```python block"),
    ("```python\ndef f(a):\n    return a\n```", "deduction", "no ```input block"),
    ("```python\ndef f(a):\n    return a\n```\n```input\n1\n```\n```message\nm\n```", "induction", "2 to 8"),
    ("```python\ndef f(a):\n    return a\n```\n```input\n1\n```\n```input\n2\n```", "induction", "no ```message"),
])
def test_parse_proposal(text, kind, want):
    got = parse_proposal(text, kind)
    assert got == want if isinstance(want, Proposal) else want in got


@pytest.mark.parametrize("text, want", [("<verdict>yes</verdict>", True), ("<verdict> No </verdict>", False),
                                        ("<verdict>yes</verdict> wait <verdict>wrong</verdict>", False),
                                        ("<verdict>maybe</verdict>", None), ("yes", None), (None, None)])
def test_parse_verdict(text, want):
    assert parse_verdict(text) is want


def mixed(role, p, j):
    """A fixed mix of right-looking, wrong and unreadable texts, chosen by the prompt."""
    h = zlib.crc32(f"{p}|{j}".encode()) % 4
    if role == "propose":
        program = f"```python\ndef f(x):\n    return x * {h}\n```"
        return [f"{program}\n```input\n{j}\n```\n```input\n3\n```\n```message\nm\n```", "garbage"][h % 2]
    if role == "critique":
        return ["<verdict>yes</verdict>", "<verdict>no</verdict>", "?", "<verdict>no</verdict>"][h]
    return ["<answer>[1]</answer>", "<answer>[]</answer>", "nothing", "```python\ndef f(x):\n    return x\n```"][h]


def test_state_dict_round_trips_and_the_next_round_is_identical(make):
    rl = config()
    first = make(rl, seed=3)
    first.play_round(fake(mixed))
    state, rng_state = json.loads(json.dumps(first.state_dict())), first.rng.getstate()
    after = [(p.prompts, p.texts, p.rewards) for p in first.play_round(fake(mixed))]
    second = make(rl, seed=99)
    second.load_state_dict(state)
    second.rng.setstate(rng_state)
    assert [(p.prompts, p.texts, p.rewards) for p in second.play_round(fake(mixed))] == after
    assert second.state_dict() == first.state_dict() and second.rounds == 2


def write_seeds(tmp_path, broken: bool = True):
    io = [json.dumps({"snippet": s, "input": i, "output": "'file'", "imports": []}) for s, i in IO_SEEDS]
    io.insert(2, '{"snippet": "def f(x):\\n    return x", "input": 3}' if broken else "")
    code_f = [json.dumps({"snippet": s, "inputs": i, "outputs": ["'file'"] * len(i), "message": m, "imports": []})
              for s, i, m in CODE_F_SEEDS]
    (tmp_path / "t_seed_io.jsonl").write_text("\n".join(io) + "\n")
    (tmp_path / "t_code_f_seed_io.jsonl").write_text("\n".join(code_f) + "\n")
    return (str(tmp_path / "t_seed_io.jsonl"), str(tmp_path / "t_code_f_seed_io.jsonl"))


def test_seed_files_a_broken_line_is_counted_and_held_out_programs_never_train(make, tmp_path):
    game = make(seed_files=write_seeds(tmp_path))
    assert game.counts["seed/broken_line"] == 1 and game.counts["seed/valid"] == 16
    assert game.source == {kind: "azr" for kind in KINDS}
    held = {(t.program, t.inputs) for t in game.seed_heldout}
    assert len(held) == 2 + 2 + 2  # int(0.25 x 8) programs of each file; induction tasks show more inputs
    assert not held & {(t.program, t.inputs) for buf in game.buffer.values() for t, _ in buf}
    assert "'file'" not in {o for buf in game.buffer.values() for t, _ in buf for o in t.outputs}  # the sandbox's


def test_a_seed_file_of_another_name_is_read_by_its_keys_or_refused(make, tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"snippet": "def f(a):\\n    return a", "input": "1", "output": "1"}\n')
    game = make(seed_files=f"{path}, {path}")  # the config's spelling: comma-separated
    assert game.counts["seed/valid"] == 2 and len(game.buffer["deduction"]) == 1
    path.write_text('{"question": "q"}\n')
    with pytest.raises(ConfigError, match="mine.jsonl:1: not an AZR seed file"):
        make(seed_files=(str(path),))


def test_evaluate_reports_per_kind_and_per_source(make, tmp_path):
    game = make(seed_files=write_seeds(tmp_path, broken=False))
    right = {prompt(t): roles.solve_target(t) for t, _ in game.builtin.heldout(3)}
    right.update({prompt(t): roles.solve_target(t) for t in game.seed_heldout})

    def answer(role, p, j):
        if p.startswith("Predict"):
            return right[p]
        return "<answer>'nope'</answer>" if p.startswith("Find an") else "no program"
    generate = fake(answer)
    out = game.evaluate(generate, "eval")
    assert [(samples, greedy) for _, samples, greedy in generate.calls] == [(1, True)]
    for src in ("builtin", "azr"):
        assert out[f"solve_rate/{src}/deduction"] == 1.0 and out[f"solve_rate/{src}/abduction"] == 0.0
        assert out[f"unparsable/{src}/induction"] == 1.0 and out[f"unparsable/{src}/abduction"] == 0.0
    assert out["samples/builtin/deduction"] == 3 and out["samples/azr/deduction"] == 3
    assert out["samples/azr/induction"] == 2 and out["samples"] == 9 + 3 + 3 + 2
    assert out["solve_rate/deduction"] == 1.0 and out["unparsable"] == pytest.approx(5 / 17)
    assert "solve_rate/builtin/nontrivial" in out
    with pytest.raises(ValueError, match="'eval'"):
        game.evaluate(generate, "train")


def test_sft_examples_cover_every_role_with_targets_the_executor_confirms(make, box):
    game = make(config(seed_share_solve=0.5, seed_share_propose=0.25, seed_share_critique=0.25),
                limo_files=(str(LIMO),))
    drawn = spy_tasks(game)
    examples = game.sft_examples(24)
    groups = {r: [e for e in examples if role_of(e[0]) == r] for r in ("propose", "solve", "critique")}
    assert [len(g) for g in groups.values()] == [6, 12, 6]
    limo = [e for e in groups["solve"] if e[0].endswith(LIMO_PROMPT)]
    assert len(limo) == 6 and all(t.endswith("</answer>") for _, t in limo)
    solve = [(drawn[p], t) for p, t in groups["solve"] if p in drawn]
    assert len(solve) == 6 and [v.status for v in game.scorer.score(solve)] == ["right"] * 6
    verdicts = [t for _, t in groups["critique"]]
    assert verdicts.count("<verdict>yes</verdict>") >= 3 and "<verdict>no</verdict>" in verdicts
    for p, target in groups["propose"]:
        kind = "deduction" if "predicting" in p else "abduction" if "finding" in p else "induction"
        assert isinstance(parse_proposal(target, kind), Proposal)


def test_generate_must_give_samples_per_prompt(make):
    game = make()
    with pytest.raises(ValueError, match="prompt-major"):
        game.play_round(lambda prompts, samples, greedy: ["x"])


def test_a_broken_limo_trace_is_counted_and_the_rest_are_used(make, tmp_path):
    path = tmp_path / "traces.json"
    path.write_text(json.dumps([{"question": "1 + 1?", "solution": "One and one.", "answer": 2}, {"question": "?"}]))
    game = make(config(seed_share_solve=1.0, seed_share_propose=0.0, seed_share_critique=0.0), limo_files=str(path))
    assert game.counts["limo/broken"] == 1
    assert ("1 + 1?" + LIMO_PROMPT, "One and one.\n\n<answer>2</answer>") in game.sft_examples(4)
