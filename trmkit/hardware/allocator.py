"""The C allocator: whether glibc's malloc keeps freed memory for reuse or returns it at once.

Process-wide settings made through mallopt; a no-op returning False where the C library is
not glibc (macOS, musl, Windows).
"""

from __future__ import annotations

from typing import Any

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4
RETURN_MMAP_THRESHOLD = 1 << 20  # blocks from 1 MiB up get their own mapping, unmapped when freed
KEEP_TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: free heap top is returned only above ~2 GiB


def _libc() -> Any:
    import ctypes
    return ctypes.CDLL(None)


def keep_freed_memory(trim_threshold: int = KEEP_TRIM_THRESHOLD) -> bool:
    """Make glibc's malloc keep freed memory for reuse; False where the C library is not glibc.

    By default glibc serves blocks over a threshold (128 KB, rising to at most
    32 MB) with their own mmap and unmaps them when freed, and returns the
    heap's free top to the OS. A training step frees and re-allocates the
    same activation buffers every step, so each comes back as fresh pages
    that the kernel faults in and zeroes: 23,000-88,000 page faults per step
    of the paper Sudoku config here. With mmap off (M_MMAP_MAX=0) and a
    high trim threshold (at most ~2 GiB; the planner bounds it by what the
    run's budget holds beyond its live memory, so that free memory kept at
    the top of the heap cannot take the process past the budget) the
    buffers stay in the heap and are reused; the
    memory guard still returns memory explicitly (`trim_heap`) when it
    shrinks the micro-batch. Process-wide and not undone.
    """
    try:
        libc = _libc()
        threshold = max(1 << 20, min(int(trim_threshold), KEEP_TRIM_THRESHOLD))
        return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, threshold))
    except (OSError, AttributeError):  # no mallopt: macOS, Windows
        return False


def return_freed_memory() -> bool:
    """Make glibc's malloc give freed activation buffers back to the OS at once; False where the C
    library is not glibc.

    The opposite of `keep_freed_memory`, for budgets without room to spare: every block of 1 MiB
    or more gets its own mapping and is unmapped when freed, and setting the threshold fixes it
    (glibc would otherwise raise it up to 32 MiB as large blocks are freed, after which they live
    in the heap, where freed holes can leave the resident set above what is live). Costs a page
    fault per 4 KiB of each new buffer. Process-wide and not undone.
    """
    try:
        libc = _libc()
        return (bool(libc.mallopt(M_MMAP_THRESHOLD, RETURN_MMAP_THRESHOLD))
                and bool(libc.mallopt(M_TRIM_THRESHOLD, RETURN_MMAP_THRESHOLD)))
    except (OSError, AttributeError):  # no mallopt: macOS, Windows
        return False


def trim_heap() -> bool:
    """Return free heap memory to the OS (glibc malloc_trim); False where there is none."""
    try:
        return bool(_libc().malloc_trim(0))
    except (OSError, AttributeError):  # not glibc: macOS, musl, Windows
        return False
