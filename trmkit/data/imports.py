"""What every builder shares: a report of what was read, kept and skipped, and the test/train split.

Builders of every task (tasks/sudoku/build.py, tasks/*.py) count each bad item here with
where it was ("file:line") and why, so nothing is dropped silently, and split
their items with `split_rows`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_MESSAGES = 20  # skipped-item messages kept per report ...
MAX_MESSAGES_PER_REASON = 3  # ... and per reason, so every reason shows up


@dataclass
class ImportReport:
    """What an importer or generator read, kept and skipped (and why)."""

    source: str
    lines: int = 0  # items examined (comments and blank lines excluded)
    accepted: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)  # first few per reason, "file:line: reason: detail"
    seconds: float = 0.0  # time spent checking items (0: not timed)
    unit: str = "items"  # what an item is, for the summary ("puzzles")
    notes: list[str] = field(default_factory=list)  # automatic choices the reader made, and why

    @property
    def skipped(self) -> int:
        return sum(self.skipped_by_reason.values())

    def skip(self, where: str, reason: str, detail: str) -> None:
        """Count one bad item and keep its message if there is room."""
        self.skipped_by_reason[reason] = self.skipped_by_reason.get(reason, 0) + 1
        if len(self.messages) < MAX_MESSAGES and self.skipped_by_reason[reason] <= MAX_MESSAGES_PER_REASON:
            self.messages.append(f"{where}: {reason}: {detail}")

    def summary_lines(self) -> list[str]:
        """Human-readable summary for a log."""
        timing = ""
        if self.seconds > 0:
            timing = f" ({self.seconds:.1f} s, {self.lines / self.seconds:.0f} {self.unit}/s)"
        out = [f"{self.source}: {self.lines} {self.unit} read, {self.accepted} kept, {self.skipped} skipped{timing}"]
        out += [f"  note: {n}" for n in self.notes]
        out += [f"  skipped {n} x {reason}" for reason, n in sorted(self.skipped_by_reason.items())]
        out += [f"  {m}" for m in self.messages]
        if self.skipped > len(self.messages):
            out.append(f"  ... and {self.skipped - len(self.messages)} more skipped")
        return out

    def to_dict(self) -> dict[str, Any]:
        """The counts for meta.json's "build" section."""
        return {"read": self.lines, "accepted": self.accepted, "skipped": self.skipped,
                "skipped_by_reason": dict(self.skipped_by_reason), "skipped_examples": list(self.messages)}


def split_rows(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random (test, train) indices, each in source order; test_fraction 1 puts everything in test."""
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"--test-fraction must be in [0, 1], got {test_fraction}")
    n_test = int(round(n * test_fraction))
    if 0 < test_fraction < 1 and n >= 2:
        n_test = min(max(n_test, 1), n - 1)  # both splits non-empty when a share was asked for
    order = np.random.default_rng([seed, 1]).permutation(n)
    return np.sort(order[:n_test]), np.sort(order[n_test:])
