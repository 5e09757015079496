"""The LM policy under FSDP2 on 2 gloo processes (rl/lm/fsdp.py): an update of the same rows split over 2 ranks
equals the 1-process update, both ranks hold the same weights, checkpoints hold whole tensors under the 1-process
names, and uneven shares (a rank with more micro-batches, or none) do not hang. Spawned processes, killed on
failure or timeout."""

import functools
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from trmkit.rl.lm import policy as policy_mod
from trmkit.rl.lm.generate import rollout
from trmkit.rl.lm.update import MicroBatch, RoleRows, UpdateSettings, update
from trmkit.train.optim import build_optimizer

BASE = {"model_shape": "tiny", "seed": 0}
PROMPTS = ["def f(x):\n    return x * 2", "x", "Predict f([1, 2])"]
JOIN_S = 120  # per process; a hang fails the test instead of blocking the suite


class _Train:  # the TrainConfig fields build_optimizer reads
    optimizer, lr, beta1, beta2, weight_decay = "adamw", 1e-2, 0.9, 0.95, 0.1


def optimizer(params, kind: str) -> torch.optim.Optimizer:
    """AdamW as the run builds it, or SGD with momentum: Adam's first step is ~lr * sign(g), so an element whose
    gradient is ~1e-9 (an embedding row barely used) turns float rounding into a 1e-4 weight difference; SGD's
    step is linear in the gradient, which is what the reduction over processes must get right."""
    params = list(params)
    return build_optimizer(params, _Train) if kind == "adamw" else torch.optim.SGD(params, lr=0.1, momentum=0.9)


def fsdp_available() -> str:
    """'' when FSDP2 can run here, else the reason (measured at import of the test)."""
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        return "this torch has no gloo backend"
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError as err:
        return f"this torch has no FSDP2 fully_shard ({err})"
    return ""


pytestmark = pytest.mark.skipif(bool(fsdp_available()), reason=fsdp_available() or "-")


def build(lora: int):
    torch.manual_seed(0)
    pol = policy_mod.build(BASE, "float32", lora, ("q_proj", "v_proj") if lora else None,
                           lambda n: list(range(n)), lambda _: None)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():  # B != 0: the adapters' A get gradients and the policy differs from its reference
        for name, p in pol.named_parameters():
            if "lora_B" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    return pol


def roles_of(pol) -> list[RoleRows]:
    """Two roles (3 x 2 and 3 x 3 rows, the second's rows unevenly split over 2 ranks), the same on every rank."""
    gen = torch.Generator().manual_seed(7)
    out = []
    for name, samples, weight, beta in (("propose", 2, 0.5, 0.05), ("solve", 3, 1.0, 0.1)):
        ro = rollout(pol.lm, pol.tokenizer, PROMPTS, samples=samples, max_new_tokens=8, max_prompt_tokens=32,
                     temperature=0.9, micro_batch=4, generator=gen)
        ro.old_logp = ro.old_logp + 0.05 * torch.randn(ro.old_logp.shape, generator=gen) * ro.response_mask
        out.append(RoleRows(ro, torch.randn(ro.rows, generator=gen), weight, beta, name))
    return out


def settings(kl: float, sharding=None) -> UpdateSettings:
    # max_grad_norm far above the norm: the clip's norm is computed (over shards) but scales nothing, so a
    # gradient summed wrong (e.g. averaged over the ranks) shows in the weights and moments
    return UpdateSettings(micro_batch=2, chunk_tokens=4, log_ratio_clip=5.0, kl_reference=kl, max_grad_norm=1e3,
                          sharding=sharding)


def local_roles(roles: list[RoleRows], sharding, skip_rank1_propose: bool) -> list[RoleRows]:
    from trmkit.rl.lm_objective import slice_rollout

    out = []
    for role in roles:
        lo, hi = sharding.share(role.rollout.rows)
        if skip_rank1_propose and role.name == "propose":  # rank 0 holds every propose row, rank 1 none
            lo, hi = (0, role.rollout.rows) if sharding.rank == 0 else (0, 0)
        if hi > lo:
            out.append(RoleRows(slice_rollout(role.rollout, slice(lo, hi)), role.advantages[lo:hi], role.weight,
                                role.beta, role.name, total_rows=role.rollout.rows))
    return out


def rank_main(rank: int, port: int, lora: int, steps: int, kind: str, out: str) -> None:
    from trmkit.rl.lm import fsdp

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    pol = build(lora)
    roles = roles_of(pol)
    pol.sharding = fsdp.shard(pol.lm, rank, 2, bool(lora), lambda _: None)
    opt = fsdp.ShardedOptimizer(optimizer(pol.trained().values(), kind), pol.sharding)
    micro, norms = MicroBatch(2), []
    for step in range(steps):
        mine = local_roles(roles, pol.sharding, skip_rank1_propose=step == 1)
        metrics = update(pol.lm, opt, mine, settings(0.05 if lora else 0.0, pol.sharding), micro, log=lambda _: None)
        norms.append((metrics["grad_norm"], metrics["loss"], metrics["tokens_updated"]))
    weights = {k: v.clone() for k, v in pol.state_dict().items()}  # every rank: the gathers are collectives
    moments = {f"{id_}.{k}": v.clone() for id_, (_, st) in enumerate(opt.state.items()) for k, v in st.items()}
    torch.save({"weights": weights, "moments": moments, "norms": norms}, os.path.join(out, f"rank{rank}.pt"))
    torch.distributed.destroy_process_group()


def spawn(lora: int, steps: int, kind: str, out) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=rank_main, args=(r, port, lora, steps, kind, str(out))) for r in range(2)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(JOIN_S)
    finally:
        alive = [p for p in procs if p.is_alive()]
        for p in alive:
            p.kill()
            p.join(10)
    assert not alive, f"a rank did not finish within {JOIN_S} s (hung in a collective?)"
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


@functools.lru_cache(maxsize=None)
def one_process(lora: int, steps: int, kind: str) -> tuple[dict, dict, list]:
    pol = build(lora)
    roles = roles_of(pol)
    opt = optimizer(pol.trained().values(), kind)
    micro, norms = MicroBatch(2), []
    for _ in range(steps):
        metrics = update(pol.lm, opt, roles, settings(0.05 if lora else 0.0), micro, log=lambda _: None)
        norms.append((metrics["grad_norm"], metrics["loss"], metrics["tokens_updated"]))
    moments = {f"{i}.{k}": v.clone() for i, (_, st) in enumerate(opt.state.items()) for k, v in st.items()}
    return {k: v.clone() for k, v in pol.state_dict().items()}, moments, norms


@pytest.mark.parametrize("lora,steps,kind", [(4, 2, "adamw"), (0, 1, "sgd")])
def test_two_ranks_update_equals_one_process(tmp_path, lora, steps, kind):
    """LoRA and a full fine-tune (tied embeddings: the root unit's gradients); the second step gives rank 0
    every propose row and rank 1 none of them."""
    ranks = spawn(lora, steps, kind, tmp_path)
    weights, moments, norms = one_process(lora, steps, kind)
    for rank in ranks:  # the step's gradient norm, loss and tokens are the whole step's on every rank
        for got, want in zip(rank["norms"], norms):
            assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    start = build(lora).state_dict()
    assert set(ranks[0]["weights"]) == set(weights)  # the same names: checkpoints load at any world size
    for name, w in weights.items():
        assert torch.equal(ranks[0]["weights"][name], ranks[1]["weights"][name]), name  # both ranks agree
        assert ranks[0]["weights"][name].shape == w.shape
        torch.testing.assert_close(ranks[0]["weights"][name], w, rtol=0, atol=1e-5)
    assert any(not torch.equal(weights[n], start[n]) for n in weights)  # the step moved something
    for key, m in moments.items():  # the optimizer state, whole, as a checkpoint writes it
        torch.testing.assert_close(ranks[0]["moments"][key], m, rtol=0, atol=1e-5)


CONFIG = Path(__file__).resolve().parents[2] / "configs" / "selfplay-lm-tiny.yaml"
SMALL = ["rl.model_shape=tiny", "rl.lora_rank=4", "rl.checkpoint_layers=all", "rl.max_prompt_tokens=96",
         "rl.max_response_tokens=12", "rl.tasks_per_type=2", "rl.attempts=2", "rl.proposer_share=1.0",
         "rl.critiques_per_type=1", "rl.eval_per_type=2", "rl.heldout_per_type=20", "rl.buffer_size=8",
         "train.batch_size=6", "train.max_minutes=0", "train.eval_every=0", "train.checkpoint_minutes=0",
         "run.threads=1", "run.dtype=float32", "rl.micro_batch=4", "train.log_every=1", "train.warmup_steps=0",
         "train.checkpoint_every=1"]
RUN_S = 300  # the 2-process command; killed with its process group past it


def run_cli(args: list[str]) -> subprocess.CompletedProcess:
    """`python -m trmkit ARGS` in its own process group, killed whole (torchrun and its ranks) on a timeout."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "trmkit", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"`trmkit {' '.join(args[:2])} --nproc 2` ran past {RUN_S} s:\n{out[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out)


def test_rl_train_on_two_processes_finishes_and_a_one_process_resume_continues(tmp_path):
    """`trmkit rl train --nproc 2` runs a round and saves whole adapters under the 1-process names (the start line
    says the sharding); `trmkit rl train --resume` in one process continues from that checkpoint."""
    from safetensors.torch import load_file

    run_dir = tmp_path / "two"
    done = run_cli(["rl", "train", str(CONFIG), *SMALL, "train.max_steps=1", f"run.dir={run_dir}", "--nproc", "2"])
    assert done.returncode == 0, done.stdout[-3000:]
    assert "sharded with FSDP2 fully_shard over 2 processes" in done.stdout
    assert "sampling seeds [0, 1000003]" in done.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 1
    every = policy_mod.build(BASE, "float32", 4, None, lambda n: [], lambda _: None)  # LoRA on every projection
    names = set(every.state_dict())
    assert set(load_file(str(run_dir / "weights.safetensors"))) == names  # whole tensors, the 1-process names
    again = run_cli(["rl", "train", "--resume", str(run_dir), "train.max_steps=2"])
    assert again.returncode == 0, again.stdout[-3000:]
    assert "resume: the checkpoint was written by 2 process(es)" in again.stdout
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 2
