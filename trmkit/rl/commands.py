"""`trmkit rl seed | train | eval` (the CLI dispatches here; docs/rl.md).

seed and train are the one trainer (train/loop.py) with an objective in place of a store:
the plan, memory guard, checkpoints, exact resume, progress, evaluation and summary are
the same as for every other workload.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trmkit import config as config_mod
from trmkit import rundir
from trmkit.config import ConfigError
from trmkit.rl.config import APPS, rl_config
from trmkit.train.hooks import Hooks

RL_TASK = "selfplay-code"  # data_meta.json's "task" of a seeding or self-play run (rl/objective.py's identity)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="rl_command", required=True)
    for name, text in (("seed", "trajectory seeding (SFT on executor traces) before self-play"),
                       ("train", "self-play with TR-RPG: propose / solve / critique, rewards by execution")):
        s = sub.add_parser(name, help=text, description=text)
        s.add_argument("config", nargs="?", help="YAML preset, e.g. configs/selfplay-laptop.yaml")
        s.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.max_minutes=30 run.dir=runs/sp")
        s.add_argument("--init", metavar="RUN_DIR", default=None,
                       help="start from the weights of a finished run (e.g. the seeding run)")
        s.add_argument("--resume", metavar="RUN_DIR", default=None,
                       help="continue the run in RUN_DIR from its newest valid checkpoint")
        s.add_argument("--force", action="store_true",
                       help="start afresh in a run.dir that already holds a run (its checkpoints, weights, summary "
                            "and metrics are deleted once the new run is checked, before it writes)")
        s.add_argument("--memory-budget", default=None, help="peak memory the run may use: 6GB, 512MB")
        if name == "train":
            s.add_argument("--nproc", type=int, default=0, metavar="N",
                           help="an LM policy's self-play (rl.policy=lm) on N processes of this machine, the "
                                "policy sharded with FSDP: runs `torchrun --standalone --nproc-per-node N -m trmkit rl "
                                "train ...` (docs/distributed.md)")
    s = sub.add_parser("eval", help="held-out solve rate by execution: all, without shortcuts, per type and slice")
    s.add_argument("run_dir", help="a finished `trmkit rl seed` or `trmkit rl train` run")
    s.add_argument("--json", action="store_true", help="print only the JSON result on stdout (with the per-task "
                   "results, \"solved\", for `trmkit rl compare`)")
    s.add_argument("--step", default=None, help="score the run's checkpoint of this step instead of its final "
                   "weights; 'best': the one its evaluations chose (checkpoints/best.json)")
    s.add_argument("--verbose", action="store_true", help="also print the plan's lines (threads, dtype, budget)")
    s.add_argument("--seed-files", default=None, metavar="PATHS",
                   help="an LM policy's run (rl.policy=lm): also score the held-out AZR seed programs of these "
                        "comma-separated jsonl files (rl.seed_files)")
    s = sub.add_parser("memory", help="an LM policy's round: what each memory switch saves (the memory model, "
                       "beside a benchmark's measured peaks)")
    s.add_argument("--shape", default="qwen2.5-0.5b", help="a named shape: tiny, small, qwen2.5-0.5b, qwen2.5-1.5b, "
                   "llama-3.2-1b")
    s.add_argument("--batch", type=int, default=8, help="rows per micro-batch")
    s.add_argument("--prompt-len", type=int, default=256)
    s.add_argument("--response-len", type=int, default=256)
    s.add_argument("--rank", type=int, default=16, help="LoRA r")
    s.add_argument("--chunk", type=int, default=1024, help="response tokens per lm_head chunk")
    s.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"), help="the efficient arm's weights")
    s.add_argument("--measured", nargs="+", default=(), metavar="JSON", help="benchmarks/rl_lm_memory.py --json "
                   "outputs: their measured peaks beside the estimates")
    s.add_argument("--json", action="store_true", help="print the table as JSON")
    s = sub.add_parser("heldout", help="rebuild the stored held-out set and check it (or --write it)")
    s.add_argument("--write", action="store_true", help="write trmkit/rl/heldout.json from its fixed seed")
    s = sub.add_parser("compare", help="two `rl eval --json` results on the same tasks: paired differences")
    s.add_argument("before", help="JSON of `trmkit rl eval RUN --json` (the baseline)")
    s.add_argument("after", help="JSON of the other run")


def run(args: argparse.Namespace) -> int:
    return {"seed": run_training, "train": run_training, "eval": run_eval, "heldout": run_heldout,
            "compare": run_compare, "memory": run_memory}[args.rl_command](args)


def run_memory(args: argparse.Namespace) -> int:
    """`trmkit rl memory`: the memory model's table of one round per switch (trmkit/rl/lm/memory_table.py)."""
    from trmkit.rl.lm.memory_table import table

    for name in ("batch", "prompt_len", "response_len", "rank", "chunk"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')}={getattr(args, name)} must be >= 1")
    try:
        lines, rows = table(args.shape, args.batch, args.prompt_len, args.response_len, args.rank, args.chunk,
                            args.dtype, args.measured)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    print(json.dumps(rows, indent=2) if args.json else "\n".join(lines))
    return 0


def load_config(args: argparse.Namespace) -> config_mod.Config:
    from trmkit.train.resume import load_for_run

    # with --resume, a run of `trmkit train` (or of the other rl command) is refused, naming its own command
    return load_for_run(args.config, args.overrides, args.resume, "configs/selfplay-laptop.yaml", APPS,
                        command=f"rl {args.rl_command}")


def make_objective(kind: str, cfg: config_mod.Config, log=print):
    from trmkit.rl.seed import SeedObjective
    from trmkit.rl.selfplay import SelfPlayObjective

    if rl_config(cfg).policy == "lm":
        return make_lm_objective(kind, cfg, log)
    if cfg.model.mixer != "attention":
        raise ConfigError(f"model.mixer={cfg.model.mixer!r}: the policy's (role, type) groups have different "
                          "lengths, which only mixer=attention reads; set model.mixer=attention")
    if cfg.model.puzzle_emb_len:
        log(f"rl: model.puzzle_emb_len={cfg.model.puzzle_emb_len} -> 0 (code tasks have no per-puzzle identity)")
        cfg = config_mod.replace(cfg, "model", puzzle_emb_len=0)
    if cfg.run.compile != "off":
        log(f"rl: run.compile={cfg.run.compile} -> off (each (role, type) group has its own length; a compiled "
            "model would recompile for each)")
        cfg = config_mod.replace(cfg, "run", compile="off")
    return (SeedObjective if kind == "seed" else SelfPlayObjective)(cfg, log), cfg


def make_lm_objective(kind: str, cfg: config_mod.Config, log=print):
    """rl.policy=lm: the causal-LM objectives (rl/lm_objective.py); `rl eval` uses the seeding one (no round)."""
    from trmkit.rl.lm_objective import LMSeedObjective, LMSelfPlayObjective

    if cfg.run.memory_guard:
        log("rl: run.memory_guard -> off (the LM policy halves its own micro-batch on an allocation failure and "
            "redoes the step: rl/lm/update.py MicroBatch)")
        cfg = config_mod.replace(cfg, "run", memory_guard=False)
    if cfg.run.compile != "off":
        log(f"rl: run.compile={cfg.run.compile} -> off (the LM policy is not compiled)")
        cfg = config_mod.replace(cfg, "run", compile="off")
    return (LMSelfPlayObjective if kind == "train" else LMSeedObjective)(cfg, log), cfg


def init_from(session, run_dir: Path, log=print) -> None:
    """Start from a finished run's evaluation weights (model and EMA), not its optimizer."""
    path = rundir.load_weights(session.model, run_dir, session.ctx.device,
                               what=f"--init {run_dir}: let that run finish first")
    if session.opts.ema is not None:
        for name, p in session.model.named_parameters():
            session.opts.ema.shadow[name].copy_(p.detach().float())
    log(f"init: weights of {run_dir} ({path})")


class StartFrom(Hooks):
    """--init RUN_DIR: a new run starts from that run's weights (a resumed run has its own)."""

    def __init__(self, run_dir: Path, objective) -> None:
        self.run_dir, self.objective = run_dir, objective

    def on_start(self, s) -> None:
        from trmkit.rl.selfplay import SelfPlayObjective
        from trmkit.train import checkpoint

        if not checkpoint.list_checkpoints(s.cfg.run.dir):
            base = getattr(self.objective, "base", None)
            if base is not None:  # an LM policy: the adapters fit only the base they were trained on
                from trmkit.rl.lm.policy import check_base

                saved = json.loads(rundir.path(self.run_dir, rundir.DATA_META).read_text()).get("base") \
                    if rundir.path(self.run_dir, rundir.DATA_META).is_file() else None
                check_base(saved, base, f"--init {self.run_dir}")
            init_from(s, self.run_dir)
            if isinstance(self.objective, SelfPlayObjective):  # it measures how far it moves from the seed
                self.objective.set_reference(str(self.run_dir.resolve()))


def run_training(args: argparse.Namespace) -> int:
    from trmkit import hardware
    from trmkit.train.distributed import SINGLE
    from trmkit.train.run import run

    world = getattr(args, "world", SINGLE)  # several processes: the CLI read torchrun's environment
    log = print if world.main else (lambda *a, **k: None)  # rank 0 speaks for the run; errors still raise
    cfg = load_config(args)
    objective, cfg = make_objective(args.rl_command, cfg, log)
    hooks = StartFrom(Path(args.init), objective) if args.init else Hooks()
    try:  # the run.dir is claimed as by `trmkit train`: never resumed unasked
        result = run(cfg, hardware.probe(), hooks=hooks, cache_dir=args.cache_dir, objective=objective, world=world,
                     log=log, resume=bool(args.resume), force=args.force, is_tty=sys.stdout.isatty() and world.main)
    finally:
        objective.close()
    return int(result.get("exit_code", 0))  # 130 / 143: stopped by SIGINT / SIGTERM, saved


def run_eval(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not rundir.path(run_dir, rundir.CONFIG).is_file():
        raise ConfigError(f"{run_dir}: no {rundir.CONFIG} there; is it a run written by `trmkit rl seed|train`?")
    rundir.check_task(run_dir, RL_TASK, "a `trmkit rl seed|train` run: `trmkit eval RUN` evaluates it")
    extra = [f"rl.seed_files={args.seed_files}"] if getattr(args, "seed_files", None) else []
    cfg = config_mod.load(rundir.path(run_dir, rundir.CONFIG), [f"run.dir={run_dir}", *extra], APPS)
    log = (lambda m: print(m, file=sys.stderr)) if args.json else print  # noqa: E731
    if extra and rl_config(cfg).policy != "lm":  # before the objective starts its sandbox
        raise ConfigError(f"--seed-files: {run_dir} is a TRM policy's run (rl.policy=trm), whose tasks are the list "
                          "language; AZR seed programs are scored for an LM policy's run (rl.policy=lm)")
    objective, cfg = make_objective("eval", cfg, log)
    rl = objective.rl
    if rl.policy == "lm":
        return run_lm_eval(args, cfg, objective, log)
    objective.eval_per_type, objective.validation = rl.heldout_per_type, None  # the held-out set, not rl.pool_val's
    used = (f"the pool's last {rl.pool_val} tasks: rl.pool_val" if rl.pool_val else
            f"the first {rl.eval_per_type}: rl.eval_per_type")
    log(f"rl eval: all {rl.heldout_per_type} held-out tasks per type (the run's own evaluations used {used})")
    result = evaluate_run(args, cfg, objective, run_dir, log)
    if args.json:
        result["solved"] = "".join("1" if r else "0" for r in objective.last_outcomes)
        result["heldout"] = {"seed": rl.heldout_seed, "per_type": rl.heldout_per_type}
        result["weights"] = args.step or "final"
        print(json.dumps(result, indent=2))
    else:
        print(eval_table(result, rl.heldout_seed, rl.heldout_per_type))
    return 0


def evaluate_run(args: argparse.Namespace, cfg: config_mod.Config, objective, run_dir: Path, log) -> dict:
    """The run's weights (or --step's) scored by the objective's evaluation; the objective is closed after."""
    from trmkit import hardware
    from trmkit.plan import plan_lines_to
    from trmkit.train import evaluate
    from trmkit.train.session import prepare

    try:  # the plan's lines only with --verbose, as `trmkit eval` prints them
        session = prepare(cfg, hardware.probe(), log=plan_lines_to(log, getattr(args, "verbose", False)),
                          cache_dir=args.cache_dir, objective=objective)
        evaluate.load_weights(session, run_dir, checkpoint_step(run_dir, args.step, log))
        return evaluate.run_eval(session, log=log)
    finally:
        objective.close()


def run_lm_eval(args: argparse.Namespace, cfg: config_mod.Config, objective, log) -> int:
    """`trmkit rl eval` of an LM policy's run: every held-out task, greedy, solve rate per kind and source."""
    objective.eval_which = "all"
    result = evaluate_run(args, cfg, objective, Path(args.run_dir), log)
    if args.json:
        print(json.dumps({**result, "weights": args.step or "final"}, indent=2))
    else:
        print(lm_eval_table(result))
    return 0


def lm_eval_table(result: dict) -> str:
    """Solve rate (tasks) per kind and source, greedy, by execution in the sandbox."""
    lines = ["held-out solve rate by execution (greedy), per kind and source (builtin: the generated programs "
             "as Python; azr: the AZR seed programs held out)"]
    names = {"builtin", "azr", "deduction", "abduction", "induction"}  # per kind and source; slices: --json
    for key in sorted(k for k in result if k.split("/")[0] == "solve_rate" and set(k.split("/")[1:]) <= names):
        n = result.get("samples" + key[len("solve_rate"):])
        lines.append(f"{key:40s} {result[key]:.3f}" + (f" ({int(n)})" if n is not None else ""))
    for key in sorted(k for k in result if k.split("/")[0] == "unparsable" and set(k.split("/")[1:]) <= names):
        n = result.get("samples" + key[len("unparsable"):])  # answers in the format the parser reads
        lines.append(f"{'parsed' + key[len('unparsable'):]:40s} {1 - result[key]:.3f}" + (f" ({int(n)})" if n else ""))
    return "\n".join(lines)


def checkpoint_step(run_dir: Path, step: str | None, log) -> int | None:
    """--step N, or 'best' read from the run's checkpoints/best.json (None: the final weights)."""
    if step is None:
        return None
    if step == "best":
        from trmkit.train import checkpoint

        best = checkpoint.best_checkpoint(run_dir)
        if best is None:
            raise ConfigError(f"--step best: {run_dir} keeps no best checkpoint (set train.restore_best=true, or "
                              "give --step N)")
        number = checkpoint.step_of(best)
        log(f"rl eval: the best checkpoint, step {number} ({best})")
        return number
    if not step.isdigit():
        raise ConfigError(f"--step {step}: a checkpoint's step number, or 'best'")
    return int(step)


def _cell(result: dict, name: str) -> str:
    key = f"solve_rate/{name}" if name else "solve_rate"
    if key not in result:
        return "-"
    n = result[f"samples/{name}" if name else "samples"]
    return f"{result[key]:.3f} ± {result[key + '/se']:.3f} ({n})"


def eval_table(result: dict, seed: int, per_type: int) -> str:
    """The text of `trmkit rl eval`: the headline, then solve rate ± standard error (tasks) per type and slice."""
    from trmkit.rl import heldout
    from trmkit.rl import programs as P

    cols = ("", "nontrivial", "shortcut") + heldout.SLICES
    lines = [f"held-out set: seed {seed}, {per_type} tasks per type; shortcut tasks are left out of the headline",
             f"{'solve_rate/nontrivial':28s} {_cell(result, 'nontrivial')}   (the headline)",
             f"{'solve_rate':28s} {_cell(result, '')}   (all tasks)",
             f"{'':10s}" + "".join(f"{c or 'all':>22s}" for c in cols)]
    for kind in P.TYPES + ("",):
        cells = [_cell(result, "/".join(x for x in (kind, c) if x)) for c in cols]
        lines.append(f"{kind or 'all':10s}" + "".join(f"{c:>22s}" for c in cells))
    rest = [k for k in result if not k.startswith(("solve_rate", "samples"))]
    lines += [f"{k:28s} {result[k]:.4f}" for k in rest]
    return "\n".join(lines)


def run_heldout(args: argparse.Namespace) -> int:
    """Rebuild the stored held-out set from its seed; --write stores it, else it is compared with the file."""
    from trmkit.files import write_text
    from trmkit.rl import heldout

    items = heldout.build()
    text = heldout.dumps(items, heldout.SEED)
    if args.write:
        write_text(heldout.STORED, text)
        print(f"wrote {heldout.STORED} ({len(text):,} bytes)")
    elif not heldout.STORED.is_file() or heldout.STORED.read_text() != text:
        print(f"{heldout.STORED} differs from the set its seed builds: `trmkit rl heldout --write` rebuilds it")
        return 1
    else:
        print(f"{heldout.STORED}: the same as the set seed {heldout.SEED} builds")
    for key, value in heldout.shares(items).items():
        print(f"{key:34s} {value:.3f}")
    return 0


def _eval_result(path: Path) -> dict:
    """A `trmkit rl eval RUN --json` result; a ConfigError naming the file where it is missing or damaged."""
    if not path.is_file():
        raise ConfigError(f"{path} not found: write it with `trmkit rl eval RUN --json > {path}`")
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise ConfigError(f"{path} is damaged ({type(err).__name__}): write it again with "
                          f"`trmkit rl eval RUN --json > {path}`") from err
    if not isinstance(result, dict):
        raise ConfigError(f"{path} is not a `trmkit rl eval RUN --json` result")
    return result


def run_compare(args: argparse.Namespace) -> int:
    """Paired differences (after - before) with bootstrap standard errors, per type and slice."""
    from trmkit.rl import heldout
    from trmkit.rl.stats import paired_bootstrap

    runs = [_eval_result(Path(p)) for p in (args.before, args.after)]
    if any("solved" not in r for r in runs) or runs[0]["heldout"] != runs[1]["heldout"]:
        raise ConfigError("rl compare: both files must come from `trmkit rl eval RUN --json` on the same held-out set")
    spec = runs[0]["heldout"]
    items = heldout.for_config(spec["seed"], spec["per_type"], log=lambda m: print(m, file=sys.stderr))
    a, b = ([c == "1" for c in r["solved"]] for r in runs)
    if not len(a) == len(b) == len(items):
        raise ConfigError(f"rl compare: {len(a)} and {len(b)} results for a held-out set of {len(items)} tasks")
    print(f"{'group':28s} {'before':>7s} {'after':>7s} {'after - before':>16s} (paired bootstrap SE, tasks)")
    for name, idx in heldout.groups(items).items():
        if idx:
            before, after = [a[i] for i in idx], [b[i] for i in idx]
            diff, se = paired_bootstrap(before, after)
            print(f"{name or 'all':28s} {sum(before) / len(idx):7.3f} {sum(after) / len(idx):7.3f}"
                  f" {diff:+9.3f} ± {se:.3f} ({len(idx)})")
    return 0
