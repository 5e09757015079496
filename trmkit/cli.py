"""The `trmkit` command: the only place that reads argv and the environment.

Subcommands are a plain dict of name -> (add_arguments, run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from trmkit import config as config_mod
from trmkit.adapt.arguments import add_arguments as _add_adapt  # argparse only: no torch before a command runs
from trmkit.config import ConfigError
from trmkit.errors import one_line


def _cache_dir() -> Path:
    from trmkit.api import cache_dir

    return cache_dir()


def _add_data(p: argparse.ArgumentParser) -> None:
    from trmkit import registry
    from trmkit.api import add_data_arguments

    for problem in registry.load_plugins():  # third-party tasks (entry points "trmkit.tasks")
        print(f"trmkit: {problem}", file=sys.stderr)
    sub = p.add_subparsers(dest="task", required=True)
    for name, task in registry.TASKS.items():
        add_data_arguments(sub.add_parser(name, help=task.summary, description=task.summary), task)


def _run_data(args: argparse.Namespace) -> int:
    from trmkit import registry
    from trmkit.api import build_store, data_options

    task = registry.get(args.task)
    build_store(task, data_options(task, args), print)
    return 0


def _add_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="YAML preset, e.g. configs/sudoku-laptop.yaml")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.max_steps=200 run.dir=runs/a")
    p.add_argument("--resume", metavar="RUN_DIR", default=None,
                   help="continue the run in RUN_DIR from its newest valid checkpoint (a run.dir that already "
                        "holds a run is never resumed without it)")
    p.add_argument("--force", action="store_true",
                   help="start afresh in a run.dir that already holds a run: its checkpoints, weights, summary, "
                        "metrics and report are deleted once the new run is checked, before it writes (other "
                        "files there stay)")
    p.add_argument("--memory-budget", default=None,
                   help="peak memory the run may use: 6GB, 6GiB, 512MB (overrides run.memory_budget); "
                        "with several processes on one machine, theirs together")
    p.add_argument("--minutes", type=float, default=None, metavar="N",
                   help="train for N minutes: the number of steps and the learning-rate schedule are fitted to N "
                        "minutes on this machine from the measured step time (train.max_minutes=N "
                        "train.fit_to_time=true)")
    p.add_argument("--nproc", type=int, default=0, metavar="N",
                   help="train with N processes on this machine: runs `torchrun --standalone --nproc-per-node N "
                        "-m trmkit train ...` (docs/distributed.md)")


def _train_config(args: argparse.Namespace) -> config_mod.Config:
    from trmkit.api import DEFAULT_CONFIG, minutes_overrides
    from trmkit.registry import SECTIONS
    from trmkit.train.resume import load_for_run

    return load_for_run(args.config, list(args.overrides) + minutes_overrides(args.minutes), args.resume,
                        DEFAULT_CONFIG, SECTIONS)


def _launch(nproc: int) -> int:
    """`trmkit train --nproc N ...`: the same command under torchrun, N processes on this machine."""
    from trmkit.train.distributed import torchrun_command

    cmd = torchrun_command(sys.executable, sys.argv[1:], nproc)
    print("launch: " + " ".join(cmd[1:]), flush=True)
    os.execv(sys.executable, cmd)
    return 0  # not reached


def _run_train(args: argparse.Namespace, work=None) -> int:
    """`work(world)` (default: `trmkit train`) in this process, under torchrun's world, or relaunched by --nproc N."""
    from trmkit.train import distributed

    world, work = distributed.world_from_env(os.environ), work or (lambda w: _train(args, w))
    if args.nproc and not world.active:
        return _launch(args.nproc)
    if world.active:
        _leave_after(lambda: work(world))
    return work(world)


def _train(args: argparse.Namespace, world) -> int:
    from trmkit import rundir
    from trmkit.api import run_training
    from trmkit.data.hints import MissingStore
    from trmkit.train import distributed

    cfg = _train_config(args)
    log = print if world.main else (lambda *a, **k: None)  # rank 0 speaks for the run; errors still raise
    try:
        result = run_training(cfg, world, log, is_tty=sys.stdout.isatty() and world.main,
                              resume=bool(args.resume), force=args.force)
    except MissingStore as err:  # the preset's comments say how its own store is built
        raise err.for_config(args.config) from None
    except RuntimeError as err:
        if not (world.active and distributed.is_peer_failure(err)):
            raise
        print(f"trmkit train: rank {world.rank}: another process of this run stopped or stopped answering "
              f"({str(err).splitlines()[0][:160]}); this one stops too. The newest checkpoint in "
              f"{cfg.run.dir}/{rundir.CHECKPOINTS} is intact: resume with "
              f"`torchrun --nproc-per-node {world.local_size} "
              f"-m trmkit train --resume {cfg.run.dir}`", file=sys.stderr, flush=True)
        return 3
    return int(result.get("exit_code", 0))  # 130 / 143: stopped by SIGINT / SIGTERM, saved


def _leave_after(work) -> None:
    """Run one rank's work, then end the process with os._exit, on success, on an error and after
    a stop signal (the loop saves and returns on SIGINT/SIGTERM first).

    Why not a normal exit: when the interpreter tears down, DDP's Reducer is freed with the GIL
    held; its destructor drops the last reference to the gloo process group, whose destructor
    joins a gloo worker thread; that thread can be destroying an asynchronous allgather that
    needs the GIL to drop a Python tensor: a deadlock that kept a finished run alive until
    torchrun gave up. Everything the run writes is fsync'd and closed before this
    point (checkpoints, weights, summary, metrics), so skipping the teardown loses nothing;
    stdout and stderr are flushed here."""
    import traceback

    try:
        code = work()
    except SystemExit as err:
        code = err.code if isinstance(err.code, int) else 1
    except BaseException as err:  # noqa: BLE001 - any failure: said in one line where expected, else as Python would
        said = one_line(err) if isinstance(err, Exception) else None
        if said is None:
            traceback.print_exc()
        else:
            print(f"trmkit train: {said}", file=sys.stderr)
        code = 1 if said is None else 2
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _add_eval(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory written by `trmkit train`")
    p.add_argument("overrides", nargs="*", help="dotted overrides of the run's config for this evaluation, e.g. "
                                                "run.threads=1 run.dtype=float32")
    p.add_argument("--data", default=None, help="dataset directory (default: the run's data.path)")
    p.add_argument("--verbose", action="store_true", help="also print the plan's choices (threads, dtype, batch)")
    p.add_argument("--limit", type=int, default=None, help="evaluate at most N test examples")
    p.add_argument("--checkpoint", type=int, default=None, metavar="STEP",
                   help="evaluate the run's checkpoint of STEP (its EMA weights) instead of its final weights, "
                        "e.g. a point of a learning curve (RUN_DIR/checkpoints/step-STEP)")
    p.add_argument("--memory-budget", default=None,
                   help="peak memory the evaluation may use: 2GB, 2GiB, 512MB (overrides run.memory_budget)")
    p.add_argument("--steps", default=None, metavar="K[,K...]|auto[:CAP]",
                   help="supervision steps per example (more thinking at test time; default: the run's N_sup); "
                        "several, e.g. 8,16,32,64, give a curve in one pass (the cost of the largest K; each K's "
                        "seconds the time to reach it), kept in RUN_DIR/eval_steps.json for the report; "
                        "`auto`: each example stops once its answer has not changed for 2 consecutive steps, or at "
                        "CAP steps (default 4 x the trained N_sup), and the steps used (mean, max) are reported "
                        "beside the accuracy (measured on two models: docs/results.md)")
    p.add_argument("--vote", default=None, metavar="N[,N...]",
                   help="also solve N symmetric variants of each example (a maze's turns and mirror images, a "
                        "Sudoku's band shuffles and digit relabellings), undo them and vote; a ballot that breaks "
                        "the task's rules is not counted. Reported apart from the one-shot figures; several, "
                        "e.g. 1,2,4,8, give a curve with the seconds each costs")
    p.add_argument("--pool", nargs="?", const="listed", default=None, choices=["listed", "every"],
                   help="with --steps K1,K2,... and --vote N: also one vote over every variant's answer at every K "
                        "(N x len(K) ballots); `--pool every`: at every K from the smallest to the largest of --steps "
                        "(the answers between them cost one check each, no more network calls)")
    p.add_argument("--select", type=int, default=None, metavar="N",
                   help="also solve each example N times (1..16) and keep the answer of the trajectory whose halting "
                        "head gives the largest final logit: no verifier, no label. Trajectory 0 is the one-shot "
                        "run; the others start from the initial carry plus Gaussian noise (std 0.5, fixed seed) "
                        "and/or solve the task's symmetric variants (--select-from). Runs at the one K of --steps "
                        "(default the trained N_sup; not with --steps auto). Reported under select/... beside the "
                        "one-shot figures, with a plurality over the N answers apart under plurality/..., each "
                        "with its seconds. Measured on the hardest 17-clue Sudoku: 0.821 one-shot -> 0.987 with 16 "
                        "variants (docs/results.md)")
    p.add_argument("--select-from", default="noise", choices=["noise", "variants", "both"],
                   help="with --select: what makes the N trajectories differ: noise in the initial carry "
                        "(default), the task's symmetric variants (as --vote, without its rule check), or both")
    p.add_argument("--checker", nargs="?", const="", default=None, metavar="FILE.py:FUNCTION",
                   help="also the share of the test problems whose one-shot answer a checker accepts, no label "
                        "read (puzzles with several solutions, or a store without labels): alone, the task's own "
                        "rules (Sudoku, maze); on a `trmkit data pairs` store your function(input, output) -> bool")


def _run_eval(args: argparse.Namespace) -> int:
    from trmkit.api import evaluate

    result = evaluate(args.run_dir, args.data, steps=args.steps, vote=args.vote, pool=args.pool,
                      checkpoint=args.checkpoint, limit=args.limit, overrides=args.overrides, select=args.select,
                      select_from=args.select_from, checker=args.checker, verbose=args.verbose)
    print(json.dumps(result, indent=2))  # stdout carries only the JSON result; notes go to stderr
    return 0


def _add_email(p: argparse.ArgumentParser) -> None:
    from trmkit.email import commands

    commands.add_arguments(p)


def _run_email(args: argparse.Namespace) -> int:
    from trmkit.email import commands

    args.cache_dir = _cache_dir()  # the environment is read here only
    return commands.run(args)


def _add_rl(p: argparse.ArgumentParser) -> None:
    from trmkit.rl import commands

    commands.add_arguments(p)


def _run_rl(args: argparse.Namespace) -> int:
    from trmkit.rl import commands

    args.cache_dir = _cache_dir()  # the environment is read here only
    if args.rl_command == "train":  # an LM policy's self-play runs on several processes as `trmkit train` does
        return _run_train(args, lambda world: commands.run(argparse.Namespace(**vars(args), world=world)))
    return commands.run(args)


def _run_adapt(args: argparse.Namespace) -> int:
    from trmkit import api, registry
    from trmkit.adapt import command
    return command.run(args, _cache_dir(), command.Plugins(registry.get, registry.SECTIONS, api.task_hooks))


def _add_predict(p: argparse.ArgumentParser) -> None:
    from trmkit.predict.arguments import add_arguments  # imports no torch (trmkit/predict/__init__.py neither)

    add_arguments(p)


def _run_predict(args: argparse.Namespace) -> int:
    from trmkit.predict.command import run

    return run(args, _cache_dir())  # the environment is read here only


def _add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory written by `trmkit train`")


def _task_plots(run_dir: Path):
    """The plots of the task the run was trained on (data_meta.json's "task"); None: generic plots only."""
    from trmkit import registry, rundir

    name = rundir.task_of(run_dir)  # None: a run from before data_meta.json, or not a training run
    return registry.TASKS[name].plots if name in registry.TASKS else None


def _run_report(args: argparse.Namespace) -> int:
    from trmkit.report import MissingMetricsError, write_report

    try:
        paths = write_report(args.run_dir, plots=_task_plots(Path(args.run_dir)))
    except MissingMetricsError as err:
        raise ConfigError(str(err)) from err
    for path in paths:
        print(path)
    return 0


def _add_runs(p: argparse.ArgumentParser) -> None:
    p.add_argument("root", nargs="?", default="runs", help="directory holding run directories")


def _run_runs(args: argparse.Namespace) -> int:
    from trmkit.report import format_runs, list_runs

    print(format_runs(list_runs(args.root)))
    return 0


def _add_plan(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="YAML preset, e.g. configs/laptop-16gb.yaml")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.batch_size=384")
    p.add_argument("--memory-budget", default=None,
                   help="peak memory the run may use: 6GB, 6GiB, 512MB (overrides run.memory_budget)")
    p.add_argument("--memory-limit", default=None,
                   help="plan as if this process ran alone under this memory limit, e.g. 8GB (simulation)")
    p.add_argument("--calibrate", action="store_true",
                   help="measure two real steps to fit the memory model (cached per config and torch)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")


def _run_plan(args: argparse.Namespace) -> int:
    from trmkit import hardware, plan
    from trmkit.registry import SECTIONS
    from trmkit.train.session import fill_from_meta, open_splits

    cfg = config_mod.load(args.config, args.overrides, SECTIONS)
    if cfg.data.path and (Path(cfg.data.path) / "train").is_dir():
        cfg = fill_from_meta(cfg, open_splits(cfg.data.path)[0])
    hw = hardware.probe()
    if args.memory_limit:
        hw = plan.with_memory_limit(hw, config_mod.parse_size(args.memory_limit))

    def log(line: str) -> None:  # the report repeats the choices; measurements are announced
        if args.json:
            print(line, file=sys.stderr)
        elif not line.startswith("plan: "):
            print(line)

    result = plan.make_plan(cfg, hw, cache_dir=_cache_dir(), log=log,
                            calibrate=args.calibrate)
    print(json.dumps(result.to_dict(), indent=2) if args.json else plan.plan_report(result))
    return 0


def _add_hw(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the probe as JSON")


def _run_hw(args: argparse.Namespace) -> int:
    from trmkit import hardware

    info = hardware.probe()
    print(json.dumps(info.to_dict(), indent=2) if args.json else hardware.format_report(info))
    return 0


def _add_bench(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="YAML preset, e.g. configs/bench-tiny.yaml")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.batch_size=32 run.dtype=bfloat16")
    p.add_argument("--json", action="store_true", help="print one JSON dict (progress goes to stderr)")
    p.add_argument("--steps", type=int, default=5, help="timed training steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (torch.compile runs here)")
    p.add_argument("--compare", metavar="BASELINE.json", default=None,
                   help="exit 1 if MFU fell or MB per slot rose by more than --tolerance")
    p.add_argument("--tolerance", type=float, default=0.1, help="relative change allowed by --compare")
    p.add_argument("--save", metavar="OUT.json", default=None, help="write the result as a baseline (over an earlier "
                                                                       "one; over another file only with --force)")
    p.add_argument("--force", action="store_true", help="let --save replace a file that is not a saved result, "
                                                        "and --keep write into a folder that holds a run")
    p.add_argument("--no-memory", action="store_true",
                   help="skip the MB-per-slot probe (two fresh processes, two steps each)")
    p.add_argument("--memory-budget", default=None,
                   help="peak memory the benchmark may use (6GB, 6GiB): its step must fit, as a training run's must")
    p.add_argument("--compile-target", choices=("net", "model"), default="net",
                   help="with run.compile=on: compile model.net or the whole model")
    p.add_argument("--all-peaks", action="store_true",
                   help="sample the matmul peak of every dtype, even bf16 on a CPU that only emulates it (slow)")
    p.add_argument("--rl", action="store_true",
                   help="time self-play rounds of a `trmkit rl` preset instead: rollout and update tokens/s, "
                        "peak RSS (with --steps/--warmup rounds)")
    p.add_argument("--init", metavar="RUN_DIR", default=None, help="with --rl: start from a run's weights")
    p.add_argument("--learn", type=float, metavar="MINUTES", default=None,
                   help="instead of timing steps: train CONFIG for MINUTES of training time on a fixed "
                        "generated Sudoku set (1000 puzzles with 24-26 givens x 100 augmentations, 200 held out) "
                        "and report held-out blank-cell and exact-puzzle accuracy along the way")
    p.add_argument("--every", metavar="MINUTES", default=None,
                   help="with --learn: evaluate every MINUTES of training time (default: --learn / 4), "
                        "or at a list of marks, e.g. 15,30 (and always at the end)")
    p.add_argument("--data-dir", default=None,
                   help="with --learn: where the fixed set is built or reused (default: data/learn-TASK)")
    p.add_argument("--task", default=None,
                   help="with --learn: the task whose fixed set is measured (default sudoku; maze: 10,000 + 500 "
                        "generated 15 x 15 mazes with shortest paths >= 28 steps, x8 symmetries)")
    p.add_argument("--keep", metavar="DIR", default=None,
                   help="with --learn: write the final weights and config to DIR, a run directory for `trmkit eval` "
                        "(not into a folder that holds a trained run, unless --force)")
    p.add_argument("--target", metavar="METRIC=VALUE", default=None,
                   help="with --learn: stop at the first evaluation where METRIC reaches VALUE and report the "
                        "training minutes and steps it took, e.g. exact_accuracy=0.825")
    p.add_argument("--schedule", choices=("budget", "config"), default=None,
                   help="with --learn: 'budget' (default) fits train.max_steps, and with it the lr cosine, "
                        "to MINUTES from the speed of the first 30 s; 'config' keeps the config's")


def _run_bench(args: argparse.Namespace) -> int:
    from trmkit import bench
    from trmkit.registry import SECTIONS

    cfg = config_mod.load(args.config, args.overrides, SECTIONS)
    log = (lambda m: print(m, file=sys.stderr, flush=True)) if args.json else print
    if args.rl:  # self-play throughput (trmkit/rl/bench.py)
        from trmkit import hardware
        from trmkit.rl import bench as rl_bench

        result = rl_bench.run_rl_bench(cfg, hardware.probe(), args.steps, args.warmup, args.init, log=log,
                                       cache_dir=_cache_dir())
        print(json.dumps(result) if args.json else "\n".join(rl_bench.format_lines(result)))
        return 0
    if args.init is not None:
        raise ConfigError("--init applies to --rl only")
    if args.learn is not None:  # accuracy per CPU-hour (trmkit/learn.py)
        from trmkit import hardware, learn, registry

        if args.compare or args.save:
            raise ConfigError("--compare and --save apply to the step benchmark, not to --learn")
        target = learn.parse_target(args.target)
        points = learn.learning_curve(cfg, hardware.probe(), args.learn, learn.parse_every(args.every),
                                      args.data_dir, log=log, cache_dir=_cache_dir(),
                                      schedule=args.schedule or "budget", task=registry.get(args.task or "sudoku"),
                                      keep=args.keep, target=target, force=args.force)
        print(json.dumps(learn.to_json(points), indent=2) if args.json else "\n".join(learn.format_table(points)))
        if target is not None:
            log(learn.time_to_target(points, target))
        return 0
    if any(v is not None for v in (args.every, args.data_dir, args.schedule, args.task, args.keep, args.target)):
        raise ConfigError("--every, --data-dir, --schedule, --task, --keep and --target need --learn MINUTES")
    baseline = bench.load_result(args.compare) if args.compare else None  # fail before the long run
    if args.save:
        bench.results.check_save(args.save, args.force)
    result = bench.run_bench(cfg, steps=args.steps, warmup=args.warmup, memory=not args.no_memory,
                             compile_target=args.compile_target, log=log, cache_dir=str(_cache_dir()),
                             all_peaks=args.all_peaks)
    if args.save:
        bench.save_result(result, args.save)
    ok, lines = bench.compare(result, baseline, args.tolerance) if baseline else (True, [])
    if args.json:
        print(json.dumps({**result, "compare": {"ok": ok, "lines": lines}} if baseline else result))
    else:
        print("\n".join(bench.format_lines(result) + [f"compare: {line}" for line in lines]))
        if args.save:
            print(f"saved {args.save}")
    return 0 if ok else 1


COMMANDS = {
    "data": ("build a data store", _add_data, _run_data),
    "train": ("train a TRM from a YAML config", _add_train, _run_train),
    "eval": ("evaluate a trained run on a test split", _add_eval, _run_eval),
    "email": ("e-mail: predict, sort, export, serve, baseline, weak-label, label", _add_email, _run_email),
    "predict": ("answer new inputs with a Sudoku, maze or pairs run, in the inputs' form", _add_predict,
                _run_predict),
    "adapt": ("learn a new source from a checker: unlabelled problems in, one-shot skill out", _add_adapt, _run_adapt),
    "rl": ("self-play RL on code tasks: seed, train (TR-RPG), eval", _add_rl, _run_rl),
    "report": ("write plots and a Markdown summary of a run", _add_report, _run_report),
    "runs": ("list the runs in a directory with their settings and results", _add_runs, _run_runs),
    "hw": ("probe this machine: cores, ISA, memory limits, torch build", _add_hw, _run_hw),
    "plan": ("show what a config will use on this machine, and why", _add_plan, _run_plan),
    "bench": ("time training steps: samples/s, MFU, MB per slot", _add_bench, _run_bench),
}


def _budget_as_override(args: argparse.Namespace) -> None:
    """--memory-budget B is the override run.memory_budget=B: the budget travels in the config
    (checked when it loads, written to the run directory) to the planner and the memory guard."""
    if not hasattr(args, "overrides"):
        args.overrides = []
    if getattr(args, "memory_budget", None):
        args.overrides = list(args.overrides) + [f"run.memory_budget={args.memory_budget}"]


def build_parser() -> argparse.ArgumentParser:
    from trmkit.version import __version__

    parser = argparse.ArgumentParser(prog="trmkit", description="Train Tiny Recursive Models on a laptop.")
    parser.add_argument("--version", action="version", version=f"trmkit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add, _) in COMMANDS.items():
        add(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # key=value overrides may also follow an option (trmkit rl train CONFIG --init RUN k=v)
        if not hasattr(args, "overrides") or not all("=" in e and not e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = list(args.overrides) + extra
    _budget_as_override(args)
    try:
        return COMMANDS[args.command][2](args)
    except Exception as err:
        line = one_line(err)
        if line is None:
            raise  # a bug: its traceback is what a report of it needs
        print(f"trmkit {_command(args)}: {line}", file=sys.stderr)
        return 2


def _command(args: argparse.Namespace) -> str:
    """The command as typed, for the start of an error line: "train", "email predict", "rl eval"."""
    sub = getattr(args, "email_command", None) or getattr(args, "rl_command", None)
    return f"{args.command} {sub}" if sub else args.command


if __name__ == "__main__":
    sys.exit(main())
