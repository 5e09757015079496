"""Inference throughput and memory of `trmkit email predict`: messages/s with parsing included, and
peak RSS as the mailbox grows (an mbox larger than RAM must stream with flat memory).

    python benchmarks/email_predict.py BUNDLE_OR_RUN [--folder ../shared/data/email/spamassassin]
                                       [--mbox-mb 20 200] [--dtype float32]

1. the whole folder, once with ACT halting (as trained) and once with every message through all N_sup steps;
2. mboxes of the given sizes built from the folder's messages (repeated) in a temporary directory: the
   peak RSS of each run, from `predict`'s own report (the kernel's high-water mark, VmHWM).
Each measurement is a fresh `trmkit email predict` process; its stderr line is printed as it is.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

LINE = re.compile(r"predict: (\d+) messages in ([\d.]+) s \((\d+) messages/s.*peak RSS ([\d.]+) GiB")


def predict(model: str, inputs: list[str], *extra: str) -> dict:
    cmd = [sys.executable, "-m", "trmkit.cli", "email", "predict", model, *inputs, *extra]
    # the predictions go to stdout, discarded (`--out` writes regular files only, atomically)
    err = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True).stderr
    line = next(x for x in err.splitlines() if LINE.search(x))
    print("  " + line, flush=True)
    n, seconds, rate, rss = LINE.search(line).groups()
    return {"messages": int(n), "seconds": float(seconds), "per_second": int(rate), "peak_rss_gib": float(rss)}


def write_mbox(folder: Path, path: Path, megabytes: float) -> int:
    files = sorted(p for p in folder.rglob("*")
                   if p.is_file() and not p.name.startswith(".") and p.name != "README.txt")
    target, written, n = megabytes * 2**20, 0, 0
    with open(path, "wb") as out:
        while written < target:
            for f in files:
                body = f.read_bytes().replace(b"\nFrom ", b"\n>From ")
                chunk = b"From bench@example.com Thu Jan  1 00:00:00 2004\n" + body.rstrip(b"\n") + b"\n\n"
                out.write(chunk)
                written, n = written + len(chunk), n + 1
                if written >= target:
                    break
    return n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="a bundle or a finished e-mail run")
    p.add_argument("--folder", default="../shared/data/email/spamassassin")
    p.add_argument("--mbox-mb", type=float, nargs="*", default=[20, 200])
    p.add_argument("--batch", default="256")
    p.add_argument("--dtype", default="auto", help="predict's --dtype (float32 to measure a CPU without bf16)")
    args = p.parse_args()
    print(f"{args.folder}, with ACT halting (as trained):")
    predict(args.model, [args.folder], "--batch", args.batch, "--dtype", args.dtype)
    print(f"{args.folder}, every message through all N_sup steps (--no-halt):")
    predict(args.model, [args.folder], "--batch", args.batch, "--dtype", args.dtype, "--no-halt")
    with tempfile.TemporaryDirectory() as tmp:
        for mb in args.mbox_mb:
            path = Path(tmp) / f"box-{mb:g}MB.mbox"
            n = write_mbox(Path(args.folder), path, mb)
            print(f"mbox of {mb:g} MB ({n} messages):")
            predict(args.model, [str(path)], "--batch", args.batch, "--dtype", args.dtype)
            path.unlink()


if __name__ == "__main__":
    main()
