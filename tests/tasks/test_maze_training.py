"""The grid TRM on mazes: generated training data that resumes exactly after kill -9,
loss masking that changes which cells are scored, test-time supervision steps, and evaluation of
a positionless conv model on a larger grid, planned at that grid's size inside the memory budget
(refused, with its reason, for attention)."""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import yaml

from tests import SAFETY_TIMEOUT
from trmkit import procs
from trmkit.config import ConfigError
from trmkit.data.generated import GeneratedStream
from trmkit.data.store import open_split
from trmkit.tasks import maze
from trmkit.tasks.maze.config import MazeConfig
from trmkit.train.checkpoint import config_hash, list_checkpoints, load_checkpoint
from trmkit.train.checkpoint.identity import canonical_json
from trmkit.train.step import labels_to_tensor

CONV = """
run: {seed: 2, threads: 1, dtype: float32, compile: "off", grad_checkpointing: "off"}
model: {mixer: conv, hidden_size: 16, mlp_width: 32, L_layers: 1, H_cycles: 2, L_cycles: 1, halt_max_steps: 3,
        puzzle_emb_len: 0}
data: {stream: generate, curriculum_samples: 40}
train: {batch_size: 8, max_steps: 10, lr: 3e-3, warmup_steps: 2, ema_decay: 0.9, checkpoint_every: 1,
        checkpoint_minutes: 0, keep_checkpoints: 3, log_every: 1, mask_given: true, class_weights: o=2}
"""
ATTENTION = """
run: {seed: 2, threads: 1, dtype: float32, compile: "off"}
model: {mixer: attention, hidden_size: 16, num_heads: 2, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 2,
        puzzle_emb_len: 1}
train: {batch_size: 4, max_steps: 2, warmup_steps: 1, checkpoint_minutes: 0, log_every: 1}
"""


def cli(*args):
    return procs.run([sys.executable, "-m", "trmkit.cli", *args], capture_output=True, text=True,
                     timeout=SAFETY_TIMEOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("maze")
    for name, size, num, min_path in (("m7", 7, 40, 6), ("m11", 11, 12, 12)):
        maze.build("generate", root / name, size=size, num=num, min_path=min_path, test_fraction=0.5 if size == 7
                   else 1.0, seed=1, log=lambda m: None)
    (root / "conv.yaml").write_text(CONV)
    (root / "attention.yaml").write_text(ATTENTION)
    return root


def test_the_generated_stream_is_a_function_of_seed_and_index(root):
    meta = open_split(root / "m7" / "test").meta
    a = GeneratedStream(maze.MazeSampler(meta), seed=5, curriculum_samples=16)
    first = a.take(12)
    b = GeneratedStream(maze.MazeSampler(meta), seed=5, curriculum_samples=16)
    b.load_state_dict({**a.state_dict(), "generated": 7})
    assert np.array_equal(b.take(5).inputs, first.inputs[7:])  # resumed mid-way: the same samples
    assert a.progress(0) == 0 and a.progress(16) == 1.0 and a.samples_served == 12
    assert not np.array_equal(GeneratedStream(maze.MazeSampler(meta), seed=6).take(12).inputs, first.inputs)
    for q, ans in zip(first.inputs, first.labels):  # every generated maze is a valid one
        maze.check_answer(q.reshape(7, 7), ans.reshape(7, 7))

def test_easy_share_sets_how_many_generated_mazes_are_easier(root):
    meta = open_split(root / "m11" / "test").meta
    hardness = maze.MazeSampler(meta).hardness

    def short_paths(share: float) -> int:
        batch = GeneratedStream(maze.MazeSampler(meta, easy_share=share), seed=3).take(100)
        return int(sum((a == maze.PATH).sum() + 1 < hardness for a in batch.labels))  # path steps = cells + 1

    assert short_paths(0.0) == 0  # every maze as hard as the store's
    assert short_paths(1.0) >= 60  # most easier (t drawn near the hardness can reach it)
    assert 20 <= short_paths(0.5) <= 55
    with pytest.raises(ConfigError, match="easy_share"):
        MazeConfig(easy_share=1.5)


def test_long_share_makes_hard_mazes_perfect_with_twice_the_path_and_zero_changes_nothing(root):
    meta = open_split(root / "m11" / "test").meta
    hardness = maze.MazeSampler(meta).hardness

    def take(**kw):
        return GeneratedStream(maze.MazeSampler(meta, easy_share=0.0, **kw), seed=3).take(40)

    longer = take(long_share=1.0)
    assert all((a == maze.PATH).sum() + 1 >= 2 * hardness for a in longer.labels)
    for q, a in zip(longer.inputs, longer.labels):
        maze.check_answer(q.reshape(11, 11), a.reshape(11, 11))
    assert np.array_equal(take(long_share=0.0).inputs, take().inputs)  # 0 draws nothing: the same stream
    with pytest.raises(ConfigError, match="long_share"):
        MazeConfig(long_share=-0.1)


def test_hardness_sets_how_long_generated_paths_are_while_the_store_keeps_its_own(root):
    meta = open_split(root / "m11" / "test").meta  # built with paths >= 12 steps

    def path_steps(**kw) -> list[int]:
        batch = GeneratedStream(maze.MazeSampler(meta, easy_share=0.0, **kw), seed=3).take(30)
        return [int((a == maze.PATH).sum()) + 1 for a in batch.labels]  # path steps = cells + 1

    assert maze.MazeSampler(meta).hardness == 12 and maze.MazeSampler(meta, hardness=30).hardness == 30
    assert min(path_steps(hardness=30)) >= 30
    assert min(path_steps()) < 30 and path_steps(hardness=0) == path_steps()  # 0: the store's hardness
    with pytest.raises(ConfigError, match="hardness"):
        MazeConfig(hardness=-1)
    with pytest.raises(ConfigError, match="maze.hardness=200: no 11x11 maze"):  # out of the grid's reach
        maze.MazeSampler(meta, hardness=200)


def test_mask_given_leaves_walls_start_and_goal_out_of_the_loss():
    q = maze.parse("S #" "  #" "  G", allow_path=False).reshape(1, 9)
    a = maze.parse("So#" "oo#" "  G", allow_path=True).reshape(1, 9)
    given = torch.tensor([maze.WALL, maze.START, maze.GOAL])
    plain = labels_to_tensor(a, maze.PAD, "cpu")
    masked = labels_to_tensor(a, maze.PAD, "cpu", q, given)
    assert (plain >= 0).sum() == 9 and (masked >= 0).sum() == 5  # only the 5 open cells are scored
    assert masked[0, 0] < 0 and masked[0, 2] < 0 and masked[0, 1] == maze.PATH


def test_generated_training_resumes_exactly_after_sigkill(root):
    """The killed run's files are then made as trmkit wrote them when the maze knobs were data.* keys: a run
    from before the maze section resumes exactly too."""
    data = f"data.path={root / 'm7'}"
    hardness = "maze.hardness=8"  # the store's is 6: the stream's own, kept by the resumed run
    # The whole run beside the one that is killed (one thread each, own run dirs): the whole one is
    # read only after it ends, and the pair takes about the wall time of one.
    train = [sys.executable, "-m", "trmkit.cli", "train", str(root / "conv.yaml"), hardness]
    whole = procs.start([*train, f"run.dir={root / 'whole'}", data], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    killed = root / "killed"
    proc = procs.start([*train, f"run.dir={killed}", data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + SAFETY_TIMEOUT
    try:
        while not any(load_step(p) >= 4 for p in list_checkpoints(killed)):
            assert proc.poll() is None and time.time() < deadline, "the run ended before step 4"
            time.sleep(0.02)
    except BaseException:
        procs.kill_group(whole)  # no run left behind when the wait fails
        raise
    procs.kill_group(proc, signal.SIGKILL)
    out, err = procs.communicate(whole, SAFETY_TIMEOUT)
    assert whole.returncode == 0, out + err
    assert "stream=generate" in out and "7 x 7 mazes (paths >= 8" in out
    assert 4 <= load_checkpoint(list_checkpoints(killed)[-1]).step < 10
    as_written_before_the_maze_section(killed)
    resumed = cli("train", "--resume", str(killed))
    assert resumed.returncode == 0 and "resumed from" in resumed.stdout, resumed.stdout + resumed.stderr
    assert "data.hardness is now maze.hardness" in resumed.stderr  # said once, for the run's config.yaml
    a, b = load_checkpoint(list_checkpoints(root / "whole")[-1]), load_checkpoint(list_checkpoints(killed)[-1])
    assert a.step == b.step == 10 and a.meta["stream"] == b.meta["stream"]
    for key in a.tensors:
        assert torch.equal(a.tensors[key], b.tensors[key]), key


def before_the_maze_section(config: dict) -> dict:
    """A config as Config.to_dict() wrote it when data held the maze generator's knobs."""
    old = {name: dict(values) for name, values in config.items() if name != "maze"}
    old["data"] = {k: v for k, v in old["data"].items() if k != "trace"}
    knobs = {k: v for k, v in config.get("maze", {}).items() if k != "read"}  # read came with the section
    old["data"].update({**dict(hardness=0, easy_share=0.5, long_share=0.0), **knobs,
                        "trace": config["data"]["trace"]})
    return old


def as_written_before_the_maze_section(run_dir) -> None:
    """The run's config.yaml and its checkpoints' configs (their hashes resealed) in the former spelling."""
    config = run_dir / "config.yaml"
    config.write_text(yaml.safe_dump(before_the_maze_section(yaml.safe_load(config.read_text())), sort_keys=False))
    assert "\nmaze:" not in config.read_text() and "  hardness: 8\n" in config.read_text()
    for path in list_checkpoints(run_dir):
        meta = json.loads((path / "meta.json").read_text())
        meta["config"] = before_the_maze_section(meta["config"])
        meta["config_hash"] = config_hash(meta["config"])
        body = {k: v for k, v in meta.items() if k != "meta_sha256"}
        meta["meta_sha256"] = hashlib.sha256(canonical_json(body).encode()).hexdigest()
        (path / "meta.json").write_text(json.dumps(meta))
        assert load_checkpoint(path).config["data"]["hardness"] == 8


def load_step(path) -> int:
    return int(path.name.split("-")[1])


def test_eval_steps_and_votes_change_what_is_run_and_a_conv_model_reads_a_larger_grid(root):
    run = root / "whole"  # trained on 7 x 7 (test_generated_training_resumes_exactly_after_sigkill)
    if not (run / "weights.safetensors").exists():
        pytest.skip("needs the trained run of the resume test")
    out = cli("eval", str(run), "run.threads=1", "--data", str(root / "m11"), "--steps", "1,4", "--vote", "1,4")
    assert out.returncode == 0, out.stderr
    curve = json.loads(out.stdout)["steps"]
    for k in ("1", "4"):  # a vote of the example alone is the one-shot answer; 4 variants ran 4 times the passes
        assert set(curve[k]["vote"]) == {"1", "4"}
        assert curve[k]["vote"]["1"]["exact_accuracy"] == curve[k]["exact_accuracy"]
        assert curve[k]["vote"]["1"]["path_recall"] == curve[k]["path_recall"]
        assert curve[k]["vote"]["4"]["samples"] == curve[k]["samples"] and "loss" not in curve[k]["vote"]["4"]
    assert set(curve) == {"1", "4"} and curve["1"]["act_steps"] <= 1 and curve["4"]["act_steps"] <= 4
    assert curve["4"]["act_steps"] > 1 or curve["4"]["samples"] == 12  # 4 steps were run, halting read at each
    assert "reads this 11 x 11 grid" in out.stderr
    kept = json.loads((run / "eval_steps.json").read_text())
    assert set(next(iter(kept.values()))) == {"1", "4"}
    report = cli("report", str(run))
    assert report.returncode == 0, report.stderr
    assert "eval_steps.png" in report.stdout and "path" in report.stdout  # the K curve, the path figures
    table = (run / "report" / "report.md").read_text()
    assert "## Test-time supervision steps" in table and "| m11 | 4 |" in table and "(4 variants)" in table
    refused = cli("eval", str(run), "--data", str(root / "m11"), "--vote", "9")
    assert refused.returncode == 2 and "a maze has 8 symmetries" in refused.stderr, refused.stderr
    pooled = cli("eval", str(run), "run.threads=1", "--data", str(root / "m11"), "--steps", "1,4", "--vote", "2",
                 "--pool")
    assert pooled.returncode == 0, pooled.stderr
    result = json.loads(pooled.stdout)
    assert result["pooled_vote"]["variants"] == 2 and result["pooled_vote"]["steps"] == [1, 4]
    assert result["pooled_vote"]["samples"] == result["steps"]["4"]["samples"]
    assert "(4 ballots)" in pooled.stderr
    every = cli("eval", str(run), "run.threads=1", "--data", str(root / "m11"), "--steps", "1,4", "--vote", "2",
                "--pool", "every")  # the answers at K = 2 and 3 join the vote, from the same passes
    assert every.returncode == 0, every.stderr
    wide = json.loads(every.stdout)["pooled_vote"]
    assert wide["steps"] == [1, 2, 3, 4] and "(8 ballots)" in every.stderr
    assert wide["valid_path_accuracy"] >= result["pooled_vote"]["valid_path_accuracy"]  # a superset of ballots
    refused = cli("eval", str(run), "--data", str(root / "m11"), "--vote", "2", "--pool")
    assert refused.returncode == 2 and "--pool votes over the answers at several K" in refused.stderr, refused.stderr


def test_a_larger_grid_is_planned_at_its_own_size_and_evaluated_inside_the_memory_budget(root, tmp_path):
    run = root / "whole"  # trained on 7 x 7 (test_generated_training_resumes_exactly_after_sigkill)
    if not (run / "weights.safetensors").exists():
        pytest.skip("needs the trained run of the resume test")
    maze.build("generate", tmp_path / "m30", size=30, num=2, min_path=20, test_fraction=1.0, seed=1, log=lambda m: None)
    per_slot = {}
    for name, data in (("m7", root / "m7"), ("m30", tmp_path / "m30")):
        out = cli("eval", str(run), "run.threads=1", "--data", str(data), "--memory-budget", "1GB", "--steps", "8",
                  "--verbose")  # the plan's lines, which eval prints only with --verbose
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert result["memory_budget_gb"] == round(1e9 / 2**30, 3)
        assert result["peak_rss_gb"] <= result["memory_budget_gb"]  # the kernel's figure for the whole process
        size, unit = re.search(r"micro_batch=\d+ .*?, ([\d.]+) (KiB|MiB) per slot", out.stderr).groups()
        per_slot[name] = float(size) * (1024 if unit == "MiB" else 1)
    assert per_slot["m30"] > 10 * per_slot["m7"]  # 900 cells against 49: planned for the grid it reads


def test_eval_of_a_checkpoint_reads_its_ema_weights_and_keeps_the_final_curve(root):
    run = root / "whole"  # checkpoints of its last 3 steps are kept (CONV)
    if not (run / "weights.safetensors").exists():
        pytest.skip("needs the trained run of the resume test")
    steps = sorted(load_step(p) for p in list_checkpoints(run))

    def loss(*extra):
        out = cli("eval", str(run), "run.threads=1", "--steps", "1,2", *extra)
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        return result["weights"], [result["steps"][k]["loss"] for k in ("1", "2")]

    final = loss()
    curve = (run / "eval_steps.json").read_bytes()  # the report's curve: the final weights'
    last, older = loss("--checkpoint", str(steps[-1])), loss("--checkpoint", str(steps[0]))
    assert final[0] == "final" and last[0] == f"checkpoint step {steps[-1]}"
    assert last[1] == final[1]  # the final weights are the last checkpoint's EMA weights
    assert older[1] != final[1]  # an earlier checkpoint is other weights
    assert (run / "eval_steps.json").read_bytes() == curve  # a checkpoint's evaluation leaves it alone
    missing = cli("eval", str(run), "--checkpoint", "1")
    assert missing.returncode == 2 and f"no checkpoint of step 1 (kept: {', '.join(map(str, steps))})" in missing.stderr


def test_a_model_with_positions_is_refused_on_another_grid_size(root):
    run = root / "att"
    done = cli("train", str(root / "attention.yaml"), f"run.dir={run}", f"data.path={root / 'm7'}")
    assert done.returncode == 0, done.stdout + done.stderr
    out = cli("eval", str(run), "--data", str(root / "m11"))
    assert out.returncode == 2
    assert "seq_len 121 (the run's: 49)" in out.stderr and "only a model without positions" in out.stderr
