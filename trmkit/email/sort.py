"""`trmkit email sort`: file classified messages into the folders of a Maildir, as copies.

The originals are only read, never moved or changed. Each message is copied into
``INTO/.<label>/cur/`` (Maildir++: a folder per label, ``uncertain`` included when thresholds
are set) by the Maildir delivery protocol (written to ``tmp/``, fsync'd, linked into ``cur/``:
a mail reader never sees half a message), then read back and compared with the source's bytes
(byte for byte). ``--stamp`` adds an ``X-Trmkit-Label`` header line at the top of the copy instead of
copying the bytes unchanged; the verification then checks that the copy is that line plus the
original. A different message under the same name gets a numbered name.

Sorting is idempotent: every message has at most one copy in INTO. Before filing, the copies
of earlier runs are found (the same name, or that name numbered, in any label's folder, holding
the same message, stamped or not). One in the right folder, as it would be written, is left as
it is; one in another label's folder (a rerun with other thresholds, or another model) is moved:
the new copy is delivered and verified first, then the old one is removed, so a crash between
the two leaves two copies, never none. ``--dry-run`` prints what it would do and writes nothing.

Sources are message files (an .eml folder or a Maildir): their bytes are what is copied. An mbox
or CSV/JSONL source is refused by name (`email predict` gives each message's `source`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from trmkit.files import deliver, fsync_dir

STAMP_HEADER = "X-Trmkit-Label"
_SAFE = re.compile(r"[^A-Za-z0-9_\-]+")


@dataclass
class SortReport:
    copied: int = 0  # new copies (moved ones included)
    already: int = 0  # found in place from an earlier run
    moved: int = 0  # found in another label's folder: filed anew, the old copy removed
    renamed: int = 0  # another message had the name: a numbered name was used
    per_label: dict[str, int] = field(default_factory=dict)

    def summary(self, into: Path, dry_run: bool = False) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.per_label.items())) or "none"
        verb = "would file" if dry_run else "filed"
        return (f"sort: {verb} {self.copied} new copies ({counts}) into {into}; {self.moved} moved from another "
                f"label's folder (the old copy removed), {self.already} already in place, {self.renamed} under a "
                "numbered name; every message has one copy in INTO; the originals are untouched")


def folder_name(label: str) -> str:
    """A Maildir++ folder for a label: ".Spam", ".hard-ham" (other characters become _)."""
    return "." + (_SAFE.sub("_", label).strip("_") or "unnamed")


def ensure_maildir(path: Path) -> None:
    for sub in ("cur", "new", "tmp"):
        (path / sub).mkdir(parents=True, exist_ok=True)


def stamped(data: bytes, label: str, probability: float) -> bytes:
    newline = b"\r\n" if b"\r\n" in data[:4096] else b"\n"
    return f"{STAMP_HEADER}: {label}; p={probability:.4f}".encode() + newline + data


def unstamped(copy: bytes) -> bytes:
    """A copy's message without the stamp line `stamped` put on top (as it is where there is none)."""
    if copy.startswith(STAMP_HEADER.encode() + b":"):
        return copy[copy.index(b"\n") + 1:] if b"\n" in copy else b""
    return copy


class Filed:
    """The copies already in INTO's label folders, by file name ("name" and its numbered "name.N")."""

    def __init__(self, into: Path):
        self.by_name: dict[str, list[Path]] = {}
        for cur in sorted(into.glob(".*/cur")):
            for path in sorted(cur.iterdir()):
                self.add(path)

    def add(self, path: Path) -> None:
        base = _NUMBERED.sub("", path.name)
        for key in {path.name, base}:
            self.by_name.setdefault(key, []).append(path)

    def remove(self, path: Path) -> None:
        for paths in self.by_name.values():
            if path in paths:
                paths.remove(path)

    def copies_of(self, name: str, data: bytes) -> list[Path]:
        """Earlier copies of the message `data` filed under `name` (or a numbered `name`)."""
        found = []
        for path in self.by_name.get(name, []):
            if path.name != name and _NUMBERED.sub("", path.name) != name:
                continue
            try:
                copy = path.read_bytes()
            except FileNotFoundError:
                continue
            if copy == data or unstamped(copy) == data:
                found.append(path)
        return found


_NUMBERED = re.compile(r"\.\d+$")


def sort_one(source: Path, label: str, probability: float, into: Path, stamp: bool,
             report: SortReport, filed: Filed) -> Path:
    """File one message's copy in its label's folder (moving an earlier copy from another label's
    folder) and verify it; the path it is at."""
    data = source.read_bytes()
    copy = stamped(data, label, probability) if stamp else data
    folder = into / folder_name(label)
    earlier = filed.copies_of(source.name, data)
    in_place = [p for p in earlier if p.parent == folder / "cur" and p.read_bytes() == copy]
    if in_place:
        report.already += 1
        _remove(earlier, keep=in_place[0], filed=filed)
        return in_place[0]
    ensure_maildir(folder)
    target = _deliver(source.name, copy, folder, report)
    filed.add(target)
    report.copied += 1
    report.moved += bool(earlier)
    report.per_label[label] = report.per_label.get(label, 0) + 1
    _remove(earlier, keep=target, filed=filed)
    return target


def _deliver(name: str, copy: bytes, folder: Path, report: SortReport) -> Path:
    """Deliver `copy` into folder/cur under `name` (numbered if the name is taken) and read it back."""
    n, candidate = 0, name
    while not deliver(copy, folder / "tmp", folder / "cur" / candidate):
        n += 1
        candidate = f"{name}.{n}"
    target = folder / "cur" / candidate
    if target.read_bytes() != copy:
        raise OSError(f"{target}: the copy does not read back as written; the original is untouched")
    report.renamed += n > 0
    return target


def _remove(copies: list[Path], keep: Path, filed: Filed) -> None:
    """Remove the earlier copies of a message but `keep` (verified in place first)."""
    for path in copies:
        if path != keep:
            path.unlink(missing_ok=True)
            filed.remove(path)
            fsync_dir(path.parent)


def sort_messages(predictions, into: Path, stamp: bool = False, dry_run: bool = False,
                  log: Callable[[str], None] = print) -> SortReport:
    """predictions: (source path, prediction dict) pairs, as `email predict` makes them."""
    report = SortReport()
    filed = Filed(into)
    for source, pred in predictions:
        source = Path(source)
        if dry_run:
            _plan_one(source, pred, into, filed, report, log)
            continue
        sort_one(source, pred["label"], pred["probability"], into, stamp, report, filed)
    return report


def _plan_one(source: Path, pred: dict, into: Path, filed: Filed, report: SortReport, log) -> None:
    """What sort_one would do with one message, said and counted; nothing written."""
    folder = into / folder_name(pred["label"]) / "cur"
    earlier = filed.copies_of(source.name, source.read_bytes())
    if any(p.parent == folder for p in earlier):
        report.already += 1
        return
    log(f"would {'move' if earlier else 'copy'} {earlier[0] if earlier else source} -> {folder} "
        f"({pred['label']}, p={pred['probability']:.3f})")
    report.copied += 1
    report.moved += bool(earlier)
    report.per_label[pred["label"]] = report.per_label.get(pred["label"], 0) + 1
