"""Test hygiene: no test leaves a process behind.

Every test that starts processes starts them in their own process group (trmkit.procs) and
kills the group on a timeout or a failure. This fixture checks it, per test module: a process
that the module's tests or fixtures started (a descendant of this pytest process that was not
there before the module) and that is still alive a few seconds after the module's fixtures are
torn down fails the module's last test, and is killed with its group. (Per module, not per
test: a module-scoped fixture may keep a worker, such as a sandbox, across its tests.)

Timeouts in the tests are safety nets, not measurements: `SAFETY_TIMEOUT` is generous, so
that the suite passes on a loaded machine (scripts/test.sh --under-load); work is bounded by
steps.

scripts/test.sh runs the tests in several pytest-xdist workers: each worker's own torch work then
takes its share of the cores (`_share_the_cores`), so that two workers' threads never wait on each
other's cores at every OpenMP barrier (the processes the tests start choose their own threads).
The workers take the test files longest first (`LONGEST_FIRST`, with scripts/test.sh's
--no-loadscope-reorder; xdist would order them by their number of tests), so that no worker is left
with a long file after the other has finished: the few long multi-process files came last before.
"""

import os
import signal
import time

import psutil
import pytest

from tests import SAFETY_TIMEOUT  # noqa: F401 (the one safety net, tests/__init__.py)
GRACE_SECONDS = 10.0  # a child may take this long to go after its test (interpreter teardown)


def _share_the_cores() -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if workers > 1:
        import torch
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // workers))


_share_the_cores()

# The longest files, longest first (`pytest --durations=60`, 2026-12-06: each 80-200 s of test time, most
# in processes they start); every other file follows in collection order. A stale list costs time only.
LONGEST_FIRST = ("tests/train/test_distributed.py", "tests/rl/test_lm_fsdp.py", "tests/email/test_email_e2e.py",
                 "tests/rl/test_selfplay.py", "tests/train/test_memory_limit.py", "tests/tasks/test_maze_training.py",
                 "tests/train/test_resume.py", "tests/rl/test_lm_objective.py", "tests/test_e2e.py",
                 "tests/test_api.py", "tests/test_readme.py")


def pytest_collection_modifyitems(session, config, items):
    """Each file's tests stay together and in order; the files in LONGEST_FIRST go first, in its order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


def _descendants() -> dict[int, psutil.Process]:
    try:
        return {p.pid: p for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return {}


def _resource_tracker(p: psutil.Process) -> bool:
    """multiprocessing's resource tracker (started by the first "spawn", e.g. `email predict --workers`):
    one per process, it stays for the next pool and exits when this process does (EOF on its pipe)."""
    return "multiprocessing.resource_tracker" in " ".join(p.cmdline())


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE and not _resource_tracker(p):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _describe(p: psutil.Process) -> str:
    try:
        return f"pid {p.pid}: {' '.join(p.cmdline())[:200]}"
    except psutil.Error:
        return f"pid {p.pid}"


def _kill(procs: list[psutil.Process]) -> None:
    """Kill each leftover with its own process group; one left in pytest's group (started without
    trmkit.procs) is killed alone, never the group: that would kill pytest and its shell."""
    own = os.getpgrp()
    for p in procs:
        try:
            group = os.getpgid(p.pid)
            if group != own:
                os.killpg(group, signal.SIGKILL)
        except (OSError, psutil.Error):
            pass
        try:
            p.kill()
        except psutil.Error:
            pass


@pytest.fixture(autouse=True, scope="module")
def no_process_left_behind(request):
    before = set(_descendants())
    yield
    new = [p for pid, p in _descendants().items() if pid not in before]
    deadline = time.monotonic() + GRACE_SECONDS
    while _alive(new) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _alive(new)
    if left:
        names = "; ".join(_describe(p) for p in left)
        _kill(left)
        pytest.fail(f"{request.node.nodeid} left {len(left)} process(es) running: {names}", pytrace=False)


def pytest_sessionfinish(session, exitstatus):
    """After every fixture is torn down nothing started by the tests may still run."""
    left = _alive(list(_descendants().values()))
    if left:
        print("\nprocesses left running at the end of the tests (killed): "
              + "; ".join(_describe(p) for p in left))
        _kill(left)
        session.exitstatus = 1
