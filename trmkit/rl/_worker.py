"""The sandbox worker: runs whitelisted Python functions for trmkit.rl.sandbox, one JSON line per job.

The parent (``trmkit.rl.sandbox.Sandbox``) starts it as ``python -I -S _worker.py '<config json>'``
in an empty temporary directory with an empty environment. It uses the standard library only,
on purpose: with -S there is no site-packages, and trmkit is not importable from here.

The parent's AST whitelist is the main defence and runs before anything reaches this process.
This worker adds the layers that hold even if a program got past it:

- resource limits set once at start: address space (RLIMIT_AS), no file writes (RLIMIT_FSIZE 0),
  no new processes (RLIMIT_NPROC 0; the kernel does not enforce it for root), no core files,
  few file descriptors; a low recursion limit;
- per job, a CPU interval timer (ITIMER_PROF) whose handler raises inside the job, so ordinary
  loops end as "timeout" and the worker lives on; behind it a soft RLIMIT_CPU a little above,
  so the kernel kills the worker (SIGXCPU) if the timer was defeated;
- each run gets a fresh namespace whose ``__builtins__`` is a fresh copy of SAFE_BUILTINS;
- an audit hook (PEP 578), installed once start-up is over and never removable, refuses every
  audited action (open, importing a module not yet loaded, os.system, fork, exec*, kill,
  sockets, ctypes, frame and code-object access, ...) except compiling and running the job
  and moving the CPU limit;
- every job runs twice in fresh namespaces and a result that differs between the two runs is
  reported as "nondeterministic", never returned.

What this process cannot stop, by itself, is code that reaches interpreter internals (possible
only without the parent's whitelist, e.g. ``len.__self__`` is the real builtins module): such
code can still write to its own stdout or spin in C. The parent's wall-clock limit and its
bounded, id-checked reads are the backstop for that; the whitelist is what forbids it.

Two policies, chosen by the config's ``"policy"``: ``"small"`` (the default, above) and ``"azr"``
(``_worker_azr.py``: programs in the Absolute Zero Reasoner's formats, checked first by
trmkit.rl.azr.policy). The process limits and the audit hook are the same for both.

Protocol: one JSON object per line on stdin ``{"id", "source", "func", "args"}``; one JSON
object per line on stdout ``{"id", "kind", "value", "reason"}`` (plus ``"retire": true`` when the
parent must replace this worker before the next job). The first line written is a
handshake ``{"ready": true, "policy", "builtins": [...], "modules": [...], "limits": {...},
"notes": [...]}``.
"""

import builtins
import json
import math
import os
import resource
import signal
import sys

# The only callables a job sees. trmkit.rl.check.ALLOWED_CALLS must list the same names
# (the parent compares them with the handshake); keep the two in step.
SAFE_NAMES = ("abs", "all", "any", "enumerate", "len", "list", "max", "min",
              "range", "reversed", "sorted", "sum", "zip")
SAFE_BUILTINS = {name: getattr(builtins, name) for name in SAFE_NAMES}
REASON_CHARS = 300  # reasons are cut to this length so a reply stays small


class CpuTimeLimit(BaseException):
    """Raised by the CPU timer inside a job. A BaseException, so ``except Exception`` in
    hostile code (only possible without the whitelist) does not swallow it."""


class BadOutput(Exception):
    """The job's result is not a small value made of ints, bools, lists and tuples."""


class Timer:
    """ITIMER_PROF for one run: the SIGPROF handler raises only while armed, so a signal that
    arrives just after the job returned cannot break the worker's own code."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.armed = False

    def __call__(self, signum, frame):
        if self.armed:
            self.armed = False
            raise CpuTimeLimit()

    def start(self) -> None:
        self.armed = True
        signal.setitimer(signal.ITIMER_PROF, self.seconds)

    def stop(self) -> None:
        self.armed = False
        signal.setitimer(signal.ITIMER_PROF, 0)


def set_limit(name: str, soft: int, hard: int | None, limits: dict, notes: list) -> None:
    """Lower one resource limit; a refusal (some kernels, some containers) becomes a note."""
    which = getattr(resource, name)
    cur_soft, cur_hard = resource.getrlimit(which)
    hard = cur_hard if hard is None else hard
    if cur_hard != resource.RLIM_INFINITY:  # cannot go above the hard limit we inherited
        soft, hard = min(soft, cur_hard), min(hard, cur_hard)
    try:
        resource.setrlimit(which, (soft, hard))
        limits[name] = [soft, hard]
    except (ValueError, OSError) as e:
        notes.append(f"{name} not set ({e})")


def set_process_limits(config: dict) -> tuple[dict, list]:
    """The limits that hold for the worker's whole life (see the module docstring)."""
    limits, notes = {}, []
    memory = int(config["memory_bytes"])
    set_limit("RLIMIT_AS", memory, memory, limits, notes)
    set_limit("RLIMIT_FSIZE", 0, 0, limits, notes)
    set_limit("RLIMIT_CORE", 0, 0, limits, notes)
    set_limit("RLIMIT_NOFILE", int(config["max_open_files"]), int(config["max_open_files"]),
              limits, notes)
    if hasattr(resource, "RLIMIT_NPROC"):
        set_limit("RLIMIT_NPROC", 0, 0, limits, notes)
        if os.getuid() == 0:
            notes.append("RLIMIT_NPROC is not enforced for root; the audit hook still refuses fork")
    sys.setrecursionlimit(int(config["recursion_limit"]))
    return limits, notes


def refuse_side_effects(event: str, args: tuple) -> None:
    """The audit hook: everything a job could do to the outside world raises here."""
    if event in ("compile", "exec"):
        return
    if event == "resource.setrlimit" and args and args[0] == resource.RLIMIT_CPU:
        return
    raise PermissionError(f"sandbox: {event!r} is not allowed")


def arm_cpu_backstop(cpu_seconds: float) -> None:
    """Soft RLIMIT_CPU a little above what this job may use (two runs, each up to cpu_seconds):
    SIGXCPU kills the worker if the interval timer did not stop the job."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = usage.ru_utime + usage.ru_stime
    soft = math.ceil(used + 2 * cpu_seconds + 1)
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def encode(value, max_chars: int) -> str:
    """The result as compact JSON, or BadOutput naming why not. Exact types only (no int or
    list subclasses); the item count is bounded before encoding, which also stops cycles."""
    stack, items = [value], 0
    while stack:
        v = stack.pop()
        t = type(v)
        if t is int or t is bool:
            continue
        if t is list or t is tuple:
            items += len(v)
            if items > max_chars:
                raise BadOutput(f"output too large: more than {max_chars} items "
                                f"(max_output_chars={max_chars})")
            stack.extend(v)
            continue
        raise BadOutput(f"unsupported output type {t.__name__}: "
                        "only int, bool and (nested) lists/tuples of them")
    try:
        text = json.dumps(value, separators=(",", ":"))
    except RecursionError:
        raise BadOutput("output nested too deeply") from None
    except ValueError as e:  # e.g. an int with more than 4300 digits
        raise BadOutput(f"output cannot be written: {str(e)[:100]}") from None
    if len(text) > max_chars:
        raise BadOutput(f"output too large: {len(text)} chars of JSON, more than "
                        f"max_output_chars={max_chars}")
    return text


def run_once(code, func: str, args_json: str, timer: Timer):
    """One run in a fresh namespace, under the CPU timer (module body and call alike)."""
    namespace = {"__builtins__": dict(SAFE_BUILTINS)}
    args = json.loads(args_json)
    timer.start()
    try:
        exec(code, namespace)
        fn = namespace.get(func)
        if not callable(fn):
            raise NameError(f"the source defines no function {func!r}")
        return fn(*args)
    finally:
        timer.stop()


def failure(e: BaseException, cpu_seconds: float) -> tuple[str, str]:
    """(kind, reason) for an exception that ended a run."""
    if isinstance(e, CpuTimeLimit):
        return "timeout", f"cpu time limit of {cpu_seconds:g} s exceeded"
    if isinstance(e, MemoryError):
        return "memory", "MemoryError: the memory limit (RLIMIT_AS) was reached"
    if isinstance(e, RecursionError):
        return "recursion", f"RecursionError: {e}"[:REASON_CHARS]
    return "error", f"{type(e).__name__}: {e}"[:REASON_CHARS]


class SmallMode:
    """Today's policy: one function of ints, bools and lists, called with JSON arguments."""

    name = "small"
    builtins = SAFE_NAMES
    modules = ()
    bad_output = BadOutput

    def compile(self, job: dict):
        return compile(job["source"], "<job>", "exec"), json.dumps(job["args"])

    def run(self, compiled, job: dict, timer: Timer):
        code, args_json = compiled
        return run_once(code, job["func"], args_json, timer)

    def encode(self, value, max_chars: int) -> str:
        return encode(value, max_chars)

    def changed(self) -> str | None:
        return None  # nothing a job can reach is shared


def run_job(job: dict, config: dict, timer: Timer, mode=None) -> dict:
    """Compile once, run twice, compare: the reply for one job (without its id)."""
    mode = mode or SmallMode()
    cpu, max_chars = float(config["cpu_seconds"]), int(config["max_output_chars"])
    try:
        compiled = mode.compile(job)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return {"kind": "error", "reason": f"does not compile: {type(e).__name__}: {e}"[:REASON_CHARS]}
    arm_cpu_backstop(cpu)
    texts = []
    for attempt in ("first", "second"):
        try:
            value = mode.run(compiled, job, timer)
            text = mode.encode(value, max_chars)
        except mode.bad_output as e:
            return {"kind": "output", "reason": str(e)}
        except BaseException as e:  # the job's own failure, whatever it raised
            kind, reason = failure(e, cpu)
            if attempt == "second" and kind == "error":
                return {"kind": "nondeterministic",
                        "reason": f"the first run returned {texts[0][:100]}, the second raised {reason}"}
            return {"kind": kind, "reason": reason if attempt == "first" else f"second run: {reason}"}
        finally:
            value = None  # drop a large result before the second run
        texts.append(text)
    if texts[0] != texts[1]:
        return {"kind": "nondeterministic",
                "reason": f"two runs returned different results: {texts[0][:100]} then {texts[1][:100]}"}
    return {"kind": "ok", "value_json": texts[0], "reason": ""}


def load_mode(name: str):
    """SmallMode, or the AZR mode from _worker_azr.py beside this file (loaded by its path: with
    -I this folder is not on sys.path, and must not be, since its other modules would shadow
    the standard library's)."""
    if name != "azr":
        return SmallMode()
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker_azr.py")
    spec = importlib.util.spec_from_file_location("_worker_azr", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.AzrMode()


def reply_line(job_id, reply: dict) -> str:
    """The reply as one JSON line; the value's JSON text is spliced in, not encoded twice."""
    value = reply.pop("value_json", "null")
    head = json.dumps({"id": job_id, **reply})
    return head[:-1] + ', "value": ' + value + "}\n"


def main() -> None:
    config = json.loads(sys.argv[1])
    mode = load_mode(config.get("policy", "small"))  # before the hook: it imports modules
    limits, notes = set_process_limits(config)
    timer = Timer(float(config["cpu_seconds"]))
    signal.signal(signal.SIGPROF, timer)
    out = sys.stdout
    out.write(json.dumps({"ready": True, "policy": mode.name, "builtins": list(mode.builtins),
                          "modules": list(mode.modules), "limits": limits, "notes": notes}) + "\n")
    out.flush()
    sys.addaudithook(refuse_side_effects)  # last: from here on, nothing outside is reachable
    for line in sys.stdin:
        job = json.loads(line)
        try:
            reply = run_job(job, config, timer, mode)
        except MemoryError:  # outside a run, e.g. while encoding: still a memory outcome
            reply = {"kind": "memory", "reason": "MemoryError outside the job's own code"}
        except CpuTimeLimit:
            reply = {"kind": "timeout", "reason": "cpu time limit exceeded"}
        changed = mode.changed()
        if changed:
            reply = {"kind": "error", "retire": True, "reason": f"the program changed {changed}, "
                     "which later jobs share: the worker is replaced"}
        out.write(reply_line(job["id"], reply))
        out.flush()


if __name__ == "__main__":
    main()
