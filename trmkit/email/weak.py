"""Weak labels (`trmkit email weak-label`): a mailbox sorted by the label map's rules alone.

A user without labels gets categories from the map's rules (headers, subject and body signs, a
spam score) and its default, never from a folder name or a Gmail label. Before training on them
the user sees how many messages each category got and a sample of each with what decided it
(`labels.explain`). With --against STRATEGY (folder, gmail, header:NAME, ...) the real labels,
mapped by the same map, measure the weak ones: a confusion table and each category's recall
(of the real category, the share the rules found) and precision. To train on weak labels:
`trmkit data email --label-from none --label-map MAP`.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

from trmkit.email.labels import LabelMap, explain
from trmkit.email.mail import Message

Log = Callable[[str], None]


@dataclass
class WeakReport:
    """What the rules decided, and (with real labels) how it compares."""

    counts: Counter = field(default_factory=Counter)  # weak category -> messages
    reasons: Counter = field(default_factory=Counter)  # (weak category, what decided) -> messages
    samples: dict[str, list[tuple[str, str, str, str]]] = field(default_factory=dict)  # (where, subject, sender, why)
    pairs: Counter = field(default_factory=Counter)  # (real, weak) category names ("None": left out) -> messages
    seen: int = 0
    unlabelled: int = 0  # with real labels asked for: messages that have none (not compared)
    categories: tuple[str, ...] = ()  # every category of the map, shown with 0 when no message got it
    headers: set[str] = field(default_factory=set)  # header names (lower case) of any message read
    cannot_fire: list[str] = field(default_factory=list)  # "rule 3 (...): why", rules this mail cannot set off

    def scores(self) -> dict[str, dict[str, float]]:
        """Per real category: recall (share of its messages the rules gave it) and precision."""
        out = {}
        for cat in sorted({r for r, _ in self.pairs} | {w for _, w in self.pairs}):
            real = sum(n for (r, _), n in self.pairs.items() if r == cat)
            weak = sum(n for (_, w), n in self.pairs.items() if w == cat)
            hit = self.pairs.get((cat, cat), 0)
            out[cat] = {"real": real, "weak": weak, "recall": hit / real if real else float("nan"),
                        "precision": hit / weak if weak else float("nan")}
        return out


def weak_label(messages: Iterable[Message], label_map: LabelMap, against: bool, sample: int,
               seed: int = 0) -> WeakReport:
    """Label each message by the rules alone (its raw label hidden); with `against`, its raw label
    mapped by the same map is the truth it is compared with. Keeps `sample` random examples per
    category (reservoir sampling, seeded)."""
    rng, report, kept = random.Random(seed), WeakReport(categories=label_map.categories), Counter()
    for msg in messages:
        report.seen += 1
        report.headers.update(k.lower() for k in msg.headers)
        weak, why = explain(label_map, dataclasses.replace(msg, label=None))
        report.counts[weak] += 1
        report.reasons[(weak, why)] += 1
        _reservoir(report.samples.setdefault(str(weak), []), kept, str(weak), sample, rng,
                   (msg.where, msg.subject[:70], msg.sender[:40], why))
        if against and msg.label is None:
            report.unlabelled += 1  # no real label to compare with: the rules would be compared with themselves
        elif against:
            report.pairs[(str(explain(label_map, msg)[0]), str(weak))] += 1  # "None": the map leaves it out
    report.cannot_fire = cannot_fire(label_map, report.headers)
    return report


def cannot_fire(label_map: LabelMap, headers: set[str]) -> list[str]:
    """The rules that no message read can set off: the headers they test are in none of them (a CSV
    has no List-Id), or they test the raw label, which weak labelling hides; for a scored rule, the
    signs left cannot reach its at_least."""
    out = []
    for i, rule in enumerate(label_map.rules):
        missing = sorted({t.header for t, _ in rule.tests if t.header and t.header.lower() not in headers})
        dead = [t for t, _ in rule.tests if t.field == "label" or (t.header and t.header.lower() not in headers)]
        reachable = sum(w for t, w in rule.tests if t not in dead)
        if reachable >= rule.at_least:
            continue
        why = (["no message read has the header " + ", ".join(missing)] if missing else []) + \
            (["the raw label is hidden"] if any(t.field == "label" for t in dead) else [])
        out.append(f"rule {i + 1} ({rule.describe()}, -> {rule.category}): {'; '.join(why)}")
    return out


def _reservoir(bucket: list, kept: Counter, key: str, size: int, rng: random.Random, item) -> None:
    kept[key] += 1
    if len(bucket) < size:
        bucket.append(item)
    elif size and (j := rng.randrange(kept[key])) < size:
        bucket[j] = item


def all_counts(report: WeakReport) -> dict[str | None, int]:
    """Messages per category, most first, then every category of the map no message got (0)."""
    counts: dict[str | None, int] = dict(report.counts.most_common())
    return counts | {c: 0 for c in report.categories if c not in counts}


def format_report(report: WeakReport, against: str | None) -> list[str]:
    lines = [f"weak labels of {report.seen} messages (the label map's rules and default alone):"]
    for cat, n in all_counts(report).items():
        lines.append(f"  {str(cat):12s} {n:6d}  {100 * n / max(1, report.seen):5.1f}%")
        top = [(why, k) for (c, why), k in report.reasons.most_common() if c == cat][:3]
        if top:
            lines.append("      decided by: " + "; ".join(f"{why} x{k}" for why, k in top))
    if report.cannot_fire:
        lines.append(f"rules that cannot fire on this mail ({len(report.cannot_fire)}):")
        lines += [f"  {line}" for line in report.cannot_fire]
    lines.append("a sample of each, to confirm before training on them (where | subject | sender | why):")
    for cat, items in sorted(report.samples.items()):
        for where, subject, sender, why in items:
            lines.append(f"  [{cat}] {where} | {subject} | {sender} | {why}")
    if against:
        lines.append(f"against the real labels ({against}, mapped by the same map): recall = share of a real "
                     f"category the rules gave it; {report.unlabelled} messages without a real label not compared")
        for cat, s in report.scores().items():
            lines.append(f"  {cat:12s} real {s['real']:6d}  weak {s['weak']:6d}  recall {s['recall']:.3f}  "
                         f"precision {s['precision']:.3f}")
        cats = sorted({r for r, _ in report.pairs} | {w for _, w in report.pairs})
        lines.append("  confusion (rows real, columns weak): " + " | ".join(cats))
        for r in cats:
            lines.append(f"    {r:12s} " + " ".join(f"{report.pairs.get((r, w), 0):6d}" for w in cats))
    return lines
