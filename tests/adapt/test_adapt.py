"""`trmkit adapt`: labels of the new source are never read, a checker that rejects everything trains
nothing, an adaptation resumes exactly, a task without a checker is refused, the rounds are logged, and
adapt.reblank trains the kept answers under other inputs.

Tiny sizes, bounded by steps: a 76k-parameter model trained 4 steps on 16 generated Sudoku, adapted on 12 others.
The stand-in checkers below stand for a task's own (tasks/base.py `Checking`): they read only inputs and answers.
"""

import dataclasses
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from trmkit import config as config_mod
from trmkit import hardware, registry, rundir
from trmkit.adapt import rounds as rounds_mod
from trmkit.adapt.command import Plugins, adapt, new_config
from trmkit.adapt.problems import read_problems, split_problems
from trmkit.api import task_hooks
from trmkit.cli import main
from trmkit.config import ConfigError
from trmkit.monitor.loggers import read_metrics
from trmkit.tasks.base import Checking
from trmkit.train.checkpoint.store import list_checkpoints
from trmkit.train.run import run

SMALL = ["adapt.round_steps=2", "adapt.rounds=2", "adapt.trajectories=2", "adapt.steps=2", "adapt.heldout=0.25"]


def accept_all(meta, spec):
    return Checking(check=lambda x, a: np.ones(len(x), bool), describe="stand-in: accepts every answer")


def reject_all(meta, spec):
    return Checking(check=lambda x, a: np.zeros(len(x), bool), describe="stand-in: rejects every answer")


def accept_some(meta, spec):
    """Accepts about a third of the answers, by a rule on inputs and answers only."""
    return Checking(check=lambda x, a: (np.asarray(a).sum(1) + np.asarray(x).sum(1)) % 3 == 0,
                    describe="stand-in: accepts a third")


def plugins(checker):
    return Plugins(lambda name: dataclasses.replace(registry.get(name), checker=checker), registry.SECTIONS,
                   task_hooks)


def adapted(base: Path, source: Path, out: Path, checker, *extra: str, said: list | None = None) -> dict:
    p = plugins(checker)
    log = said.append if said is not None else (lambda m: None)
    cfg = new_config(base / "run", source, p, overrides=[*SMALL, *extra], out=str(out), log=log)
    return adapt(cfg, p, log=log)


def weights(run_dir: Path) -> dict:
    return {k: v.clone() for k, v in rundir.read_weights(rundir.weights_file(run_dir)).items()}


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


def kept(run_dir: Path) -> dict:
    """The kept answers in the run's newest checkpoint (the stream's state)."""
    meta = json.loads((list_checkpoints(run_dir)[-1] / rundir.CHECKPOINT_META).read_text())
    return meta["stream"]["kept"]


def rounds(run_dir: Path) -> list[dict]:
    return [r for r in read_metrics(rundir.path(run_dir, rundir.METRICS)) if "adapt/round" in r]


def cut_back(whole: Path, cut: Path, step: int) -> None:
    """A copy of the run in whole as if killed -9 right after its checkpoint of `step`."""
    shutil.copytree(whole, cut)
    for ckpt in list_checkpoints(cut):
        if int(ckpt.name.rsplit("-", 1)[-1]) > step:
            shutil.rmtree(ckpt)
    for name in (rundir.SUMMARY, rundir.WEIGHTS):
        rundir.path(cut, name).unlink()


def test_labels_of_the_new_source_are_never_read(base, tmp_path):
    scrambled = tmp_path / "scrambled"
    shutil.copytree(base / "new", scrambled)
    for split in ("train", "test"):
        path = scrambled / split / "labels.npy"
        labels = np.load(path)
        np.save(path, np.random.default_rng(1).integers(0, 11, labels.shape).astype(labels.dtype))
    adapted(base, base / "new", tmp_path / "a", accept_some)
    adapted(base, scrambled, tmp_path / "b", accept_some)
    assert kept(tmp_path / "a") and kept(tmp_path / "a") == kept(tmp_path / "b")
    assert same_weights(weights(tmp_path / "a"), weights(tmp_path / "b"))
    assert not same_weights(weights(tmp_path / "a"), weights(base / "run"))  # the kept answers were trained on
    (scrambled / "train" / "labels.npy").unlink()  # never opened: reading the problems needs no labels file
    assert np.array_equal(read_problems(scrambled).inputs, read_problems(base / "new").inputs)


def test_a_checker_that_rejects_everything_leaves_the_weights_unchanged(base, tmp_path):
    before = weights(base / "run")
    said = []
    result = adapted(base, base / "new", tmp_path / "a", reject_all, said=said)
    assert result["steps"] == 0 and any("nothing to train on" in line for line in said)
    assert same_weights(weights(tmp_path / "a"), before) and same_weights(weights(base / "run"), before)
    assert [r["adapt/kept"] for r in rounds(tmp_path / "a")] == [0]  # round 0 only: no step follows


def test_an_adaptation_resumes_exactly_after_a_kill(base, tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    adapted(base, base / "new", whole, accept_some, "train.checkpoint_every=1", "train.keep_checkpoints=10",
            "adapt.rounds=3")
    cut_back(whole, cut, 3)
    p = plugins(accept_some)
    cfg = config_mod.load(rundir.path(cut, rundir.CONFIG), [f"run.dir={cut}"], registry.SECTIONS)
    assert adapt(cfg, p, resume=True, log=lambda m: None)["steps"] == 6
    assert same_weights(weights(cut), weights(whole)) and kept(cut) == kept(whole)
    solved = [r["adapt/solved"] for r in rounds(whole)]
    assert sum(solved[1:]) > 0  # a later round kept answers the first had not: the resume crossed live rounds


def test_steps_cut_short_by_the_clock_still_score_the_last_weights(base, tmp_path):
    """train.max_minutes' hard stop ends the steps after the first (its budget is long spent by then)."""
    result = adapted(base, base / "new", tmp_path / "a", accept_some, "train.max_minutes=0.000001")
    records = rounds(tmp_path / "a")
    assert result["steps"] == 1 and [r["step"] for r in records] == [0, 1] and records[-1]["adapt/tried"] == 0


def test_a_task_without_a_checker_is_refused(base, tmp_path):
    with pytest.raises(ConfigError, match="task sudoku has no checker: adapt needs one to accept answers without"):
        adapted(base, base / "new", tmp_path / "a", None)


def test_rounds_are_logged_with_progress_and_the_new_run_keeps_the_original_store(base, tmp_path):
    said = []
    adapted(base, base / "new", tmp_path / "a", accept_some, said=said)
    records = rounds(tmp_path / "a")
    keys = {"adapt/round", "adapt/tried", "adapt/solved", "adapt/kept", "adapt/heldout_one_shot",
            "adapt/replay_share", "adapt/solve_seconds"}
    assert len(records) == 3 and all(keys <= set(r) for r in records)
    assert [r["step"] for r in records] == [0, 2, 4] and records[-1]["adapt/kept"] >= records[0]["adapt/kept"]
    lines = [line for line in said if line.startswith("adapt: round")]
    assert lines and all("ETA" in line and "held-out one-shot" in line for line in lines)
    assert any("9 to adapt on, 3 held out" in line for line in said)
    cfg = config_mod.load(rundir.path(tmp_path / "a", rundir.CONFIG), [], registry.SECTIONS)
    assert cfg.data.path == str(base / "orig") and cfg.sections["adapt"].source == str((base / "new").resolve())
    with pytest.raises(ConfigError, match="already holds a run"):
        adapted(base, base / "new", tmp_path / "a", accept_some)


def test_the_split_is_fixed_and_the_command_runs_with_the_task_s_own_checker(base, tmp_path, capsys):
    a, h = split_problems(12, 0.25, 0)
    assert len(h) == 3 and not set(a) & set(h) and np.array_equal(split_problems(12, 0.25, 0)[1], h)
    code = main(["adapt", str(base / "run"), "--data", str(base / "new"), "--out", str(tmp_path / "c"), *SMALL])
    assert code == 0 and rundir.path(tmp_path / "c", rundir.SUMMARY).is_file()
    out = capsys.readouterr().out
    assert "adapt: the checker: Sudoku rules" in out and "adapt: round 0:" in out


def test_train_resume_on_an_adaptation_names_the_command_that_continues_it(base, tmp_path, capsys):
    adapted(base, base / "new", tmp_path / "a", accept_some)
    code = main(["train", "--resume", str(tmp_path / "a")])
    err = capsys.readouterr().err
    assert code != 0 and f"trmkit adapt --resume {tmp_path / 'a'}" in err and "Traceback" not in err
    code = main(["adapt", "--resume", str(tmp_path / "a"), "--minutes", "3", "--checker", "x.py:f"])
    assert code == 2 and "drop --minutes, --checker" in capsys.readouterr().err


def test_a_pairs_source_is_learned_from_the_user_s_checker_not_from_its_outputs(tmp_path):
    """The new source's outputs are random (wrong): only answers the user's function accepts are trained on."""
    from tests.tiny import PAIRS_TINY, pairs_jsonl
    from trmkit.tasks.pairs.build import build_pairs

    pairs_jsonl(tmp_path / "orig.jsonl")
    rng = np.random.default_rng(7)
    new = [{"input": g.tolist(), "output": rng.integers(0, 4, (2, 3)).tolist()} for g in rng.integers(0, 4, (12, 2, 3))]
    (tmp_path / "new.jsonl").write_text("".join(json.dumps(p) + "\n" for p in new))
    (tmp_path / "check.py").write_text("def check(i, o):\n    return all(3 - a == b for r, s in zip(i, o) "
                                       "for a, b in zip(r, s))\n")
    for name in ("orig", "new"):
        build_pairs(tmp_path / f"{name}.jsonl", tmp_path / name, test_fraction=0.25, seed=0, log=lambda m: None)
    (tmp_path / "cfg.yaml").write_text(PAIRS_TINY)
    cfg = config_mod.load(tmp_path / "cfg.yaml", [f"data.path={tmp_path / 'orig'}", f"run.dir={tmp_path / 'run'}",
                                                  "train.max_steps=60", "train.lr=3e-3"], registry.SECTIONS)
    run(cfg, hardware.probe(), log=lambda m: None, **task_hooks(cfg))
    p = Plugins(registry.get, registry.SECTIONS, task_hooks)
    c2 = new_config(tmp_path / "run", tmp_path / "new", p, overrides=["adapt.round_steps=4", "adapt.rounds=2"],
                    out=str(tmp_path / "run2"), checker=f"{tmp_path / 'check.py'}:check", log=lambda m: None)
    assert adapt(c2, p, log=lambda m: None)["steps"] == 8
    first = rounds(tmp_path / "run2")[0]
    answers = {int(k): v for k, v in kept(tmp_path / "run2").items()}
    problems = read_problems(tmp_path / "new")
    assert first["adapt/kept"] == len(answers) > 0
    vocab = problems.meta.vocab
    for problem, label in answers.items():  # every kept label is the right answer, 3 - x, never the JSONL's output
        cells = [(vocab[a], vocab[b]) for a, b in zip(problems.inputs[problem], label) if a != 0]
        assert len(cells) == 6 and all(int(b) == 3 - int(a) for a, b in cells)


def test_a_solving_round_says_how_far_it_is(monkeypatch):
    said: list[str] = []
    monkeypatch.setattr(rounds_mod, "PROGRESS_SECONDS", 0)
    say = rounds_mod.Rounds._progress(SimpleNamespace(log=said.append), 3, 10)
    say(4, 1)
    say(10, 2)  # the round's own line follows: not repeated
    assert len(said) == 1 and "ETA" in said[0]
    assert said[0].startswith("adapt: round 3: tried 4 of 10, 1 accepted so far")


def test_schedules_for_training_from_scratch_are_not_started_again(base, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(base / "run", run)
    file = rundir.path(run, rundir.CONFIG)
    c = yaml.safe_load(file.read_text())
    c["train"]["depth_curriculum"], c["data"]["stream"], c["data"]["curriculum_samples"] = "0.3,0.6", "curriculum", 99
    file.write_text(yaml.safe_dump(c))
    said: list[str] = []
    cfg = new_config(run, base / "new", plugins(accept_some), overrides=list(SMALL), out=str(tmp_path / "a"),
                     log=said.append)
    assert (cfg.train.depth_curriculum, cfg.data.stream, cfg.data.curriculum_samples) == ("", "store", 0)
    assert any("train.depth_curriculum='0.3,0.6' -> ''" in m for m in said)
    assert any("data.stream=curriculum -> store" in m for m in said)
    cfg = new_config(run, base / "new", plugins(accept_some), overrides=[*SMALL, "train.depth_curriculum=0.5,0.8"],
                     out=str(tmp_path / "b"), log=lambda m: None)
    assert cfg.train.depth_curriculum == "0.5,0.8"  # set again by the user: kept


def test_a_lower_train_lr_lowers_the_puzzle_embeddings_rate_in_the_same_ratio(base, tmp_path):
    was = config_mod.load(rundir.path(base / "run", rundir.CONFIG), [], dict(plugins(accept_some).sections)).train
    said: list[str] = []
    cfg = new_config(base / "run", base / "new", plugins(accept_some), overrides=[*SMALL, f"train.lr={was.lr / 10:g}"],
                     out=str(tmp_path / "a"), log=said.append)
    assert cfg.train.puzzle_emb_lr == pytest.approx(was.puzzle_emb_lr / 10)
    assert any(m.startswith(f"adapt: train.puzzle_emb_lr={was.puzzle_emb_lr:g} -> ") for m in said)
    cfg = new_config(base / "run", base / "new", plugins(accept_some), out=str(tmp_path / "b"), log=lambda m: None,
                     overrides=[*SMALL, f"train.lr={was.lr / 10:g}", "train.puzzle_emb_lr=0.5"])
    assert cfg.train.puzzle_emb_lr == 0.5  # set by the user: kept
    cfg = new_config(base / "run", base / "new", plugins(accept_some), overrides=list(SMALL), out=str(tmp_path / "c"),
                     log=lambda m: None)
    assert cfg.train.puzzle_emb_lr == was.puzzle_emb_lr  # train.lr not given: RUN's rates


def test_tr_rpg_starts_at_runs_last_rate_and_the_kept_answers_at_its_configured_one(base, tmp_path):
    """RUN's config holds its peak rate; TR-RPG continues from where RUN's schedule ended (at the peak it wrecked
    the policy), and the puzzle embedding's rate follows in the same ratio; training on kept answers keeps RUN's
    configured rate (it did as well there); a train.lr given is kept; each printed."""
    run = tmp_path / "run"
    shutil.copytree(base / "run", run)
    was = config_mod.load(rundir.path(run, rundir.CONFIG), [], dict(plugins(accept_some).sections)).train
    with open(rundir.path(run, rundir.METRICS), "a") as f:  # as if its schedule had ended at a quarter of its peak
        f.write(json.dumps({"step": 99, "train/lr": was.lr / 4}) + "\n")
    said: list[str] = []
    cfg = new_config(run, base / "new", plugins(accept_some), overrides=list(SMALL), out=str(tmp_path / "a"),
                     objective="tr-rpg", log=said.append)
    assert cfg.train.lr == pytest.approx(was.lr / 4) and cfg.train.puzzle_emb_lr == pytest.approx(was.puzzle_emb_lr / 4)
    assert any(m.startswith(f"adapt: train.lr={was.lr:g} -> {was.lr / 4:.3g} (tr-rpg: RUN's rate at its last logged "
                            "step, 99") for m in said)
    said.clear()
    cfg = new_config(run, base / "new", plugins(accept_some), overrides=list(SMALL), out=str(tmp_path / "b"),
                     log=said.append)
    assert cfg.train.lr == was.lr and cfg.train.puzzle_emb_lr == was.puzzle_emb_lr
    assert any(m.startswith(f"adapt: train.lr={was.lr:g} (RUN's configured rate; training on kept answers")
               for m in said)
    cfg = new_config(run, base / "new", plugins(accept_some), overrides=[*SMALL, "train.lr=1e-3"],
                     out=str(tmp_path / "c"), objective="tr-rpg", log=lambda m: None)
    assert cfg.train.lr == 1e-3  # set by the user: kept
    rundir.path(run, rundir.METRICS).write_text("")
    said.clear()
    cfg = new_config(run, base / "new", plugins(accept_some), overrides=list(SMALL), out=str(tmp_path / "d"),
                     objective="tr-rpg", log=said.append)
    assert cfg.train.lr == was.lr and any("logs no rate to continue from" in m for m in said)


def test_reblank_trains_the_kept_answers_with_more_blanks_and_says_so(base, tmp_path):
    """adapt.reblank=true on Sudoku (the store's blank '.'): the same first round, then other inputs trained."""
    said = []

    def keeps_givens(meta, spec):  # accepts a third of the answers, each labelled with the puzzle's givens kept
        blank = meta.blank_id
        return dataclasses.replace(accept_some(meta, spec),
                                   to_label=lambda x, a: np.where(np.asarray(x) == blank, a, x))

    steps = ("adapt.rounds=1", "adapt.round_steps=8")  # enough kept draws for some with a higher drawn count
    adapted(base, base / "new", tmp_path / "plain", keeps_givens, *steps)
    adapted(base, base / "new", tmp_path / "rb", keeps_givens, *steps, "adapt.reblank=true", said=said)
    assert any(line.startswith("adapt: reblank: ") and "blank token '.'" in line for line in said), said
    assert kept(tmp_path / "rb") and kept(tmp_path / "rb") == kept(tmp_path / "plain")  # round 0: before any step
    assert not same_weights(weights(tmp_path / "rb"), weights(tmp_path / "plain"))
