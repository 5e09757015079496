"""`trmkit adapt`'s command-line arguments (argparse only: the CLI imports this before any command runs)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", nargs="?", default=None, help="the trained run to start from (never changed)")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. adapt.round_steps=100 train.lr=1e-4")
    p.add_argument("--data", default=None, metavar="NEW",
                   help="a store built from the new source by `trmkit data TASK`; only its inputs are read")
    p.add_argument("--minutes", type=float, default=None, metavar="N",
                   help="adapt for N minutes (rounds of solving and training; the steps fitted to the time); "
                        "default: adapt.rounds x adapt.round_steps steps")
    p.add_argument("--out", default=None, metavar="RUN2", help="the new run's directory (default: RUN-adapted)")
    p.add_argument("--checker", default=None, metavar="FILE.py:FUNCTION",
                   help="your checker for a store built by `trmkit data pairs`: FUNCTION(input, output) -> bool")
    p.add_argument("--heldout", type=float, default=None, metavar="F",
                   help="share of the new source's problems held out and scored one-shot by the checker each "
                        "round (default 0.2)")
    p.add_argument("--objective", default=None, choices=["pseudo", "tr-rpg", "continue"],
                   help="what the steps train on: pseudo (the accepted answers as labels; the default), tr-rpg "
                        "(TR-RPG's policy gradient, reward = the checker's verdict, KL to the starting model), or "
                        "continue (a control: the original training set only, at equal time)")
    p.add_argument("--keep", default=None, choices=["checker", "vote"],
                   help="what makes a try's answer a pseudo-label: checker (the default), or vote (a control: the "
                        "plurality answer of the tries, the checker never asked)")
    p.add_argument("--resume", metavar="RUN2", default=None, help="continue the adaptation in RUN2 exactly")
    p.add_argument("--force", action="store_true", help="start afresh in an --out that already holds a run")
