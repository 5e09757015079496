"""Latency of `trmkit email serve` under concurrent single-message requests (the target:
100 at once with p95 < 1 s).

    python benchmarks/email_serve.py BUNDLE_OR_RUN [--folder ../shared/data/email/spamassassin]
                                     [--concurrent 100] [--rounds 3] [--batch-wait-ms 5]

Starts the server in its own process (as a user would), waits for /health, then for each round
sends `--concurrent` requests at once, one raw message each (the first messages of the folder,
as message/rfc822), from as many client threads, and times each request from send to answer.
Prints per round: the requests per second, the latency p50 / p95 / max, and the answers that
were not 200; at the end the same over all rounds. The server is stopped at the end, whatever
happened.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int, proc: subprocess.Popen, limit_s: float = 180) -> None:
    deadline = time.time() + limit_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode} before answering /health")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"no answer from /health within {limit_s:.0f} s")


def one_request(port: int, body: bytes, out: list, i: int, start: threading.Barrier) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    start.wait()
    t0 = time.perf_counter()
    try:
        conn.request("POST", "/classify", body=body, headers={"Content-Type": "message/rfc822"})
        resp = conn.getresponse()
        resp.read()
        out[i] = (time.perf_counter() - t0, resp.status)
    except OSError as err:
        out[i] = (time.perf_counter() - t0, f"error {err}")


def run_round(port: int, bodies: list[bytes]) -> tuple[list[float], list, float]:
    n = len(bodies)
    out: list = [None] * n
    start = threading.Barrier(n + 1)
    threads = [threading.Thread(target=one_request, args=(port, bodies[i], out, i, start)) for i in range(n)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return [x[0] for x in out], [x[1] for x in out if x[1] != 200], wall


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--folder", default="../shared/data/email/spamassassin/easy-ham-1")
    p.add_argument("--concurrent", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-wait-ms", type=float, default=5.0)
    args = p.parse_args()
    files = sorted(f for f in Path(args.folder).rglob("*") if f.is_file() and f.name != "README.txt")
    bodies = [f.read_bytes() for f in files[:args.concurrent]]
    if len(bodies) < args.concurrent:
        raise SystemExit(f"{args.folder}: {len(bodies)} messages, fewer than --concurrent {args.concurrent}")
    port = free_port()
    cmd = [sys.executable, "-m", "trmkit.cli", "email", "serve", args.model, "--port", str(port),
           "--batch-wait-ms", str(args.batch_wait_ms)]
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", prefix="email-serve-")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
    try:
        try:
            wait_ready(port, proc)
        except SystemExit:
            log.seek(0)
            print(log.read()[-2000:], file=sys.stderr)
            raise
        every = []
        for r in range(args.rounds):
            latencies, bad, wall = run_round(port, bodies)
            every += latencies
            print(f"round {r + 1}: {len(bodies)} concurrent requests in {wall:.2f} s ({len(bodies) / wall:.0f}/s); "
                  f"latency p50 {percentile(latencies, 50):.3f} s, p95 {percentile(latencies, 95):.3f} s, "
                  f"max {max(latencies):.3f} s; not 200: {len(bad)} {bad[:3]}", flush=True)
        print(json.dumps({"requests": len(every), "concurrent": args.concurrent, "batch_wait_ms": args.batch_wait_ms,
                          "p50_s": round(percentile(every, 50), 3), "p95_s": round(percentile(every, 95), 3),
                          "max_s": round(max(every), 3)}))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
