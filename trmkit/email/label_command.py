"""`trmkit email label STORE`: the command's options and its dispatch (email/label.py holds the rule).

Ways, one per call: the terminal (default), --csv-out FILE then --answers FILE, --oracle LABEL_STORE
(benchmarks), and --apply --out NEW_STORE (a store to train on with the one trainer).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from trmkit.config import ConfigError
from trmkit.email.outputs import guard_new_output, is_proposals_csv
from trmkit.files import UnsafeTargetError, check_output


def add_arguments(sub) -> None:
    s = sub.add_parser("label", help="label the messages that help most (a --keep-labels store): in the terminal "
                                     "or a CSV round-trip, each answer saved at once; --apply writes a store to "
                                     "retrain on",
                       description="Proposes unlabelled messages of a --keep-labels store, the most informative first "
                                   "(the rule: email/label.py, printed at the start), and saves each answer at once "
                                   "to STORE/answers.jsonl: Ctrl-C loses none, a rerun resumes. Then --apply --out "
                                   "NEW_STORE and `trmkit train configs/email-fast.yaml data.path=NEW_STORE`.")
    s.add_argument("store", help="an e-mail store built with `trmkit data email --keep-labels K`")
    s.add_argument("--count", type=int, default=20, help="messages to propose (default 20)")
    s.add_argument("--answers-jsonl", default=None, metavar="PATH",
                   help="where the answers are kept, one JSON line each (default STORE/answers.jsonl)")
    s.add_argument("--csv-out", default=None, metavar="FILE",
                   help="write the proposals to a CSV with an empty label column instead of asking")
    s.add_argument("--answers", default=None, metavar="FILE.csv",
                   help="read the filled-in CSV back and save its labels")
    s.add_argument("--oracle", default=None, metavar="LABEL_STORE",
                   help="benchmarks: answer from a store of the same source and --seed built without --keep-labels")
    s.add_argument("--apply", action="store_true",
                   help="write --out NEW_STORE: the answered messages moved to train/ with their labels")
    s.add_argument("--out", default=None, help="with --apply: the new store's folder")
    s.add_argument("--force", action="store_true", help="let --csv-out replace an existing file that is not an "
                                                        "earlier proposals CSV, and --apply replace the store "
                                                        "already at --out")


def run(args: argparse.Namespace, read=None) -> int:
    """`trmkit email label`: one of --apply, --answers, --csv-out, --oracle, or the terminal (`read`, by default
    input(), asks)."""
    from trmkit.email import label, label_ask

    ways = [f for f in ("apply", "answers", "csv_out", "oracle") if getattr(args, f)]
    if len(ways) > 1:
        raise ConfigError("give one of --apply, --answers, --csv-out, --oracle")
    if args.apply != bool(args.out):
        raise ConfigError("--apply writes a new store: give it --out NEW_STORE (and --out only with --apply)")
    if args.count < 1:
        raise ConfigError(f"--count {args.count}: give 1 or more")
    pool = label.open_pool(args.store)
    path = label.answers_path(pool.store, args.answers_jsonl)
    answers = label.load_answers(path)
    print(f"label: {len(pool.records)} unlabelled messages, {len(label.answered(answers))} answered in {path}; "
          f"proposals: {label.RULE} (refitted every {label.REFIT_EVERY} answers)")
    if args.apply:
        return _label_apply(pool, answers, path, args.out, args.force)
    if args.answers:
        label_ask.read_csv(pool, answers, Path(args.answers), path)
    elif args.csv_out:
        out = guard_new_output(args.csv_out, [pool.store], args.force, is_proposals_csv, "a proposals CSV", "--csv-out")
        label_ask.write_csv(pool, label.propose(pool, answers, args.count), out)
        print(f"label: {args.count} proposals written to {out}: fill its label column (a class: "
              f"{', '.join(pool.classes)}, its number, or s to skip), then `trmkit email label {pool.store} "
              f"--answers {out}`")
        return 0
    elif args.oracle:
        label_ask.oracle(pool, answers, path, args.count, Path(args.oracle))
    else:
        label_ask.terminal(pool, answers, path, args.count, read or input)
    print(f"label: {len(label.answered(answers))} answers in {path}; to retrain: `trmkit email label {pool.store} "
          "--apply --out NEW_STORE`, then `trmkit train configs/email-fast.yaml data.path=NEW_STORE`")
    return 0


def _label_apply(pool, answers: list, path: Path, out: str, force: bool = False) -> int:
    from trmkit.email.label_store import apply_answers

    target = _guard(out, [pool.store, path])
    try:
        apply_answers(pool, answers, path, target, force=force)
    except (ValueError, FileExistsError) as err:
        raise ConfigError(str(err)) from err
    return 0


def _guard(out: str, reads: list) -> Path:
    try:
        return check_output(out, reads)
    except UnsafeTargetError as err:
        raise ConfigError(str(err)) from err
