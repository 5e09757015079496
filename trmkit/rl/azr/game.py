"""The propose / solve / critique game of the Absolute Zero Reasoner (Zhao et al., 2025) in text,
for a causal-LM policy: prompts out, the policy's texts in, rewards by execution. No torch here.

One round (``Game.play_round``), per task kind (deduction, abduction, induction), in this order:

1. propose: rl.proposals_per_type prompts, each showing REFERENCES programs of the kind from the
   buffer, rl.propose_samples texts each (azr/roles.py reads them). A proposal is validated
   (azr/validate.py: parses, stays inside the AZR policy, runs, deterministic over two runs and
   over fresh workers) before it becomes a task. Reward: rl.format_penalty when unreadable or
   invalid; for a valid one the solver attempts this round, AZR's learnability reward
   ``1 - r`` of the solver's mean reward r on it, 0 when r is 0 or 1 (trivial or impossible);
   VALID_UNTRIED (0) for a valid one not attempted (only a copy of a held-out task, which is
   never used, since RLConfig keeps proposals_per_type x propose_samples within the solver's
   slots for proposals). Valid proposals join the buffer (a task already there is not added twice).
2. solve: rl.tasks_per_type tasks, the round's valid proposals first (at most
   rl.proposer_slots()), then tasks of the kind's source: fresh built-in programs (azr/builtin.py)
   or draws from the buffer (the AZR seed programs of rl.seed_files and the proposals kept);
   rl.attempts texts per task, reward = azr/tasks.py's AzrScorer score (unparsable 0, counted;
   whatever the sandbox refuses or stops scores 0, its outcome counted).
3. critique: rl.critiques_per_type of the solver's readable answers, right and wrong ones in
   turn while both exist, rl.critique_samples texts each; reward 1 when the verdict agrees with
   the executor ("right" = full score), 0 otherwise, unreadable 0 and counted.

Each role and kind is one ``generate`` call and one ``Scored``, in the order of the calls; a part
with nothing to ask (no readable answer to critique) makes neither. The task buffer holds
rl.buffer_size tasks per kind, oldest dropped first. Held-out sets, never trained on: the
generated ones of rl/heldout.py (rl.heldout_seed, rl.heldout_per_type) rendered as Python, and a
fixed subset of the seed programs (azr/seedset.py); a proposal equal to a held-out task is not
used. Everything random draws from the ``rng`` the objective passes; ``state_dict`` is JSON.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass
from typing import Callable

from trmkit.rl import heldout
from trmkit.rl.azr import roles, seedset
from trmkit.rl.azr.builtin import SOURCE as BUILTIN
from trmkit.rl.azr.builtin import Builtin
from trmkit.rl.azr.roles import Proposal
from trmkit.rl.azr.seeds import Skips, read_limo
from trmkit.rl.azr.tasks import KINDS, Answer, AzrScorer, AzrTask, induction_task, parse_answer, prompt
from trmkit.rl.azr.validate import Program, Valid, Validator
from trmkit.rl.stats import balanced_accuracy

Generate = Callable[[list[str], int, bool], list[str]]  # (prompts, samples, greedy) -> texts, prompt-major
Log = Callable[[str], None]
REFERENCES = 3  # buffer programs a propose prompt shows
INITIAL_BUILTIN = 256  # built-in tasks per kind in a fresh buffer (proposal references)
VALID_UNTRIED = 0.0  # a valid proposal the solver did not attempt: as a trivial or impossible one
PROPOSED = "proposed"  # the source of a task a proposer wrote
LIMO_PROMPT = "\n\nThink step by step, then give the final answer inside <answer></answer> tags."


@dataclass
class Scored:
    """One role and kind of a round: ``samples`` texts per prompt, prompt-major; ``group[i]`` is
    the prompt index of ``texts[i]``."""

    role: str
    kind: str
    prompts: list[str]
    samples: int
    texts: list[str]
    rewards: list[float]
    group: list[int]


@dataclass
class Attempt:
    task: AzrTask
    text: str
    status: str
    answer: str  # the parsed answer's text ("" when unreadable)


def learnability(rate: float) -> float:
    """AZR's proposer reward: 1 - r for a task of mixed outcome, 0 when r is 0 or 1."""
    return 0.0 if rate <= 0.0 or rate >= 1.0 else 1.0 - rate


def task_json(task: AzrTask) -> list:
    return [task.kind, task.program, list(task.inputs), list(task.outputs), task.message, task.shown]


def task_from_json(row: list) -> AzrTask:
    kind, program, inputs, outputs, message, shown = row
    return AzrTask(kind, program, tuple(inputs), tuple(outputs), message, shown)


def paths(value) -> tuple[str, ...]:
    """rl.seed_files / rl.limo_files: a tuple of paths, or one comma-separated string of them."""
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    return tuple(str(p) for p in value or ())


def task_key(task: AzrTask) -> tuple[str, str]:
    """(program with trailing spaces dropped, first input): what makes two tasks the same."""
    program = "\n".join(line.rstrip() for line in task.program.strip().splitlines())
    return program, task.inputs[0].strip()


class Game:
    """The AZR game over text; ``counts`` holds what was skipped, unreadable or refused."""

    def __init__(self, rl, sandbox, rng: random.Random, log: Log = print):
        self.rl, self.rng, self.log = rl, rng, log
        self.scorer = AzrScorer(sandbox)
        self.counts: Counter = Counter()
        self.metrics: dict[str, float] = {}  # the last round's figures
        self.rounds = 0
        self.builtin = Builtin(rl.heldout_seed, rl.heldout_per_type, log)
        seed_files = paths(getattr(rl, "seed_files", ()))
        train, self.seed_heldout = (seedset.load(seed_files, rl.heldout_seed, rl.heldout_per_type, self.counts, log)
                                    if seed_files else ([], []))
        self.source = {kind: seedset.SOURCE if any(t.kind == kind for t in train) else BUILTIN for kind in KINDS}
        self._say_sources(seed_files)
        self.buffer: dict[str, deque] = {kind: deque(maxlen=rl.buffer_size) for kind in KINDS}
        for task in train:
            self.buffer[task.kind].append((task, seedset.SOURCE))
        for kind in KINDS:
            if self.source[kind] == BUILTIN:
                self.buffer[kind].extend((self.builtin.draw(rng, kind), BUILTIN)
                                         for _ in range(min(INITIAL_BUILTIN, rl.buffer_size)))
        self.limo = self._read_limo(paths(getattr(rl, "limo_files", ())))
        self._heldout_keys()
        self.validator = Validator()  # the proposals' (last: nothing to close if the seed files are refused)

    def _say_sources(self, seed_files: tuple) -> None:
        if not seed_files:
            self.log("rl: no rl.seed_files: the tasks are the built-in generated programs, written as Python")
        elif BUILTIN in self.source.values():
            kinds = ", ".join(k for k in KINDS if self.source[k] == BUILTIN)
            self.log(f"rl: the seed files give no {kinds} task (only *_code_f_seed_io.jsonl files give induction "
                     "tasks): those kinds use the built-in generated programs")

    def _read_limo(self, files: tuple) -> list:
        traces = []
        for path in files:
            skips = Skips()
            traces += list(read_limo(path, skips))
            if skips.count:
                self.counts["limo/broken"] += skips.count
                self.log(f"rl: {path}: skipped {skips.count} broken trace(s), first: {skips.where[0]}")
        return traces

    def _heldout_keys(self) -> None:
        self.heldout_keys = {task_key(t) for t, _ in self.builtin.heldout()}
        self.heldout_keys |= {task_key(t) for t in self.seed_heldout}

    def close(self) -> None:
        """Stop the validator's workers (the scoring sandbox is the caller's)."""
        self.validator.close()

    # ---- one round ----------------------------------------------------------------------------

    def play_round(self, generate: Generate) -> list[Scored]:
        """Propose, then solve, then critique, each per kind; one Scored per generate call."""
        self.metrics = {}
        scored: list[Scored] = []
        fresh = {kind: self._propose(generate, kind, scored) for kind in KINDS}
        attempts = {kind: self._solve(generate, kind, fresh[kind], scored) for kind in KINDS}
        for kind in KINDS:
            self._critique(generate, kind, attempts[kind], scored)
        self.rounds += 1
        return scored

    def _call(self, generate: Generate, role: str, kind: str, prompts: list[str], samples: int,
              greedy: bool = False) -> Scored:
        texts = list(generate(prompts, samples, greedy))
        if len(texts) != len(prompts) * samples:
            raise ValueError(f"generate gave {len(texts)} texts for {role}/{kind}: {len(prompts)} prompts x "
                             f"{samples} samples, prompt-major, were asked")
        group = [i for i in range(len(prompts)) for _ in range(samples)]
        return Scored(role, kind, prompts, samples, texts, [0.0] * len(texts), group)

    def _references(self, kind: str, n: int = REFERENCES) -> list[AzrTask]:
        buf = self.buffer[kind]
        return [buf[self.rng.randrange(len(buf))][0] for _ in range(min(n, len(buf)))]

    def _propose(self, generate: Generate, kind: str, scored: list[Scored]) -> list[tuple[int, AzrTask]]:
        """The propose part of a kind; returns (text index, task) of the valid proposals."""
        rl = self.rl
        prompts = [roles.propose_prompt(kind, self._references(kind)) for _ in range(rl.proposals_per_type)]
        part = self._call(generate, "propose", kind, prompts, rl.propose_samples)
        scored.append(part)
        parsed = [roles.parse_proposal(t, kind) for t in part.texts]
        programs = [Program(p.program, p.inputs, str(i)) for i, p in enumerate(parsed) if isinstance(p, Proposal)]
        report = self.validator.validate(programs)
        for key, n in report.counts.items():
            self.counts["propose/valid" if key == "valid" else f"propose/rejected/{key}"] += n
        self.counts.update("propose/unparsable" for p in parsed if not isinstance(p, Proposal))
        part.rewards = [float(rl.format_penalty)] * len(parsed)
        fresh = []
        for valid in report.valid:
            i = int(valid.where)
            part.rewards[i] = VALID_UNTRIED
            task = self._proposed_task(kind, valid, parsed[i])
            if task_key(task) in self.heldout_keys:
                self.counts["propose/heldout_copy"] += 1
                continue
            fresh.append((i, task))
        self.metrics[f"propose/valid_rate/{kind}"] = len(report.valid) / len(parsed)
        return fresh

    @staticmethod
    def _proposed_task(kind: str, valid: Valid, proposal: Proposal) -> AzrTask:
        if kind == "induction":
            return induction_task(valid.source, valid.inputs, valid.outputs, proposal.message)
        return AzrTask(kind, valid.source, valid.inputs[:1], valid.outputs[:1])

    def _source_task(self, kind: str) -> tuple[AzrTask, str]:
        """A task of the kind's source: a fresh built-in program, or a draw from the buffer."""
        if self.source[kind] == BUILTIN:
            return self.builtin.draw(self.rng, kind), BUILTIN
        buf = self.buffer[kind]
        return buf[self.rng.randrange(len(buf))]

    def _solve(self, generate: Generate, kind: str, fresh: list[tuple[int, AzrTask]],
               scored: list[Scored]) -> list[Attempt]:
        rl = self.rl
        proposed = fresh[:rl.proposer_slots()]
        tasks = [(t, PROPOSED) for _, t in proposed]
        tasks += [self._source_task(kind) for _ in range(rl.tasks_per_type - len(proposed))]
        part = self._call(generate, "solve", kind, [prompt(t) for t, _ in tasks], rl.attempts)
        scored.append(part)
        verdicts = self.scorer.score([(tasks[g][0], text) for g, text in zip(part.group, part.texts)])
        part.rewards = [v.score for v in verdicts]
        self.counts.update(f"solve/{v.status}" for v in verdicts if v.status not in ("right", "wrong"))
        self._propose_rewards(kind, proposed, part, scored)
        self._keep(kind, [task for _, task in fresh])
        right = [v.status == "right" for v in verdicts]
        self.metrics[f"solve/solve_rate/{kind}"] = sum(right) / len(right)
        self.metrics[f"solve/unparsable/{kind}"] = sum(v.status == "unparsable" for v in verdicts) / len(verdicts)
        attempts = []
        for g, text, v in zip(part.group, part.texts, verdicts):
            answer = parse_answer(text, kind) if v.status != "unparsable" else None
            attempts.append(Attempt(tasks[g][0], text, v.status, answer.text if isinstance(answer, Answer) else ""))
        return attempts

    def _keep(self, kind: str, tasks: list[AzrTask]) -> None:
        """The round's valid proposals join the buffer, each task once (a repeat is counted)."""
        known = {task_key(t) for t, _ in self.buffer[kind]}
        for task in tasks:
            if task_key(task) in known:
                self.counts["propose/already_in_buffer"] += 1
                continue
            known.add(task_key(task))
            self.buffer[kind].append((task, PROPOSED))

    def _propose_rewards(self, kind: str, proposed: list[tuple[int, AzrTask]], solve: Scored,
                         scored: list[Scored]) -> None:
        part = next(s for s in scored if s.role == "propose" and s.kind == kind)
        k = solve.samples
        for slot, (i, _) in enumerate(proposed):  # the proposals are the first solver tasks, in order
            rate = sum(solve.rewards[slot * k:(slot + 1) * k]) / k
            part.rewards[i] = learnability(rate)
        self.metrics[f"propose/reward/{kind}"] = sum(part.rewards) / len(part.rewards)

    def _critique(self, generate: Generate, kind: str, attempts: list[Attempt], scored: list[Scored]) -> None:
        rl = self.rl
        right = [a for a in attempts if a.status == "right"]
        wrong = [a for a in attempts if a.status != "right" and a.answer]
        if not right and not wrong:
            self.counts["critique/skipped: no readable answer"] += 1
            return
        picks = []
        for i in range(rl.critiques_per_type):
            pool = (right if i % 2 == 0 else wrong) if right and wrong else (right or wrong)
            picks.append(pool[self.rng.randrange(len(pool))])
        prompts = [roles.critique_prompt(a.task, roles.shown_answer(kind, a.answer)) for a in picks]
        part = self._call(generate, "critique", kind, prompts, rl.critique_samples)
        scored.append(part)
        verdicts = [roles.parse_verdict(t) for t in part.texts]
        truth = [picks[g].status == "right" for g in part.group]
        part.rewards = [float(v is not None and v == t) for v, t in zip(verdicts, truth)]
        self.counts.update("critique/unparsable" for v in verdicts if v is None)
        self.metrics[f"critique/agreement/{kind}"] = sum(part.rewards) / len(part.rewards)
        balanced = balanced_accuracy(verdicts, truth)
        if balanced is not None:
            self.metrics[f"critique/balanced_accuracy/{kind}"] = balanced

    # ---- evaluation ---------------------------------------------------------------------------

    def evaluate(self, generate: Generate, which: str = "eval") -> dict[str, float]:
        """Greedy solve rates on the held-out sets: "eval" scores the first rl.eval_per_type tasks
        per kind of each, "all" all of them. Keys: solve_rate[/SOURCE][/KIND] (builtin also by
        rl/heldout.py's slices), samples/..., unparsable[/SOURCE/KIND] (a share)."""
        if which not in ("eval", "all"):
            raise ValueError(f"evaluate(which={which!r}): use 'eval' (the first rl.eval_per_type tasks per kind) "
                             "or 'all'")
        per = self.rl.eval_per_type if which == "eval" else None
        items = self.builtin.heldout(per)
        seeds = [t for kind in KINDS for t in [s for s in self.seed_heldout if s.kind == kind][:per]]
        tasks = [(t, BUILTIN) for t, _ in items] + [(t, seedset.SOURCE) for t in seeds]
        texts = self._call(generate, "eval", which, [prompt(t) for t, _ in tasks], 1, greedy=True).texts
        verdicts = self.scorer.score([(t, text) for (t, _), text in zip(tasks, texts)])
        right = [v.status == "right" for v in verdicts]
        out = {}
        for key, value in heldout.summarize(right[:len(items)], items).items():
            head, _, rest = key.partition("/")
            out[f"{head}/{BUILTIN}" + (f"/{rest}" if rest else "")] = value
        rows = [(src, t.kind, ok, v.status == "unparsable") for (t, src), ok, v in zip(tasks, right, verdicts)]
        for name, sel in self._eval_groups(rows).items():
            out[f"solve_rate{name}"] = sum(r[2] for r in sel) / len(sel)
            out[f"samples{name}"] = len(sel)
            out[f"unparsable{name}"] = sum(r[3] for r in sel) / len(sel)
        return out

    @staticmethod
    def _eval_groups(rows: list[tuple]) -> dict[str, list[tuple]]:
        """"" (all), "/KIND" (all sources), "/SOURCE/KIND" and "/azr"; builtin's own come from summarize."""
        groups: dict[str, list[tuple]] = {"": rows}
        for kind in KINDS:
            groups[f"/{kind}"] = [r for r in rows if r[1] == kind]
            for src in (BUILTIN, seedset.SOURCE):
                groups[f"/{src}/{kind}"] = [r for r in rows if r[0] == src and r[1] == kind]
        groups[f"/{seedset.SOURCE}"] = [r for r in rows if r[0] == seedset.SOURCE]
        return {k: v for k, v in groups.items() if v}

    # ---- supervised examples ------------------------------------------------------------------

    def sft_examples(self, n: int) -> list[tuple[str, str]]:
        """n (prompt, target) pairs for seeding every role, shared as rl.seed_share_* say, shuffled:
        right answers for solve (with LIMO traces for up to half of them when rl.limo_files is
        set), buffer programs for propose, the executor's verdict on a right or a wrong answer
        (in turn) for critique."""
        rl = self.rl
        total = rl.seed_share_solve + rl.seed_share_propose + rl.seed_share_critique
        n_prop = round(n * rl.seed_share_propose / total)
        n_crit = round(n * rl.seed_share_critique / total)
        n_solve = n - n_prop - n_crit
        n_limo = n_solve // 2 if self.limo else 0
        out = []
        for i in range(n_solve - n_limo):
            task = self._source_task(KINDS[i % 3])[0]
            out.append((prompt(task), roles.solve_target(task)))
        for _ in range(n_limo):
            trace = self.limo[self.rng.randrange(len(self.limo))]
            out.append((trace.question + LIMO_PROMPT, f"{trace.solution.strip()}\n\n<answer>{trace.answer}</answer>"))
        for i in range(n_prop):
            kind = KINDS[i % 3]
            target = self._references(kind, 1)[0]
            out.append((roles.propose_prompt(kind, self._references(kind)), roles.reference(target)))
        out += self._critique_examples(n_crit)
        self.rng.shuffle(out)
        return out

    def _critique_examples(self, n: int) -> list[tuple[str, str]]:
        """Answers meant right (even i) or wrong (odd i: another task's answer); the target is what
        the executor says of each."""
        items = []
        for i in range(n):
            kind = KINDS[(i // 2) % 3]
            task = self._source_task(kind)[0]
            donor = task if i % 2 == 0 else self._source_task(kind)[0]
            items.append((task, roles.solve_target(donor)))
        verdicts = self.scorer.score(items)
        self.counts.update("sft/critique: the other task's answer was right" for i, v in enumerate(verdicts)
                           if i % 2 == 1 and v.status == "right")
        return [(roles.critique_prompt(task, answer), roles.verdict_target(v.status == "right"))
                for (task, answer), v in zip(items, verdicts)]

    # ---- state --------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """JSON: the buffer, the seed held-out set, the counters (the rng is the objective's)."""
        return {"rounds": self.rounds, "counts": dict(self.counts),
                "buffer": {kind: [task_json(t) + [src] for t, src in buf] for kind, buf in self.buffer.items()},
                "seed_heldout": [task_json(t) for t in self.seed_heldout]}

    def load_state_dict(self, state: dict) -> None:
        self.rounds = int(state["rounds"])
        self.counts = Counter(state["counts"])
        for kind in KINDS:
            self.buffer[kind].clear()
            self.buffer[kind].extend((task_from_json(row[:-1]), row[-1]) for row in state["buffer"][kind])
        self.seed_heldout = [task_from_json(row) for row in state["seed_heldout"]]
        self._heldout_keys()
