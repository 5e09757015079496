"""The `trmkit` command: the only place that reads argv and the environment.

Subcommands are a plain dict of name -> (add_arguments, run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trmkit import config as config_mod
from trmkit.config import ConfigError


def _add_data(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="task", required=True)
    s = sub.add_parser("sudoku", help="build a Sudoku store from a generator or a file")
    s.add_argument("--source", default="generate",
                   help="'generate', a plain-text collection (.txt) or a Sudoku-Extreme CSV")
    s.add_argument("--out", required=True, help="dataset directory to create (train/ and test/)")
    s.add_argument("--test-fraction", type=float, default=0.1, help="share of puzzles held out for test")
    s.add_argument("--aug", type=int, default=0, help="augmented copies per training puzzle")
    s.add_argument("--limit", type=int, default=None, help="read at most N puzzles from the source")
    s.add_argument("--num", type=int, default=1000, help="puzzles to generate (--source generate)")
    s.add_argument("--givens", default="24-26", help="givens per generated puzzle: N or A-B")
    s.add_argument("--min-guesses", type=int, default=0,
                   help="generated puzzles need at least this many solver guesses (harder)")
    s.add_argument("--allow-multiple", action="store_true",
                   help="keep puzzles with several solutions, labelled with the first one found")
    s.add_argument("--seed", type=int, default=0)


def _run_data(args: argparse.Namespace) -> int:
    from trmkit.data import sudoku

    try:
        sudoku.build_sudoku(
            source=args.source, out_dir=Path(args.out), test_fraction=args.test_fraction,
            aug=args.aug, limit=args.limit, num_generate=args.num, givens=args.givens,
            min_guesses=args.min_guesses, seed=args.seed, require_unique=not args.allow_multiple,
        )
    except (ValueError, FileExistsError, OSError) as err:
        raise ConfigError(str(err)) from err
    return 0


def _add_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="YAML preset, e.g. configs/sudoku-laptop.yaml")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.max_steps=200 run.dir=runs/a")
    p.add_argument("--resume", metavar="RUN_DIR", default=None,
                   help="continue the run in RUN_DIR from its newest valid checkpoint")


def _train_config(args: argparse.Namespace) -> config_mod.Config:
    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / "config.yaml").is_file():
            raise ConfigError(f"--resume {run_dir}: no config.yaml there; is it a run directory?")
        overrides = ([args.config] if args.config and "=" in args.config else []) + args.overrides
        return config_mod.load(run_dir / "config.yaml", overrides + [f"run.dir={run_dir}"])
    if not args.config:
        raise ConfigError("give a config (e.g. configs/sudoku-laptop.yaml) or --resume RUN_DIR")
    return config_mod.load(args.config, args.overrides)


def _run_train(args: argparse.Namespace) -> int:
    from trmkit.monitor import usable_cores
    from trmkit.train import loop

    session = loop.prepare(_train_config(args), usable_cores())
    loop.train(session, is_tty=sys.stdout.isatty())
    return 0


def _add_eval(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory written by `trmkit train`")
    p.add_argument("--data", default=None, help="dataset directory (default: the run's data.path)")
    p.add_argument("--limit", type=int, default=None, help="evaluate at most N test examples")


def _run_eval(args: argparse.Namespace) -> int:
    from trmkit.monitor import usable_cores
    from trmkit.train import loop

    run_dir = Path(args.run_dir)
    overrides = [f"run.dir={run_dir}"] + ([f"data.path={args.data}"] if args.data else [])
    cfg = config_mod.load(run_dir / "config.yaml", overrides)
    session = loop.prepare(cfg, usable_cores(), log=lambda m: print(m, file=sys.stderr))
    loop.load_weights(session, run_dir)
    print(json.dumps(loop.run_eval(session, args.limit), indent=2))
    return 0


def _add_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory written by `trmkit train`")


def _run_report(args: argparse.Namespace) -> int:
    from trmkit.report import MissingMetricsError, write_report

    try:
        paths = write_report(args.run_dir)
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


def _add_hw(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the probe as JSON")


def _run_hw(args: argparse.Namespace) -> int:
    from trmkit import hardware

    info = hardware.probe()
    print(json.dumps(info.to_dict(), indent=2) if args.json else hardware.format_report(info))
    return 0


COMMANDS = {
    "data": ("build a data store", _add_data, _run_data),
    "train": ("train a TRM from a YAML config", _add_train, _run_train),
    "eval": ("evaluate a trained run on a test split", _add_eval, _run_eval),
    "report": ("write plots and a Markdown summary of a run", _add_report, _run_report),
    "runs": ("list the runs in a directory with their settings and results", _add_runs, _run_runs),
    "hw": ("show what trmkit sees of this machine", _add_hw, _run_hw),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trmkit", description="Train Tiny Recursive Models on a laptop.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add, _) in COMMANDS.items():
        add(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from trmkit.data.store import StoreError
    from trmkit.train.checkpoint import CheckpointError

    try:
        return COMMANDS[args.command][2](args)
    except (ConfigError, CheckpointError, StoreError) as err:
        print(f"trmkit {args.command}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
