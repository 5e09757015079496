"""Explicit resume, second round: --force deletes the old run only once the new one is prepared; a run
that ended on its time budget is done; every hint names the command that made the run (`trmkit train`,
`trmkit rl seed|train`, `trmkit email pretrain`); `trmkit eval`/`predict` refuse a self-play run; evaluation
prints no resume line; a config file given with --resume is said to be unread.

Tiny Sudoku runs of a few steps and one tiny seeding run, through the real command (`cli.main`)."""

import json

import pytest

from tests.train.test_resume_rules import root, train  # noqa: F401 - the fixture and the tiny train command
from trmkit import cli
from trmkit.train.checkpoint import list_checkpoints
from trmkit.train.resume import ended_on_clock, resume_command, run_kind

RL_CONFIG = """
run: {seed: 1, threads: 1, dtype: float32, compile: "off", grad_checkpointing: "off"}
model: {mixer: attention, hidden_size: 16, num_heads: 2, L_layers: 1, H_cycles: 1, L_cycles: 1,
        halt_max_steps: 1, puzzle_emb_len: 0}
train: {batch_size: 12, max_steps: 2, lr: 3e-3, warmup_steps: 1, ema_decay: 0.0, optimizer: adamw,
        checkpoint_every: 1, checkpoint_minutes: 0, keep_checkpoints: 5, log_every: 1, micro_batch: 6,
        best_metric: solve_rate}
rl: {proposals_per_type: 1, propose_samples: 2, tasks_per_type: 4, proposer_share: 0.5, attempts: 3,
     critiques_per_type: 2, critique_samples: 2, heldout_per_type: 4, anchor_examples: 6, update_epochs: 2}
"""


def test_force_keeps_the_old_run_when_the_new_one_fails_to_prepare(root, capsys):  # noqa: F811
    run = root / "run"
    assert train(root, run) == 0
    before = (run / "summary.json").read_bytes(), (run / "weights.safetensors").read_bytes()
    capsys.readouterr()
    assert cli.main(["train", str(root / "cfg.yaml"), f"run.dir={run}", "data.path=/nonexistent", "--force"]) == 2
    out, err = capsys.readouterr()
    assert ((run / "summary.json").read_bytes(), (run / "weights.safetensors").read_bytes()) == before
    assert list_checkpoints(run)[-1].name == "step-00000002"
    assert "/nonexistent" in err and "deleted once the new run's" in out, (out, err)
    assert train(root, run, "--force", "train.max_steps=1") == 0  # prepared: now it is deleted, and said
    assert "deleted the old run's files" in capsys.readouterr().out
    assert [p.name for p in list_checkpoints(run)] == ["step-00000001"]


def test_a_run_that_ended_on_its_clock_is_done_until_an_override_raises_the_limit(root, capsys):  # noqa: F811
    run = root / "run"
    assert train(root, run, "train.max_steps=100000", "train.max_minutes=0.0001") == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ended"] == "max_minutes" and summary["limits"]["max_minutes"] == 0.0001, summary
    steps = summary["steps"]
    before = (run / "summary.json").read_bytes(), (run / "weights.safetensors").read_bytes()
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert "ended on its time budget" in out and f"trmkit train --resume {run} train.max_minutes=" in out, out
    assert ((run / "summary.json").read_bytes(), (run / "weights.safetensors").read_bytes()) == before
    assert list_checkpoints(run)[-1].name == f"step-{steps:08d}"
    assert cli.main(["train", "--resume", str(run), "train.max_minutes=0.0002"]) == 0  # raised: trains on
    assert json.loads((run / "summary.json").read_text())["steps"] > steps


def test_ended_on_clock_reads_the_summary_s_end_step_and_limits(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps(
        {"ended": "max_minutes", "steps": 5, "limits": {"max_steps": 100, "max_minutes": 15}}))
    assert ended_on_clock(tmp_path, 5, 100, 15)
    assert not ended_on_clock(tmp_path, 7, 100, 15)  # a later session, stopped by a signal: it resumes
    assert not ended_on_clock(tmp_path, 5, 100, 30)  # train.max_minutes raised
    assert not ended_on_clock(tmp_path, 5, 100, 0)  # no time limit
    assert not ended_on_clock(tmp_path, 5, 200, 15)  # train.max_steps raised
    (tmp_path / "summary.json").write_text(json.dumps({"ended": "max_steps", "steps": 5}))
    assert not ended_on_clock(tmp_path, 5, 100, 15)


@pytest.mark.parametrize("meta, command", [
    ({"task": "sudoku"}, "trmkit train --resume RUN x=1"),
    ({"task": "selfplay-code", "objective": "seed"}, "trmkit rl seed --resume RUN x=1"),
    ({"task": "selfplay-code", "objective": "selfplay"}, "trmkit rl train --resume RUN x=1"),
    ({"task": "email-mlm", "path": "/nowhere-mlm"}, "trmkit email pretrain STORE x=1 --run-dir RUN"),
])
def test_the_resume_command_is_the_one_that_made_the_run(tmp_path, meta, command):
    run = tmp_path / "run"
    run.mkdir()
    (run / "data_meta.json").write_text(json.dumps(meta))
    assert resume_command(run, "x=1") == command.replace("RUN", str(run))


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    home = tmp_path_factory.mktemp("rl")
    (home / "cfg.yaml").write_text(RL_CONFIG)
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(home / "cache"))
    try:
        assert cli.main(["rl", "seed", str(home / "cfg.yaml"), f"run.dir={home / 'seed'}"]) == 0
    finally:
        mp.undo()
    return home


def test_a_seeding_run_is_continued_and_refused_with_its_own_commands(seeded, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(seeded / "cache"))
    run = seeded / "seed"
    capsys.readouterr()
    assert cli.main(["rl", "train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert (f"{run} is a seeding run (rl seed); continue it with `trmkit rl seed --resume {run}`, or "
            f"start self-play from it with `trmkit rl train CONFIG --init {run}`") in err, err
    assert len(err.strip().splitlines()) == 1
    config = str(seeded / "cfg.yaml")
    for command in (["train", "--resume", str(run)], ["eval", str(run)], ["predict", str(run), config],
                    ["train", config, f"run.dir={run}"]):
        assert cli.main(command) == 2
        err = capsys.readouterr().err
        assert f"`trmkit rl seed --resume {run}`" in err and "build a store" not in err, (command, err)
    assert cli.main(["rl", "seed", "--resume", str(run)]) == 0  # nothing left: said with the right command
    assert f"`trmkit rl seed --resume {run} train.max_steps=4`" in capsys.readouterr().out
    assert run_kind(run) == "rl seed" and json.loads((run / "data_meta.json").read_text())["objective"] == "seed"


def test_eval_prints_no_resume_line(root, capsys):  # noqa: F811
    run = root / "run"
    assert train(root, run, "train.micro_batch=8") == 0
    meta_path = list_checkpoints(run)[-1] / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["execution"]["micro_batch"] = 4  # as after the memory guard acted
    meta_path.write_text(json.dumps(meta))
    capsys.readouterr()
    assert cli.main(["eval", str(run)]) == 0
    out, err = capsys.readouterr()
    assert "resume:" not in out + err, out + err


def test_a_config_given_with_resume_is_said_to_be_unread(root, capsys):  # noqa: F811
    run = root / "run"
    assert train(root, run) == 0
    capsys.readouterr()
    assert cli.main(["train", str(root / "cfg.yaml"), "--resume", str(run), "train.max_steps=3"]) == 0
    out = capsys.readouterr().out
    assert f"{root / 'cfg.yaml'} is not read: a resumed run keeps its own {run / 'config.yaml'}" in out, out
    assert list_checkpoints(run)[-1].name == "step-00000003"  # the override applied
