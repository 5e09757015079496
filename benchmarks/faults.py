"""Fault injection: kill -9 at random moments, then check that nothing was lost or corrupted.

Each trial starts a real trmkit command in its own process group, kills the whole group with
SIGKILL after a random delay (uniform over the command's measured duration, so kills land in
start-up, steps, evaluations and saves alike), then inspects what is on disk and runs the
command again (resume or rebuild) to the end:

- train       `trmkit train` (checkpoint every step): every checkpoint left verifies (SHA-256 of
              tensors and meta), the resumed run ends with the same final checkpoint as a run that
              was never killed (bitwise), summary.json and weights are complete or absent
- save        the same with a model whose checkpoints are large, so kills land inside saves
- eval        `trmkit eval RUN --out`-less JSON on stdout: killed or complete, the run untouched
- email-store `trmkit data email` on real SpamAssassin mail: the store is absent or opens whole;
              the rebuild after the kill gives the same store
- selfplay    `trmkit rl train` (checkpoint every step): checkpoints verify, resume completes

    python benchmarks/faults.py                      # 6 trials of each kind (~15 minutes on 2 cores)
    python benchmarks/faults.py --trials 2 --kinds train,eval
    python benchmarks/faults.py --json faults.json

The table it prints is in docs/checkpoints.md ("Fault injection").
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from trmkit import procs, rundir
from trmkit.data.store import open_store
from trmkit.train.checkpoint import CorruptCheckpointError, list_checkpoints, load_checkpoint

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
TIMEOUT = 1800  # a safety net per command
TINY = """
run: {seed: 1, threads: 1, dtype: float32, compile: "off", grad_checkpointing: "off"}
model: {hidden_size: %(D)d, L_layers: 1, H_cycles: 2, L_cycles: 2, halt_max_steps: 2, puzzle_emb_len: 2}
train: {batch_size: 16, max_steps: %(steps)d, warmup_steps: 2, checkpoint_every: 1, checkpoint_minutes: 0,
        keep_checkpoints: 3, eval_every: 4, log_every: 1, ema_decay: 0.9}
data: {eval_limit: 16}
"""
SELFPLAY = """
run: {seed: 0, threads: 1, dtype: float32, compile: "off"}
model: {mixer: attention, hidden_size: 32, num_heads: 2, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 1,
        puzzle_emb_len: 0}
train: {batch_size: 8, max_steps: 6, warmup_steps: 1, optimizer: adamw, ema_decay: 0.0, lr: 1.0e-3,
        checkpoint_every: 1, checkpoint_minutes: 0, keep_checkpoints: 3, log_every: 1, eval_every: 0,
        best_metric: solve_rate}
rl: {proposals_per_type: 1, propose_samples: 2, tasks_per_type: 4, proposer_share: 0.5, attempts: 3,
     critiques_per_type: 2, heldout_per_type: 4, anchor_examples: 6}
"""


@dataclass
class Trial:
    kind: str
    delay: float  # seconds after the start when the group was killed
    killed: bool  # False: the command had already finished
    problems: list[str] = field(default_factory=list)
    resumed: bool = False  # the rerun completed


def trmkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "trmkit.cli", *args]


def run_to_end(cmd: list[str], cwd: Path) -> tuple[int, str]:
    """Run cmd to its end; (exit code, stdout then stderr)."""
    done = procs.run(cmd, timeout=TIMEOUT, capture_output=True, text=True, cwd=cwd)
    return done.returncode, (done.stdout or "") + "\n" + (done.stderr or "")


def kill_after(cmd: list[str], cwd: Path, delay: float) -> bool:
    """Start cmd, SIGKILL its whole group after `delay` s; True if it was still running."""
    with procs.group(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd) as proc:
        try:
            proc.wait(timeout=delay)
            return False
        except subprocess.TimeoutExpired:
            procs.kill_group(proc, signal.SIGKILL)
            return True


def check_checkpoints(run: Path) -> list[str]:
    """Every checkpoint directory verifies; no temp directory poses as a checkpoint."""
    problems = []
    for path in list_checkpoints(run):
        try:
            load_checkpoint(path)
        except CorruptCheckpointError as err:
            problems.append(f"{path.name} does not verify: {err}")
    return problems


def check_outputs(run: Path) -> list[str]:
    """summary.json and the other JSON files parse (complete or absent); weights load."""
    problems = []
    for name in (rundir.SUMMARY, rundir.PLAN, rundir.DATA_META):
        path = run / name
        if path.exists():
            try:
                json.loads(path.read_text())
            except ValueError as err:
                problems.append(f"{name} is half-written: {err}")
    weights = run / rundir.WEIGHTS
    if weights.exists():
        from safetensors.torch import load_file

        try:
            load_file(str(weights))
        except Exception as err:  # noqa: BLE001 - any failure to read is the finding
            problems.append(f"{rundir.WEIGHTS} does not load: {err}")
    return problems


def same_final_state(a: Path, b: Path) -> list[str]:
    ca, cb = load_checkpoint(list_checkpoints(a)[-1]), load_checkpoint(list_checkpoints(b)[-1])
    if ca.step != cb.step:
        return [f"final step {cb.step}, uninterrupted {ca.step}"]
    return [f"tensor {k} differs from the uninterrupted run" for k in ca.tensors
            if not torch.equal(ca.tensors[k], cb.tensors[k])][:3]


# ---------------------------------------------------------------- the kinds


def setup(root: Path) -> None:
    code, out = run_to_end(trmkit("data", "sudoku", "--source", "generate", "--num", "120", "--givens", "40-45",
                                  "--aug", "1", "--test-fraction", "0.2", "--out", str(root / "sudoku")),
                           root)
    assert code == 0, out
    for name, D, steps in (("tiny", 32, 12), ("big", 256, 6)):
        (root / f"{name}.yaml").write_text(TINY % {"D": D, "steps": steps})
    (root / "selfplay.yaml").write_text(SELFPLAY)


def train_cmd(root: Path, cfg: str, run: Path, *extra: str) -> list[str]:
    return trmkit("train", str(root / cfg), f"run.dir={run}", f"data.path={root / 'sudoku'}", *extra)


def trial_train(root: Path, cfg: str, kind: str, duration: float, reference: Path, rng: random.Random) -> Trial:
    run = root / f"{kind}-{rng.randrange(10**9)}"
    t = Trial(kind, rng.uniform(0.2, duration), False)
    t.killed = kill_after(train_cmd(root, cfg, run), root, t.delay)
    t.problems += check_checkpoints(run) + check_outputs(run)
    code, out = run_to_end(train_cmd(root, cfg, run, "--force") if not list_checkpoints(run)  # killed before a save
                           else trmkit("train", "--resume", str(run)), root)
    t.resumed = code == 0
    if not t.resumed:
        t.problems.append(f"resume failed: {out[-500:]}")
    else:
        t.problems += check_checkpoints(run) + check_outputs(run) + same_final_state(reference, run)
    shutil.rmtree(run, ignore_errors=True)
    return t


def trial_eval(root: Path, run: Path, duration: float, rng: random.Random) -> Trial:
    before = {p.name: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    t = Trial("eval", rng.uniform(0.2, duration), False)
    t.killed = kill_after(trmkit("eval", str(run)), root, t.delay)
    after = {p.name: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    changed = [n for n in before if after.get(n) != before[n] and n != rundir.SUBMISSION]
    if changed:
        t.problems.append(f"eval changed the run's files: {changed[:3]}")
    done = procs.run(trmkit("eval", str(run)), timeout=TIMEOUT, capture_output=True, text=True, cwd=root)
    out = done.stdout + done.stderr
    t.resumed = done.returncode == 0 and "exact_accuracy" in json.loads(done.stdout)
    if not t.resumed:
        t.problems.append(f"eval after the kill failed: {out[-300:]}")
    return t


def email_cmd(root: Path, out: Path) -> list[str]:
    return trmkit("data", "email", "--source", str(root / "mail"), "--out", str(out), "--vocab-size", "500",
                  "--seq-len", "64")


def trial_email(root: Path, duration: float, reference: dict, rng: random.Random) -> Trial:
    out = root / "mail-store"
    shutil.rmtree(out, ignore_errors=True)
    t = Trial("email-store", rng.uniform(0.2, duration), False)
    t.killed = kill_after(email_cmd(root, out), root, t.delay)
    if out.exists():
        try:
            open_store(out)
        except Exception as err:  # noqa: BLE001 - a store that does not open is the finding
            t.problems.append(f"a half store was left at {out}: {err}")
    code, text = run_to_end(email_cmd(root, out) + ["--force"], root)  # the kill may have come after the build
    t.resumed = code == 0
    if not t.resumed:
        t.problems.append(f"rebuild failed: {text[-300:]}")
    elif {k: len(v) for k, v in open_store(out).items()} != reference:
        t.problems.append("the rebuilt store differs from an uninterrupted build")
    return t


def selfplay_cmd(root: Path, run: Path) -> list[str]:
    return trmkit("rl", "train", str(root / "selfplay.yaml"), f"run.dir={run}")


def trial_selfplay(root: Path, duration: float, rng: random.Random) -> Trial:
    run = root / f"selfplay-{rng.randrange(10**9)}"
    t = Trial("selfplay", rng.uniform(0.2, duration), False)
    t.killed = kill_after(selfplay_cmd(root, run), root, t.delay)
    t.problems += check_checkpoints(run) + check_outputs(run)
    code, out = run_to_end(selfplay_cmd(root, run) + ["--force"] if not list_checkpoints(run)
                           else trmkit("rl", "train", "--resume", str(run)), root)
    t.resumed = code == 0
    if not t.resumed:
        t.problems.append(f"resume failed: {out[-500:]}")
    else:
        t.problems += check_checkpoints(run) + check_outputs(run)
        if load_checkpoint(list_checkpoints(run)[-1]).step != 6:
            t.problems.append("the resumed self-play did not reach its last step")
    shutil.rmtree(run, ignore_errors=True)
    return t


# ---------------------------------------------------------------- driver


def timed(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    code, out = run_to_end(cmd, cwd)
    assert code == 0, out[-2000:]
    return time.perf_counter() - t0


def prepare_mail(root: Path, per_folder: int) -> None:
    """A small mailbox of real SpamAssassin messages (two folders, the labels)."""
    for folder in ("easy-ham-1", "spam-1"):
        src = SHARED / "email" / "spamassassin" / folder
        if not src.is_dir():
            raise SystemExit(f"{src} not found: the e-mail kind needs ../shared/data (see its README)")
        dst = root / "mail" / folder
        dst.mkdir(parents=True)
        for path in sorted(src.iterdir())[:per_folder]:
            shutil.copyfile(path, dst / path.name)


def run_kind(kind: str, root: Path, trials: int, rng: random.Random, log) -> list[Trial]:
    if kind in ("train", "save"):
        cfg = "tiny.yaml" if kind == "train" else "big.yaml"
        reference = root / f"reference-{kind}"
        duration = timed(train_cmd(root, cfg, reference), root)
        return [trial_train(root, cfg, kind, duration, reference, rng) for _ in range(trials)]
    if kind == "eval":
        run = root / "reference-train"
        if not run.exists():
            timed(train_cmd(root, "tiny.yaml", run), root)
        duration = timed(trmkit("eval", str(run)), root)
        return [trial_eval(root, run, duration, rng) for _ in range(trials)]
    if kind == "email-store":
        prepare_mail(root, 150)
        duration = timed(email_cmd(root, root / "mail-reference"), root)
        reference = {k: len(v) for k, v in open_store(root / "mail-reference").items()}
        return [trial_email(root, duration, reference, rng) for _ in range(trials)]
    duration = timed(selfplay_cmd(root, root / "selfplay-reference"), root)
    return [trial_selfplay(root, duration, rng) for _ in range(trials)]


KINDS = ("train", "save", "eval", "email-store", "selfplay")


def table(results: list[Trial]) -> list[str]:
    lines = ["| kind | trials | killed mid-run | rerun / resume completed | problems found |", "|---|---|---|---|---|"]
    for kind in KINDS:
        rows = [t for t in results if t.kind == kind]
        if rows:
            lines.append(f"| {kind} | {len(rows)} | {sum(t.killed for t in rows)} | "
                         f"{sum(t.resumed for t in rows)} | {sum(len(t.problems) for t in rows)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=6, help="kills per kind")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    rng, results = random.Random(args.seed), []
    root = Path(tempfile.mkdtemp(prefix="trmkit-faults-"))
    try:
        setup(root)
        for kind in args.kinds.split(","):
            trials = run_kind(kind, root, args.trials, rng, print)
            for t in trials:
                print(f"{kind}: killed {'at %.1f s' % t.delay if t.killed else 'after it ended'}; "
                      f"rerun {'ok' if t.resumed else 'FAILED'}; {t.problems or 'nothing lost'}", flush=True)
            results += trials
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\n".join(table(results)))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(t) for t in results], indent=2))
    return 0 if all(t.resumed and not t.problems for t in results) else 1


if __name__ == "__main__":
    sys.exit(main())
