"""`trmkit email predict | export | serve | baseline` (the CLI dispatches here; docs/email.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from trmkit import rundir
from trmkit.config import ConfigError
from trmkit.files import UnsafeTargetError, atomic_open


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="email_command", required=True)
    s = sub.add_parser("predict", help="classify messages -> one JSON line each (streams any mailbox size)")
    s.add_argument("model", help="a bundle (trmkit email export) or a finished run directory")
    s.add_argument("inputs", nargs="+", help=".eml file, folder, Maildir, mbox(.gz), CSV/JSONL, or - (stdin)")
    s.add_argument("--format", default="auto", help="input format (auto: detected per input)")
    s.add_argument("--out", default=None, help="write the JSON lines here (atomically) instead of stdout")
    s.add_argument("--batch", type=int, default=256, help="messages per model batch")
    s.add_argument("--no-halt", action="store_true", help="run every message through all N_sup steps")
    s.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"),
                   help="auto: float32 on a CPU without native bf16; else bf16 only if measured >= 1.1x faster "
                        "here (once per machine and model, cached) with equal labels")
    s = sub.add_parser("export", help="write a bundle: weights, tokenizer, labels, calibration, model card")
    s.add_argument("run_dir")
    s.add_argument("--out", required=True, help="bundle folder to create")
    s = sub.add_parser("serve", help="a local HTTP JSON API (needs the serve extra: starlette, uvicorn)")
    s.add_argument("model", help="a bundle or a finished run directory")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    s.add_argument("--port", type=int, default=8080)
    s.add_argument("--max-request-mb", type=float, default=10.0, help="larger requests get 413")
    s.add_argument("--max-batch", type=int, default=256, help="messages per request at most")
    s = sub.add_parser("baseline", help="TF-IDF + logistic regression on the store's exact split")
    s.add_argument("data", help="an e-mail store built by `trmkit data email`")
    s.add_argument("--run", default=None, help="a run trained on it: print its test metrics beside")


def run(args: argparse.Namespace) -> int:
    return {"predict": run_predict, "export": run_export, "serve": run_serve,
            "baseline": run_baseline}[args.email_command](args)


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
        yield from iter_messages(source, fmt, "folder", report)


def run_predict(args: argparse.Namespace) -> int:
    from trmkit.data.imports import ImportReport
    from trmkit.email.bundle import Classifier, predict_stream
    from trmkit.hardware.cpu import native_bf16, probe_cpu
    from trmkit.hardware.memory import PeakMeter

    meter = PeakMeter().start()
    clf = Classifier.load(args.model, batch_size=args.batch, halt=not args.no_halt, dtype=args.dtype)
    clf.log = _stderr
    clf.native_bf16, clf.cache_dir = native_bf16(probe_cpu().features), args.cache_dir
    report = ImportReport(source=", ".join(args.inputs), unit="messages")
    out_path = Path(args.out) if args.out else None
    t0 = time.perf_counter()
    results = predict_stream(clf, input_messages(args.inputs, args.format, report), args.batch)
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
    _stderr(f"predict: {n} messages in {seconds:.1f} s ({n / max(seconds, 1e-9):.0f} messages/s, parsing "
            f"included), {steps:.2f} supervision steps per message of {clf.model.cfg.halt_max_steps}, peak RSS "
            f"{meter.process_peak() / 2**30:.2f} GiB" + (f" -> {out_path}" if out_path else ""))
    return 0


def write_lines(sink, results) -> int:
    """One JSON line per prediction; how many were written."""
    n = 0
    for result in results:
        sink.write(json.dumps(result, ensure_ascii=False) + "\n")
        n += 1
    return n


def run_export(args: argparse.Namespace) -> int:
    from trmkit.email.bundle import export

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
          max_batch=args.max_batch)
    return 0


def store_texts(data: Path, split: str) -> tuple[list[str], list[str]]:
    from trmkit.email.mail import Message
    from trmkit.email.prepare import message_text
    from trmkit.email.task import MESSAGES_FILE

    path = data / split / MESSAGES_FILE
    if not path.is_file():
        raise ConfigError(f"{path} not found: {data} is not an e-mail store (build it with `trmkit data email`)")
    records = json.loads(path.read_text())
    texts = [message_text(Message(subject=r["subject"], sender=r["sender"], body=r["body"])) for r in records]
    return texts, [r["label"] for r in records]


def run_baseline(args: argparse.Namespace) -> int:
    from trmkit.data.store import META_FILE
    from trmkit.email.baseline import run_baseline as baseline

    data = Path(args.data)
    classes = json.loads((data / "train" / META_FILE).read_text()).get("classes", [])
    train_x, train_y = store_texts(data, "train")
    test_x, test_y = store_texts(data, "test")
    result = {"baseline": baseline(train_x, train_y, test_x, test_y, classes)}
    if args.run:
        trm = json.loads(rundir.path(args.run, rundir.CLASSIFICATION).read_text())
        result["trm"] = trm.get("summary", trm)
    print(json.dumps(result, indent=2))
    _stderr(side_by_side(result, classes))
    return 0


def side_by_side(result: dict, classes: list[str]) -> str:
    """A small table: accuracy, macro-F1 and per-class F1 of the baseline (and the TRM)."""
    cols = [k for k in ("baseline", "trm") if k in result]
    rows = [("accuracy", lambda r: r["accuracy"]), ("macro-F1", lambda r: r["macro_f1"])]
    rows += [(f"F1 {c}", lambda r, c=c: r["per_class"][c]["f1"]) for c in classes]
    lines = ["metric".ljust(24) + "".join(c.rjust(10) for c in cols)]
    for name, get in rows:
        lines.append(name.ljust(24) + "".join(f"{get(result[c]):10.4f}" for c in cols))
    return "\n".join(lines)
