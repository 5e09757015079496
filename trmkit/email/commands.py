"""`trmkit email predict | sort | export | serve | weak-label | baseline | label` (the CLI dispatches here;
docs/email.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from trmkit import rundir
from trmkit.config import ConfigError
from trmkit.email import halting, label_command, pretrain_command
from trmkit.email.outputs import (email_store_meta, guard_new_output, guard_output, is_baseline_result,
                                 is_predictions, model_reads)
from trmkit.files import UnsafeTargetError, atomic_open, write_json

WORKER_MIN_BYTES = 1 << 20  # an mbox (or message file) smaller than this is classified without workers
KEPT_FREED_BYTES = 256 << 20  # predict's C allocator keeps this much freed memory at the heap's top for reuse
MAX_WORKERS = 4  # parsing processes at most: beyond, the model is the bottleneck on a laptop
LIGHT_TOKENS = 64  # at most this many tokens per message, the model classifies faster than one thread parses


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="email_command", required=True)
    _add_predict(sub)
    s = sub.add_parser("sort", help="file messages into a Maildir folder per label, as verified copies")
    s.add_argument("model", help="a bundle (trmkit email export) or a finished run directory")
    s.add_argument("inputs", nargs="+", help="message files: an .eml file or folder, or a Maildir")
    s.add_argument("--into", required=True, help="the Maildir to file copies into (a folder per label)")
    s.add_argument("--dry-run", action="store_true", help="print what would be copied where; write nothing")
    s.add_argument("--stamp", action="store_true", help="add an X-Trmkit-Label header line to each copy")
    s.add_argument("--threshold", action="append", default=[], metavar="[CLASS=]P",
                   help="below P the message goes to the 'uncertain' folder (as for predict)")
    s.add_argument("--batch", type=int, default=256, help="messages per model batch")
    s.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"), help="as for predict")
    s = sub.add_parser("export", help="write a bundle: weights, tokenizer, labels, calibration, model card")
    s.add_argument("run_dir")
    s.add_argument("--out", required=True, help="bundle folder to create")
    s = sub.add_parser("serve", help="a local HTTP JSON API (needs the serve extra: starlette, uvicorn)")
    s.add_argument("model", help="a bundle or a finished run directory")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    s.add_argument("--port", type=int, default=8080)
    s.add_argument("--max-request-mb", type=float, default=10.0, help="larger requests get 413")
    s.add_argument("--max-batch", type=int, default=256,
                   help="messages per request (and per shared model call) at most")
    s.add_argument("--batch-wait-ms", type=float, default=5.0,
                   help="requests arriving within this many ms share one model call (0: no waiting)")
    s = sub.add_parser("weak-label", help="label a mailbox by the label map's rules alone: counts, a sample to "
                                         "confirm, and with --against the real labels' recall and precision")
    s.add_argument("source", help="a mailbox: .eml folder(s), Maildir, mbox(.gz), CSV or JSONL")
    s.add_argument("--label-map", default="configs/email-taxonomy.yaml", help="the rules (default: the taxonomy)")
    s.add_argument("--format", default="auto", help="source format (auto: detected)")
    s.add_argument("--against", default=None, metavar="LABEL_FROM",
                   help="measure against real labels read this way (folder, gmail, header:NAME, ...)")
    s.add_argument("--sample", type=int, default=3, help="messages shown per category (default 3)")
    s.add_argument("--json", action="store_true", help="print the counts and scores as one JSON object")
    s = sub.add_parser("baseline", help="TF-IDF + logistic regression on the store's exact split")
    s.add_argument("data", help="an e-mail store built by `trmkit data email`")
    s.add_argument("--run", default=None, help="a run trained on it: print its test metrics beside")
    s.add_argument("--json", "--out", dest="out", default=None, metavar="FILE",
                   help="also write the whole result as JSON (every prediction, the intervals) to FILE, atomically; "
                        "the table then goes to standard error (default: the table alone, on standard output)")
    s.add_argument("--force", action="store_true", help="let --out replace an existing file that is not an earlier "
                                                        "result of this command")
    label_command.add_arguments(sub)
    pretrain_command.add_arguments(sub)


def _add_predict(sub) -> None:
    s = sub.add_parser("predict", help="classify messages -> one JSON line each (streams any mailbox size)")
    s.add_argument("model", help="a bundle (trmkit email export) or a finished run directory")
    s.add_argument("inputs", nargs="+", help=".eml file, folder, Maildir, mbox(.gz), CSV/JSONL, or - (stdin)")
    s.add_argument("--format", default="auto", help="input format (auto: detected per input)")
    s.add_argument("--out", default=None, help="write the JSON lines here (atomically) instead of stdout; an "
                                               "existing file is replaced only if it holds predictions")
    s.add_argument("--force", action="store_true", help="let --out replace an existing file that is not an earlier "
                                                        "predictions file (weights, a mailbox, ...)")
    s.add_argument("--batch", type=int, default=256, help="messages per model batch")
    s.add_argument("--no-halt", action="store_true", help="run every message through all N_sup steps")
    s.add_argument("--threshold", action="append", default=[], metavar="[CLASS=]P",
                   help="label 'uncertain' when the top class's probability is below P (CLASS=P for one class, "
                        "P for every class; repeat the option), e.g. --threshold 0.6 --threshold spam=0.9")
    s.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"),
                   help="auto: float32 on a CPU without native bf16; else bf16 only if measured >= 1.1x faster "
                        "here (once per machine and model, cached) with equal labels")
    s.add_argument("--workers", default="auto",
                   help="processes that parse and encode beside the model (0: a thread; auto: for folders, "
                        "Maildirs and mboxes over 1 MB, by the cores and the model's cost; the choice is printed)")


def run(args: argparse.Namespace) -> int:
    return {"predict": run_predict, "sort": run_sort, "export": run_export, "serve": run_serve,
            "baseline": run_baseline, "weak-label": run_weak_label,
            "label": label_command.run, "pretrain": pretrain_command.run}[args.email_command](args)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def input_messages(inputs: list[str], fmt: str, report):
    """Messages of every input in order; '-' reads one raw message (or an mbox) from stdin."""
    from trmkit.email.mail.mailbox import iter_messages
    from trmkit.email.mail.mime import ParseError, parse_message

    for source in inputs:
        if source == "-":
            raw = sys.stdin.buffer.read()
            report.lines += 1
            try:
                yield parse_message(raw, "<stdin>")
                report.accepted += 1
            except ParseError as err:
                report.skip("<stdin>", "unparseable message", str(err))
            continue
        if not Path(source).exists():
            raise ConfigError(f"{source}: no such file or folder")
        try:
            yield from iter_messages(source, fmt, "folder", report)
        except ValueError as err:  # an input the readers cannot decode (a CSV in another encoding): named, with its fix
            raise ConfigError(str(err)) from err


def run_predict(args: argparse.Namespace) -> int:
    from trmkit.data.imports import ImportReport
    from trmkit.hardware.cpu import probe_cpu
    from trmkit.hardware.memory import PeakMeter

    meter = PeakMeter().start()
    out_path = guard_new_output(args.out, [*args.inputs, *model_reads(args.model)], args.force, is_predictions,
                                "a predictions file") if args.out else None
    cpu = probe_cpu()
    report = ImportReport(source=", ".join(args.inputs), unit="messages")
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        parsers = early_parsers(args, report, cpu.effective_cores)  # parsing while torch loads the model
        if parsers is not None:
            stack.callback(parsers.close)
        clf = load_classifier(args, cpu)
        results = prediction_stream(clf, args, report, cpu.effective_cores, parsers)
        if out_path is None:
            n = write_lines(sys.stdout, results)
        else:
            try:
                with atomic_open(out_path, "w", encoding="utf-8") as sink:  # all lines, or the old file
                    n = write_lines(sink, results)
            except UnsafeTargetError as err:
                raise ConfigError(f"--out {err}") from err
    seconds = time.perf_counter() - t0
    for line in report.summary_lines():
        _stderr(line)
    steps = clf.steps_run / max(1, clf.messages_seen)
    _stderr(f"predict: {n} messages in {seconds:.1f} s ({n / max(seconds, 1e-9):.0f} messages/s, loading the model "
            f"and parsing included), {steps:.2f} supervision steps per message of {clf.model.cfg.halt_max_steps}, "
            f"peak RSS {meter.process_peak() / 2**30:.2f} GiB" + (f" -> {out_path}" if out_path else ""))
    if n == 0 and report.skipped:  # nothing answered: a pipeline `predict ... && next` must not go on
        _stderr(f"predict: none of the {report.skipped} inputs could be read as a message (reasons above): "
                "give mail files, a Maildir, an mbox (gzipped too), a CSV or JSONL")
        return 2
    return 0


def load_classifier(args: argparse.Namespace, cpu):
    """The bundle or run, with its halting rule, dtype choice and thresholds, each printed."""
    from trmkit.email.bundle import Classifier
    from trmkit.hardware.allocator import keep_freed_memory
    from trmkit.hardware.cpu import native_bf16

    clf = Classifier.load(args.model, batch_size=args.batch, halt=not args.no_halt, dtype=args.dtype)
    clf.log = _stderr
    _stderr(f"predict: halting: {halting.describe(clf.halt_probability, clf.halt_fitted_on)}" if clf.halt
            else "predict: halting off (--no-halt): every message runs every supervision step")
    clf.native_bf16, clf.cache_dir = native_bf16(cpu.features), args.cache_dir
    clf.thresholds = parse_thresholds(args.threshold, clf.class_names)
    if keep_freed_memory(KEPT_FREED_BYTES):
        _stderr(f"predict: freed memory is kept for reuse (up to {KEPT_FREED_BYTES >> 20} MiB): returned to the "
                "system, each batch's activations were faulted back in (the model alone on 2 AVX2 cores: 649-767 "
                "messages/s kept, 575-613 returned)")
    return clf


def early_parsers(args: argparse.Namespace, report, cores: int):
    """Worker processes started before the model loads, for a bundle whose text layout its files give
    without torch (workers.layout), where --workers chooses workers; else None (they start after the load)."""
    from trmkit.email.mail.mailbox import iter_raw
    from trmkit.email.workers import Parsers, layout

    setup = layout(Path(args.model))
    if setup is None:
        return None
    workers, why = choose_workers(args.workers, args.inputs, args.format, cores, setup[2])
    if workers == 0:
        return None
    _stderr(f"predict: workers={workers} ({why}), started before the model loads")
    raw = (item for source in args.inputs for item in iter_raw(source, args.format, report))
    return Parsers(raw, args.batch, workers, setup, report)


def prediction_stream(clf, args: argparse.Namespace, report, cores: int, parsers=None):
    """Predictions for every input: parsed and encoded by worker processes where --workers chose
    them (workers.py; `parsers` when they started before the model loaded), else in a thread beside
    the model (stream.predict_stream)."""
    from trmkit.email.stream import predict_batches, predict_stream
    from trmkit.email.mail.mailbox import iter_raw
    from trmkit.email.workers import Parsers

    import torch

    if parsers is not None:
        if clf.worker_setup()[2:] != parsers.setup[2:]:  # the same files were read: cannot differ
            raise ConfigError(f"{args.model}: the model's text layout changed while it loaded; run again")
        workers = parsers.workers
    else:
        workers, why = choose_workers(args.workers, args.inputs, args.format, cores, clf.seq_len)
        _stderr(f"predict: workers={workers} ({why})")
    threads, why = model_threads(cores, workers, clf.seq_len)
    torch.set_num_threads(threads)
    _stderr(f"predict: model threads={threads} ({why})")
    if workers == 0:
        return predict_stream(clf, input_messages(args.inputs, args.format, report), args.batch)
    if parsers is None:
        raw = (item for source in args.inputs for item in iter_raw(source, args.format, report))
        parsers = Parsers(raw, args.batch, workers, clf.worker_setup(), report)
    return predict_batches(clf, parsers)


def choose_workers(asked: str, inputs: list[str], fmt: str, cores: int, tokens: int) -> tuple[int, str]:
    """Worker processes for parsing and encoding, and why: a number as asked, or by the sources, the
    cores and the model's cost (`tokens` through attention per message)."""
    if asked != "auto" and not asked.isdigit():
        raise ConfigError(f"--workers {asked!r}: give a number of processes (0: parse in a thread) or auto")
    not_files = _rows_source(inputs, fmt)
    if asked != "auto":
        if int(asked) and not_files:
            raise ConfigError(f"--workers {asked}: {not_files}; workers parse message files: use --workers 0")
        return int(asked), "--workers"
    if cores < 2:
        return 0, f"{cores} core: a worker would take turns with the model, parsing in a thread instead"
    if not_files:
        return 0, not_files
    if not any(Path(s).is_dir() or Path(s).stat().st_size > WORKER_MIN_BYTES for s in inputs):
        return 0, "a few messages: starting worker processes (about a second) would cost more than it saves"
    if tokens > LIGHT_TOKENS:
        n = max(1, min(cores, MAX_WORKERS) // 2)
        return n, f"{cores} cores, {tokens} tokens per message: the model is the slower half, {n} process(es) parse"
    n = min(cores, MAX_WORKERS)
    return n, f"{cores} cores, {tokens} tokens per message: the model outpaces one parsing thread, {n} processes parse"


def _rows_source(inputs: list[str], fmt: str) -> str:
    """Why an input is read in this process (stdin, a missing path, CSV/JSONL rows), or ''."""
    from trmkit.email.mail.mailbox import detect_format

    for source in inputs:
        if source == "-" or not Path(source).exists():
            return f"{source}: read in this process"
        kind = detect_format(Path(source)) if fmt == "auto" else fmt
        if kind not in ("eml-dir", "maildir", "mbox"):
            return f"{source} is {kind}: its rows are read in a thread beside the model"
    return ""


def model_threads(cores: int, workers: int, tokens: int) -> tuple[int, str]:
    """torch threads beside `workers` parsing processes (0: a parsing thread), and why."""
    if workers == 0:
        if cores < 2:
            return 1, "1 core, shared with the parsing thread"
        return cores - 1, ("one core left to the parsing thread: torch's threads on every core starve it (2 busy "
                           "cores, 32 tokens, a 1,000-row CSV: 167-195 messages/s against 49-102)")
    if tokens > LIGHT_TOKENS:
        return cores, f"{tokens} tokens per message: the model is the bottleneck and keeps every core"
    return max(1, cores - workers), ("the cores the workers leave, at least one (on 2 AVX2 cores, 32 tokens: "
                                     "600-630 messages/s, against 445-525 with 2 threads)")


def run_sort(args: argparse.Namespace) -> int:
    from trmkit.data.imports import ImportReport
    from trmkit.email.bundle import Classifier
    from trmkit.email.stream import predict_stream
    from trmkit.email.mail.mailbox import detect_format
    from trmkit.email.sort import sort_messages
    from trmkit.hardware.cpu import native_bf16, probe_cpu

    for source in args.inputs:
        fmt = detect_format(Path(source)) if Path(source).exists() else None
        if fmt not in ("eml-dir", "maildir"):
            raise ConfigError(f"{source}: sort copies message files (an .eml file or folder, or a Maildir); this "
                              f"is {fmt or 'missing'}. For an mbox or CSV, `email predict` names each message's source")
    into = guard_output(args.into, [*args.inputs, *model_reads(args.model)], "--into")
    if into.exists() and not into.is_dir():
        raise ConfigError(f"--into {into} exists and is not a folder: sort files copies into a Maildir folder; "
                          "give a folder's path (it is created if missing)")
    clf = Classifier.load(args.model, batch_size=args.batch, dtype=args.dtype)
    clf.log = _stderr
    clf.native_bf16, clf.cache_dir = native_bf16(probe_cpu().features), args.cache_dir
    clf.thresholds = parse_thresholds(args.threshold, clf.class_names)
    report = ImportReport(source=", ".join(args.inputs), unit="messages")
    results = predict_stream(clf, input_messages(args.inputs, "auto", report), args.batch)
    done = sort_messages(((r["source"], r) for r in results), into, args.stamp, args.dry_run, _stderr)
    for line in report.summary_lines():
        _stderr(line)
    _stderr(done.summary(into, args.dry_run))
    return 0


def run_weak_label(args: argparse.Namespace) -> int:
    from trmkit.data.imports import ImportReport
    from trmkit.email.labels import load_label_map
    from trmkit.email.mail.mailbox import iter_messages
    from trmkit.email.weak import all_counts, format_report, weak_label

    if args.sample < 0:
        raise ConfigError(f"--sample {args.sample}: give 0 or more messages per category")
    label_map = load_label_map(args.label_map)
    read = ImportReport(source=args.source, unit="messages")
    try:
        messages = iter_messages(args.source, args.format, args.against or "none", read)
    except (ValueError, FileNotFoundError) as err:
        raise ConfigError(str(err)) from err
    report = weak_label(messages, label_map, args.against is not None, args.sample)
    for line in read.summary_lines():
        _stderr(line)
    if args.json:
        print(json.dumps({"messages": report.seen, "counts": {str(k): v for k, v in all_counts(report).items()},
                          "cannot_fire": report.cannot_fire, "against": args.against,
                          "scores": report.scores() if args.against else None}))
    else:
        print("\n".join(format_report(report, args.against)))
    return 0


def parse_thresholds(items: list[str], classes: list[str]) -> dict[str, float]:
    """["0.6", "spam=0.9"] -> {"*": 0.6, "spam": 0.9}; an unknown class or a bad number is an error."""
    out = {}
    for item in items:
        name, _, value = item.rpartition("=")
        try:
            p = float(value)
        except ValueError:
            p = -1.0
        if not 0.0 <= p <= 1.0 or (name and name not in classes):
            raise ConfigError(f"--threshold {item}: give P in [0, 1], or CLASS=P with CLASS one of {classes}")
        out[name or "*"] = p
    return out


def write_lines(sink, results) -> int:
    """One JSON line per prediction; how many were written."""
    n = 0
    for result in results:
        sink.write(json.dumps(result, ensure_ascii=False) + "\n")
        n += 1
    return n


def run_export(args: argparse.Namespace) -> int:
    from trmkit.email.bundle import export

    if not rundir.path(args.run_dir, rundir.CONFIG).is_file():
        raise ConfigError(f"{args.run_dir}: no {rundir.CONFIG} there; give a run directory written by `trmkit train` "
                          "on an e-mail store")
    guard_output(args.out, model_reads(args.run_dir), inside_ok=(args.run_dir,))
    try:
        out = export(args.run_dir, args.out, log=print)
    except (FileExistsError, OSError) as err:
        raise ConfigError(str(err)) from err
    print(f"bundle written to {out}: " + ", ".join(p.name for p in sorted(out.iterdir())))
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from trmkit.email.bundle import Classifier
    from trmkit.email.serve import serve

    clf = Classifier.load(args.model)
    serve(clf, host=args.host, port=args.port, max_request_bytes=int(args.max_request_mb * 2**20),
          max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms)
    return 0


def run_baseline(args: argparse.Namespace) -> int:
    from trmkit.data.store import META_FILE
    from trmkit.email.baseline import both_baselines

    data = Path(args.data)
    out = guard_new_output(args.out, [data, *(model_reads(args.run) if args.run else [])], args.force,
                           is_baseline_result, "a baseline result") if args.out else None
    meta = email_store_meta(data, META_FILE)
    classes = meta.get("classes", [])
    result = both_baselines(data, classes)  # a --keep-labels store's train/ holds the labelled only
    result["keep_labels"] = meta.get("build", {}).get("keep_labels")
    if args.run:
        trm = json.loads(rundir.path(args.run, rundir.CLASSIFICATION).read_text())
        result["trm"] = trm.get("summary", trm)
        for key in BASELINES:
            result[key.replace("baseline", "trm_minus_baseline")] = paired_difference(trm, result[key], classes)
    if out is None:  # the answer is the table; the JSON (2,000+ lines of predictions) only with --json FILE
        print(side_by_side(result, classes) + "\nthe whole result as JSON: --json FILE")
        return 0
    try:
        write_json(out, result)
    except UnsafeTargetError as err:
        raise ConfigError(f"--json {err}") from err
    _stderr(side_by_side(result, classes) + f"\nthe whole result (JSON): {out}")
    return 0


BASELINES = ("baseline", "baseline_balanced")  # TF-IDF + LR without and with class_weight="balanced"


def paired_difference(trm: dict, base: dict, classes: list[str]) -> dict:
    """The TRM's and the baseline's predictions on the same test messages (the TRM's in store row
    order), resampled together: a 95% interval of macro-F1(TRM) - macro-F1(baseline)."""
    import numpy as np

    from trmkit.tasks.classify.metrics import bootstrap_ci

    baseline_preds = base["preds"]
    rows = np.asarray(trm["rows"], dtype=np.int64)
    if len(rows) != len(baseline_preds):
        raise ConfigError(f"the run scored {len(rows)} test messages, the store holds {len(baseline_preds)}: "
                          "was the run trained on this store (--run)?")
    labels, preds = np.empty(len(rows), np.int64), np.empty(len(rows), np.int64)
    labels[rows], preds[rows] = trm["labels"], trm["preds"]
    ci = bootstrap_ci(labels, preds, len(classes), other_pred=baseline_preds)
    return {"macro_f1": trm["summary"]["macro_f1"] - base["macro_f1"],
            "ci95": ci["macro_f1_difference"], "rounds": ci["rounds"]}


def few_label_lines(result: dict, few: dict) -> list[str]:
    """The rival's line (with its WARNING when the TRM is below it) and the run's few-label guard choice."""
    from trmkit.email.baseline import RIVAL_NAMES, rival_line

    key = result["stronger"]
    lines = [rival_line(result["trm"]["macro_f1"], result[key]["macro_f1"], RIVAL_NAMES[key],
                        sum(few["labelled"].values()))]
    guard = (result["trm"].get("few_labels") or {}).get("guard")
    if guard:
        lines.append(f"the run's few-label guard chose {guard['name']}: {guard['reason']}")
    return lines


def side_by_side(result: dict, classes: list[str]) -> str:
    """A small table: accuracy, macro-F1 and per-class F1 of the baseline (and the TRM)."""
    from trmkit.tasks.classify.metrics import SMALL_CLASS

    cols = [k for k in (*BASELINES, "trm") if k in result]
    names = {"baseline": "LR", "baseline_balanced": "LR bal.", "trm": "TRM"}
    rows = [("accuracy", lambda r: r["accuracy"]), ("macro-F1", lambda r: r["macro_f1"])]
    rows += [(f"F1 {c}", lambda r, c=c: r["per_class"][c]["f1"]) for c in classes]
    lines = ["metric".ljust(24) + "".join(names[c].rjust(10) for c in cols)]
    for name, get in rows:
        lines.append(name.ljust(24) + "".join(f"{get(result[c]):10.4f}" for c in cols))
    for c in cols:
        ci = result[c].get("ci95", {}).get("macro_f1")
        if ci:
            lines.append(f"{names[c]}: macro-F1 95% interval {ci[0]:.4f}-{ci[1]:.4f} (bootstrap over test messages)")
    lines.append(f"LR: TF-IDF + logistic regression; LR bal.: the same with class_weight=balanced; the stronger "
                 f"here: {names[result['stronger']]}")
    few = result.get("keep_labels")
    if few:
        lines.append(f"both fitted on the {sum(few['labelled'].values())} labelled training messages only "
                     f"(--keep-labels {few['per_class']} per class); the {few['unlabelled']} unlabelled ones are "
                     "not read")
    for key in BASELINES:
        d = result.get(key.replace("baseline", "trm_minus_baseline"))
        if d:
            lines.append(f"TRM - {names[key]} macro-F1 {d['macro_f1']:+.4f}, 95% interval {d['ci95'][0]:+.4f} to "
                         f"{d['ci95'][1]:+.4f} (paired bootstrap, {d['rounds']} rounds)")
    if few and "trm" in result:  # the line a few-label run's end printed, with the same figures
        lines += few_label_lines(result, few)
    small = result["baseline"].get("small_classes", [])
    if small:
        lines.append(f"WARNING: fewer than {SMALL_CLASS} test messages in {', '.join(small)}: their F1 is noise-level")
    return "\n".join(lines)

