"""`trmkit email pretrain STORE`: masked-token pretraining on every message of a store, then the command
that fine-tunes the classifier from it.

    trmkit email pretrain data/mine-k10 --minutes 20
      1. builds the email-mlm store (email/pretrain.py) beside STORE, or reuses the one built from it before
      2. trains configs/email-pretrain.yaml on it with the one trainer (train/run.py, planned from the same
         measurement cache as `trmkit train`); a run directory that holds checkpoints is resumed exactly
         (Ctrl-C, then the same command, loses at most the last interval)
      3. prints `trmkit train configs/email-fast.yaml data.path=STORE train.init_from=RUN`

No label is read: the labelled and the unlabelled training messages (and the validation split's) are
masked alike, and the test split is never opened.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trmkit import rundir
from trmkit.config import ConfigError
from trmkit.data.store import is_store_dir
from trmkit.email import pretrain

CONFIG = "configs/email-pretrain.yaml"


def add_arguments(sub) -> None:
    s = sub.add_parser("pretrain", help="self-supervised pretraining on every message of a store (masked tokens), "
                                        "for train.init_from")
    s.add_argument("data", help="an e-mail store (`trmkit data email`, e.g. with --keep-labels K)")
    s.add_argument("overrides", nargs="*", help="config overrides key=value (e.g. run.threads=1)")
    s.add_argument("--config", default=CONFIG, help=f"the pretraining preset (default {CONFIG})")
    s.add_argument("--minutes", type=float, default=None, help="training time (default: the preset's max_minutes)")
    s.add_argument("--store-out", default=None, help="the masked-token store (default: STORE-mlm beside STORE)")
    s.add_argument("--run-dir", default=None, help="the pretraining run (default: runs/NAME-pretrain)")
    s.add_argument("--copies", type=int, default=pretrain.COPIES, help="masked rows per message")
    s.add_argument("--seed", type=int, default=0, help="the masks' seed")


def run(args: argparse.Namespace) -> int:
    from trmkit import hardware
    from trmkit.train import checkpoint
    from trmkit.train.resume import load_for_run
    from trmkit.train.run import run as train

    source = Path(args.data)
    store = Path(args.store_out) if args.store_out else source.with_name(source.name + "-mlm")
    run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / f"{source.name}-pretrain"
    try:
        ensure_store(source, store, args.copies, args.seed, _stderr)
    except ValueError as err:  # not an e-mail store, no text to mask: the message names the store and the fix
        raise ConfigError(str(err)) from err
    resume = str(run_dir) if checkpoint.list_checkpoints(run_dir) else None
    extra = [f"data.path={store}", *args.overrides]
    extra += [f"train.max_minutes={args.minutes}"] if args.minutes is not None else []
    if resume:
        _stderr(f"pretrain: {run_dir} holds checkpoints -> resumed exactly (another run directory: --run-dir)")
    elif rundir.is_run_dir(run_dir):
        raise ConfigError(f"{run_dir} is a run directory without checkpoints (finished or stopped before its first "
                          "save): give another --run-dir, or remove it yourself")
    cfg = load_for_run(None if resume else args.config, extra + ([] if resume else [f"run.dir={run_dir}"]), resume,
                       CONFIG, command="email pretrain")  # a resumed run keeps its own config.yaml
    result = train(cfg, hardware.probe(), cache_dir=args.cache_dir, resume=bool(resume), is_tty=sys.stdout.isatty(),
                   parts=pretrain.TASK.model_parts)  # the bag's reader (email/parts.py)
    if result.get("stopped"):  # saved; the same command resumes it
        return int(result["exit_code"])
    _stderr(f"pretrain: done. Fine-tune the classifier from it:\n  trmkit train configs/email-fast.yaml "
            f"data.path={source} train.init_from={cfg.run.dir}")
    return 0


def ensure_store(source: Path, store: Path, copies: int, seed: int, log) -> None:
    """Build the masked-token store, or keep the one already built from `source` with these settings."""
    if is_store_dir(store):
        built = pretrain.source_of(store)
        same = (built.get("source_fingerprint") == pretrain.fingerprint(source) and built.get("copies") == copies
                and built.get("seed") == seed and Path(built.get("from", "")) == source.resolve())
        if not same:
            raise ConfigError(f"{store} was built from {built.get('from')} (copies {built.get('copies')}, seed "
                              f"{built.get('seed')}), not from {source} with these settings: give another "
                              "--store-out, or remove it yourself")
        log(f"pretrain: {store} was built from {source} with these settings -> reused")
        return
    pretrain.build(source, store, copies=copies, seed=seed, log=log)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)
