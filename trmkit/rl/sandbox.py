"""Running model-generated Python safely enough to reward it: a whitelist, then a limited worker.

Generated code is hostile by default: a policy rewarded for passing tests will find any way to
pass them. The defences, in the order a job meets them:

1. ``check_source`` (check.py, in this process, before anything runs): an AST whitelist for one
   small function of ints, bools and lists; see check.py for what it allows. This is the
   security boundary: everything below assumes it. ``Sandbox(policy=...)`` picks another
   checker and worker mode: trmkit.rl.azr.policy.AZR for programs in AZR's formats (strings,
   dicts, classes, imports of allowlisted modules), behind the same process limits.
2. A separate worker process (``_worker.py``, standard library only) started with ``-I -S`` in
   an empty directory with an empty environment, with resource limits (address space, no file
   writes, no forks, CPU), builtins cut down to the same dozen names, and an audit hook that
   refuses file, process, import and introspection events.
3. Per job: a CPU timer inside the worker, a kernel CPU limit behind it, and a wall-clock limit
   here, after which this process kills the worker and starts a fresh one. Every job runs twice
   and a result that differs between the runs is reported as "nondeterministic".

Every job gets exactly one ``Outcome``, in order, whatever happens to the worker; counts of
every kind are kept in ``Sandbox.stats`` for the training log. Each run of a job gets
``cpu_seconds``. ``Sandbox(check_ast=False)`` exists only for tests, see the class docstring.

POSIX only (``resource``, ``select`` on pipes). Not thread-safe: one ``Sandbox`` per thread.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from trmkit.rl.check import ALLOWED_CALLS, UnsafeCode, args_problem, check_source

WORKER = Path(__file__).with_name("_worker.py")  # run as a file of its own: trmkit is not importable there
RECURSION_LIMIT = 200   # frames in the worker; the job gets about 190 of them
MAX_OPEN_FILES = 16     # the worker needs stdin, stdout, stderr and little else
START_SECONDS = 10.0    # how long a new worker may take to say it is ready (slow, busy laptops)

KINDS = ("ok", "rejected", "timeout", "memory", "recursion", "error",
         "nondeterministic", "output", "crash")


@dataclass(frozen=True)
class Limits:
    """What one job may use. Every job runs twice (the determinism check), each run with
    its own ``cpu_seconds``; ``wall_seconds`` covers the whole job, both runs included."""

    cpu_seconds: float = 1.0          # CPU time per run, enforced inside the worker
    wall_seconds: float = 5.0         # wall-clock time per job; past it the worker is killed
    memory_bytes: int = 512 * 2**20   # the worker's address space (RLIMIT_AS)
    max_output_chars: int = 10_000    # length of the result written as JSON

    def __post_init__(self):
        if self.cpu_seconds <= 0:
            raise ValueError(f"cpu_seconds must be > 0, got {self.cpu_seconds}")
        if self.wall_seconds <= 2 * self.cpu_seconds:
            raise ValueError(f"wall_seconds ({self.wall_seconds}) must exceed twice cpu_seconds "
                             f"({self.cpu_seconds}): every job runs twice; raise wall_seconds")
        if self.memory_bytes < 64 * 2**20:
            raise ValueError(f"memory_bytes ({self.memory_bytes}) is below 64 MiB, too little "
                             "for the Python worker to start; use at least 64 * 2**20")
        if self.max_output_chars < 1:
            raise ValueError(f"max_output_chars must be >= 1, got {self.max_output_chars}")


@dataclass(frozen=True)
class Policy:
    """Which programs a sandbox accepts and how its worker runs them. ``SMALL`` is the default;
    trmkit.rl.azr.policy.AZR is the wider one for programs in AZR's formats."""

    name: str                                          # the worker's mode: "small" or "azr"
    builtins: frozenset                                # the names a job sees (the worker's handshake)
    modules: frozenset                                 # the modules a job may import (ditto)
    check_source: Callable[[str, str], None]           # raises UnsafeCode naming the line and what
    args_problem: Callable[[Any], str | None]          # what is wrong with a job's args, or None


SMALL = Policy("small", ALLOWED_CALLS, frozenset(), check_source, args_problem)


@dataclass(frozen=True)
class Job:
    """Call ``func`` (defined by ``source``) with ``args``: ints, bools and lists/tuples of them
    (under the AZR policy, one string: the call's argument text, e.g. ``("[1, 2], k=3",)``)."""

    source: str
    func: str
    args: tuple


@dataclass(frozen=True)
class Outcome:
    """What became of one job. ``value`` is set only when ok (tuples come back as lists)."""

    kind: str  # one of KINDS: "ok" | "rejected" | "timeout" | "memory" | "recursion" | "error"
    #            | "nondeterministic" | "output" | "crash"
    value: Any = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


# --------------------------------------------------------------------------- the worker process


class _WorkerGone(Exception):
    """The worker died, broke the protocol or ran past the wall clock; the message says which."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind, self.reason = kind, reason


def _stop(proc: subprocess.Popen) -> None:
    """Kill the worker's process group and reap it, so no zombie is left (idempotent)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process in uninterruptible sleep
        pass
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream:
            try:
                stream.close()
            except OSError:
                pass


def _exit_reason(returncode: int | None) -> str:
    """Why a worker process ended, in words."""
    if returncode is None:
        return "the worker stopped answering"
    if returncode >= 0:
        return f"the worker exited with code {returncode}"
    name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
    why = {"SIGXCPU": "its CPU limit (RLIMIT_CPU backstop) was reached",
           "SIGKILL": "killed (out-of-memory killer, or by hand)",
           "SIGSEGV": "segmentation fault", "SIGABRT": "aborted (often out of memory)",
           "SIGXFSZ": "it tried to write a file"}.get(name, "")
    return f"the worker was killed by {name}" + (f": {why}" if why else "")


class _Worker:
    """One worker process and its pipes: send a job line, read one reply line by a deadline."""

    def __init__(self, limits: Limits, cwd: str, policy: Policy = SMALL):
        config = {"memory_bytes": limits.memory_bytes, "cpu_seconds": limits.cpu_seconds,
                  "max_output_chars": limits.max_output_chars, "policy": policy.name,
                  "recursion_limit": RECURSION_LIMIT, "max_open_files": MAX_OPEN_FILES}
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(WORKER), json.dumps(config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            # -I -S and an empty environment: Python itself needs no variables, and the worker
            # must see no PYTHONPATH, site-packages or secrets. Its own session, so the whole
            # process group can be killed.
            close_fds=True, cwd=cwd, env={}, start_new_session=True)
        # Killed when it is replaced, closed, garbage-collected or at interpreter exit.
        self._finalizer = weakref.finalize(self, _stop, self.proc)
        self._buffer = bytearray()
        self._max_reply = 4 * limits.max_output_chars + 4096
        try:
            self.ready = json.loads(self.read_line(time.monotonic() + START_SECONDS))
        except (_WorkerGone, ValueError) as e:
            self.stop()
            raise RuntimeError(f"the sandbox worker did not start ({e}); check that "
                               f"{sys.executable} -I -S {WORKER} runs") from None
        if set(self.ready.get("builtins", ())) != policy.builtins or \
                set(self.ready.get("modules", ())) != policy.modules:
            self.stop()
            raise RuntimeError(f"the worker's builtins or modules differ from policy {policy.name!r} "
                               "(_worker.py against check.py or azr/policy.py): keep them equal")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        self._finalizer()

    def send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def read_line(self, deadline: float) -> bytes:
        """One line from the worker's stdout, or _WorkerGone at EOF, overflow or deadline."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _WorkerGone("timeout", "wall-clock limit exceeded: the worker was killed")
            if not select.select([fd], [], [], left)[0]:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise _WorkerGone("crash", self.death_reason())
            self._buffer += chunk
            if len(self._buffer) > self._max_reply:
                raise _WorkerGone("crash", "the worker wrote a reply longer than allowed")
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        return line

    def pending(self) -> bool:
        """Whether the worker wrote anything beyond the reply just read (EOF is not output:
        a worker that died after replying is noticed before the next job)."""
        if not self._buffer and select.select([self.proc.stdout], [], [], 0)[0]:
            self._buffer += os.read(self.proc.stdout.fileno(), 65536)
        return bool(self._buffer)

    def death_reason(self) -> str:
        """Exit code or signal, plus the end of whatever the worker wrote to stderr."""
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        tail = b""
        if code is not None and select.select([self.proc.stderr], [], [], 0)[0]:
            tail = os.read(self.proc.stderr.fileno(), 65536)[-300:]
        text = tail.decode(errors="replace").strip().replace("\n", " | ")
        return _exit_reason(code) + (f" (stderr: {text})" if text else "")


# --------------------------------------------------------------------------- the sandbox


class Sandbox:
    """Run jobs in a limited worker process, one outcome per job, in order.

    ``check_ast`` exists ONLY so tests can show what the process limits contain on their own.
    It must NEVER be False for model output: without the whitelist a program can reach the
    interpreter's internals (``len.__self__`` is the builtins module), forge its own reply or
    burn the wall-clock limit, and the audit hook and resource limits are then the only walls.
    """

    def __init__(self, limits: Limits = Limits(), check_ast: bool = True, policy: Policy = SMALL):
        self.limits = limits
        self.check_ast = check_ast
        self.policy = policy
        self.stats: dict[str, int] = {"jobs": 0, **{k: 0 for k in KINDS},
                                      "worker_starts": 0, "worker_restarts": 0}
        self.worker_info: dict = {}  # the last worker's handshake: limits set, notes
        self._dir = tempfile.TemporaryDirectory(prefix="trmkit-sandbox-")
        self._worker: _Worker | None = None
        self._next_id = 0
        self._checked: dict[tuple[str, str], str | None] = {}  # source -> problem, bounded

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def worker_pid(self) -> int | None:
        """The current worker's process id (None before the first job and after close)."""
        return self._worker.pid if self._worker else None

    def close(self) -> None:
        """Kill the worker and remove its directory; the sandbox restarts a worker if used again."""
        if self._worker:
            self._worker.stop()
            self._worker = None
        self._dir.cleanup()

    def run(self, jobs: Sequence[Job]) -> list[Outcome]:
        """One Outcome per job, in job order; a dead or stuck worker is replaced between jobs."""
        outcomes = []
        for job in jobs:
            outcome = self._precheck(job) or self._execute(job)
            self.stats["jobs"] += 1
            self.stats[outcome.kind] += 1
            outcomes.append(outcome)
        return outcomes

    def _precheck(self, job: Job) -> Outcome | None:
        """Reject in this process what must never reach the worker."""
        if not isinstance(job.func, str) or not job.func.isidentifier():
            return Outcome("rejected", reason=f"func must be a function name, got {job.func!r}")
        if not isinstance(job.source, str):
            return Outcome("rejected", reason=f"source must be a str, got {type(job.source).__name__}")
        problem = self.policy.args_problem(job.args)
        if problem is None and self.check_ast:
            problem = self._source_problem(job.source, job.func)
        return Outcome("rejected", reason=problem) if problem else None

    def _source_problem(self, source: str, func: str) -> str | None:
        """check_source, remembered: self-play asks about the same program many times."""
        key = (source, func)
        if key not in self._checked:
            if len(self._checked) >= 4096:
                self._checked.clear()
            try:
                self.policy.check_source(source, func)
                self._checked[key] = None
            except UnsafeCode as e:
                self._checked[key] = str(e)
        return self._checked[key]

    def _live_worker(self) -> _Worker:
        """The current worker, replaced first if it died since the last job."""
        if self._worker is not None and not self._worker.alive():
            self._discard_worker()
        if self._worker is None:
            if not Path(self._dir.name).is_dir():  # removed by close()
                self._dir = tempfile.TemporaryDirectory(prefix="trmkit-sandbox-")
            self._worker = _Worker(self.limits, self._dir.name, self.policy)
            self.worker_info = self._worker.ready
            self.stats["worker_starts"] += 1
        return self._worker

    def _execute(self, job: Job) -> Outcome:
        """Send one job and wait for its reply; on any failure kill the worker and say why.

        The job id carries a random part, so a program that reached the worker's stdout
        (impossible through the whitelist) still could not guess the id of a forged reply."""
        self._next_id += 1
        job_id = f"{self._next_id}-{secrets.token_hex(8)}"
        worker = self._send({"id": job_id, "source": job.source, "func": job.func,
                             "args": list(job.args)})
        try:
            reply = json.loads(worker.read_line(time.monotonic() + self.limits.wall_seconds))
            if not isinstance(reply, dict) or reply.get("id") != job_id \
                    or reply.get("kind") not in KINDS or reply.get("kind") == "rejected":
                raise _WorkerGone("crash", "the worker sent a reply that breaks the protocol")
            if worker.pending():
                raise _WorkerGone("crash", "the worker wrote more than one reply for one job")
        except (_WorkerGone, ValueError) as e:
            kind, reason = (e.kind, e.reason) if isinstance(e, _WorkerGone) else \
                ("crash", "the worker sent a line that is not JSON")
            if kind == "timeout":
                reason = (f"wall-clock limit of {self.limits.wall_seconds:g} s exceeded: "
                          "the worker was killed")
            self._discard_worker()
            return Outcome(kind, reason=reason)
        if reply.get("retire"):  # the job changed state that later jobs would share
            self._discard_worker()
        if reply["kind"] == "ok":
            return Outcome("ok", value=reply.get("value"))
        return Outcome(reply["kind"], reason=str(reply.get("reason", "")))

    def _send(self, message: dict) -> _Worker:
        """Write the job to a live worker. One that died after the liveness check, before
        reading the job, is replaced and the job sent again: it cannot have run."""
        for attempt in range(2):
            worker = self._live_worker()
            try:
                worker.send(message)
                return worker
            except OSError:  # BrokenPipeError: the worker is gone
                if attempt:
                    raise
                self._discard_worker()
        raise AssertionError("unreachable")

    def _discard_worker(self) -> None:
        """Kill and reap the current worker; the next job starts a fresh one."""
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
            self.stats["worker_restarts"] += 1
