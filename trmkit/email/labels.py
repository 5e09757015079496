"""Raw labels (folder names, Gmail labels, header values, CSV columns) mapped onto categories.

`mail.mailbox.iter_messages` finds each message's *raw* label with a --label-from strategy
(`LabelFrom`): "folder" (the sub-folder of an .eml folder, the Maildir folder with the top one
called INBOX, the mbox file's stem; for CSV/JSONL the label column), "gmail" (the
X-Gmail-Labels header via `gmail_label`; for CSV/JSONL the label column read the same way),
"header:NAME" (the decoded value of header NAME; for CSV/JSONL the column NAME),
"column:NAME" (CSV/JSONL only), "filename:REGEX" (files and mboxes: the regex searched in the
file's name, its first group or the whole match, e.g. Ling-Spam's spmsg* files with
'filename:^(spm|[0-9])') and "none" (no raw label: the map's rules and default alone decide,
weak labels for a mailbox without any; `trmkit email weak-label` shows and measures them);
a label that cannot be found is None. A label map (YAML, see
configs/email-taxonomy.yaml) turns raw labels into the categories
the classifier learns. The map format:

    categories: [Newsletter, Work, Personal, Spam, ...]  # the classes; optional, default DEFAULT_TAXONOMY
    map:                        # raw label -> category; keys match case-insensitively, surrounding
      spam-1: Spam              # spaces ignored; a null value drops messages with that raw label
      Promotions: Promotional
      Drafts: null
    rules:                      # ordered; the first rule that matches wins
      - {header: List-Id, matches: ".", category: Newsletter}          # a header of Message.headers
      - {field: subject, matches: '\\binvoice\\b', category: Finance}  # subject | sender | body | label
      - {field: label, matches: '^spam', category: Spam, when: always} # `when: always`: before `map`
      - {header: Auto-Submitted, matches: 'auto-replied', category: null}  # null: leave these out
      - category: Spam          # a score: the weights of the signs that match add up to at_least
        at_least: 3
        signs: [{field: text, matches: 'click here', weight: 2}, {header: X-Priority, matches: '^1'}]
    default: Other              # a category, or null: messages nothing maps are left out (and counted)

Order of decision in `apply`: rules with `when: always` (in file order), then `map` on the
raw label, then the other rules (`when: unmapped`, the default), then `default`.
Fields: subject, sender, body, text (subject and body), label. Regexes are Python `re`, searched
(not anchored) case-insensitively; write `(?-i:...)` for a
case-sensitive part, and quote them with single quotes in YAML (in double quotes "\\b" is a
backspace). A header rule matches only when the message has that header; the reader keeps the
headers in `mail.mime.HEADER_NAMES` (From, To, Subject, List-Id, List-Unsubscribe, Precedence,
X-Gmail-Labels, X-Folder, ...; 1000 characters each) plus the one --label-from header:NAME
reads; body rules look at the first BODY_RULE_CHARS characters. Every target must be one of
`categories`; errors name the file, the key (rules by 0-based index) and the fix.
"""

from __future__ import annotations

import csv
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import yaml

from trmkit.data.imports import ImportReport
from trmkit.email.mail import Message

DEFAULT_TAXONOMY = ("Newsletter", "Work", "Personal", "Spam", "Promotional", "Social", "Finance", "Travel",
                    "Shopping", "Other")
# Gmail system labels that say where a message sits or what was done with it, not what it is.
GMAIL_IGNORED = frozenset({"inbox", "unread", "opened", "important", "starred", "sent", "archived", "drafts",
                           "draft", "trash", "chat", "chats", "all mail", "snoozed", "scheduled", "muted",
                           "read", "outbox", "sent mail", "imap_notjunk", "imap_junk"})
# Gmail's default tab: a user label says more than "not a promotion".
GMAIL_DEFAULT_CATEGORIES = frozenset({"primary", "personal"})
BODY_RULE_CHARS = 10_000
RULE_FIELDS = ("subject", "sender", "body", "text", "label")  # text: the subject, a line break, the body
_TOP_KEYS = ("categories", "map", "rules", "default")
_RULE_KEYS = ("header", "field", "matches", "category", "when", "signs", "at_least")
_SIGN_KEYS = ("header", "field", "matches", "weight")


class LabelMapError(ValueError):
    """A label map that cannot work; the message names the file, the key and the fix."""


def gmail_label(value: str) -> str | None:
    """The one label that says what a message is, from an X-Gmail-Labels value.

    "Spam" wins; then a Gmail category ("Category Promotions" -> "Promotions"); then the
    first user label; then the default category (Primary/Personal); system labels (Inbox,
    Unread, ...) alone give None. Labels holding commas come quoted ("\\"a,b\\"").
    """
    try:
        labels = [x.strip() for x in next(csv.reader([" ".join(value.split())], skipinitialspace=True), [])]
    except csv.Error:
        labels = [x.strip() for x in value.split(",")]
    labels = [x for x in labels if x]
    if any(x.lower() == "spam" for x in labels):
        return "Spam"
    categories = [x[len("category "):].strip() for x in labels if x.lower().startswith("category ")]
    special = [c for c in categories if c and c.lower() not in GMAIL_DEFAULT_CATEGORIES]
    if special:
        return special[0]
    users = [x for x in labels if not x.lower().startswith("category ") and x.lower() not in GMAIL_IGNORED]
    if users:
        return users[0]
    return next((c for c in categories if c), None)


@dataclass(frozen=True)
class LabelFrom:
    """A parsed --label-from: kind is folder, gmail, header or column; name for the last two."""

    kind: str
    name: str = ""


def label_strategy(label_from: str) -> LabelFrom:
    kind, _, name = label_from.partition(":")
    kind, name = kind.strip().lower(), name.strip()
    if kind in ("folder", "gmail", "none") and not name:
        return LabelFrom(kind)
    if kind in ("header", "column") and name:
        return LabelFrom(kind, name)
    if kind == "filename" and name:
        try:
            re.compile(name)
        except re.error as exc:
            raise ValueError(f"label_from={label_from!r}: the regex does not compile ({exc})") from None
        return LabelFrom(kind, name)
    raise ValueError(f"label_from={label_from!r}: use folder, gmail, header:NAME, column:NAME, filename:REGEX or "
                     "none (the label map's rules alone decide: weak labels) "
                     "(e.g. header:X-Folder, column:category, 'filename:^(spm|[0-9])')")


def filename_label(where: str, pattern: str) -> str | None:
    """The raw label a file's name gives under filename:REGEX: the regex's first group when it has
    one, else the whole match; a name it does not match (or matches empty) gives None."""
    name = Path(where.split("#", 1)[0]).name  # an mbox message's where is path#index
    found = re.search(pattern, name)
    if found is None:
        return None
    return (found.group(1) if found.re.groups else found.group(0)) or None


def _header_lookup(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value.strip() or None
    return None


def email_label(msg: Message, folder: str | None, strategy: LabelFrom) -> str | None:
    """The raw label of a decoded e-mail under `strategy` (`folder`: where the reader found it)."""
    if strategy.kind == "none":
        return None
    if strategy.kind == "folder":
        return folder
    if strategy.kind == "gmail":
        return gmail_label(_header_lookup(msg.headers, "X-Gmail-Labels") or "")
    if strategy.kind == "filename":
        return filename_label(msg.where, strategy.name)
    return _header_lookup(msg.headers, strategy.name)


@dataclass(frozen=True)
class Test:
    """A regex on one header or one field of a message."""

    pattern: re.Pattern[str]
    header: str | None = None  # a header name of Message.headers, or ...
    field: str | None = None  # ... one of RULE_FIELDS

    def hit(self, msg: Message) -> bool:
        if self.header is not None:
            value = next((v for k, v in msg.headers.items() if k.lower() == self.header.lower()), None)
        elif self.field == "body":
            value = msg.body[:BODY_RULE_CHARS]
        elif self.field == "text":
            value = f"{msg.subject}\n{msg.body[:BODY_RULE_CHARS]}"
        elif self.field == "label":
            value = msg.label
        else:
            value = getattr(msg, str(self.field))
        return value is not None and self.pattern.search(value) is not None

    def describe(self) -> str:
        return f"{'header ' + self.header if self.header else self.field} ~ /{self.pattern.pattern[:40]}/"


@dataclass(frozen=True)
class Rule:
    """One rule: a regex test, or weighted signs whose weights must add up to `at_least` (a score,
    as a spam filter counts its signs); `always` rules run before the map."""

    category: str | None
    tests: tuple[tuple[Test, float], ...]  # (test, weight)
    at_least: float = 1.0
    always: bool = False

    def score(self, msg: Message) -> float:
        return sum(w for t, w in self.tests if t.hit(msg))

    def matches(self, msg: Message) -> bool:
        """score >= at_least, stopping at the sign that reaches it when no weight is negative (no later
        sign can take the score back down): the spam rule's text signs are the costly regexes of a
        weak-labelling pass (measured: 24% less CPU over SpamAssassin's 6,046 messages)."""
        if any(w < 0 for _, w in self.tests):
            return self.score(msg) >= self.at_least
        score = 0.0
        for test, weight in self.tests:
            if test.hit(msg):
                score += weight
                if score >= self.at_least:
                    return True
        return score >= self.at_least

    def describe(self) -> str:
        if len(self.tests) == 1 and self.at_least == 1.0:
            return self.tests[0][0].describe()
        return f"{len(self.tests)} signs, score >= {self.at_least:g}"


@dataclass
class LabelMap:
    """Categories, the raw-label map (lower-cased keys), ordered rules and the default."""

    categories: tuple[str, ...] = DEFAULT_TAXONOMY
    mapping: dict[str, str | None] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    default: str | None = None
    source: str = ""  # the file it came from, for messages


def apply(label_map: LabelMap, msg: Message) -> str | None:
    """The category of `msg`, or None (unmapped: the caller skips and counts it)."""
    return explain(label_map, msg)[0]


def explain(label_map: LabelMap, msg: Message) -> tuple[str | None, str]:
    """(category, what decided it: "rule 4 (header List-Id ~ /./)", "map 'spam-1'" or "default")."""
    for i, rule in enumerate(label_map.rules):
        if rule.always and rule.matches(msg):
            return rule.category, f"rule {i + 1} ({rule.describe()})"
    if msg.label is not None:
        key = msg.label.strip().lower()
        if key in label_map.mapping:
            return label_map.mapping[key], f"map {msg.label!r}"
    for i, rule in enumerate(label_map.rules):
        if not rule.always and rule.matches(msg):
            return rule.category, f"rule {i + 1} ({rule.describe()})"
    return label_map.default, "default"


def map_labels(label_map: LabelMap, messages: Iterable[Message],
               report: ImportReport | None = None) -> Iterator[tuple[Message, str]]:
    """(message, category) for each message the map places; the others counted in `report`.

    Use a report of its own (the label stage): it counts lines = messages seen, accepted =
    placed, and skips "no label" (no raw label, nothing matched) or "label not mapped".
    """
    for msg in messages:
        if report is not None:
            report.lines += 1
        category = apply(label_map, msg)
        if category is None:
            if report is not None:
                reason = "label not mapped" if msg.label else "no label"
                report.skip(msg.where, reason, f"raw label {msg.label!r}, map {label_map.source or '(in memory)'}")
            continue
        if report is not None:
            report.accepted += 1
        yield msg, category


# ---------------------------------------------------------------- loading


def load_label_map(path: str | Path) -> LabelMap:
    """A LabelMap from YAML (format in the module docstring); LabelMapError names the problem."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"label map {path}: no such file. Fix: pass an existing YAML, e.g. "
                                "configs/email-taxonomy.yaml (the default 10-category taxonomy)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise LabelMapError(f"{path}: not valid YAML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise LabelMapError(f"{path}: not UTF-8 (byte {exc.start}). Fix: save it as UTF-8") from None
    return label_map_from_dict(data, str(path))


def label_map_from_dict(data: Any, source: str = "(label map)") -> LabelMap:
    """A checked LabelMap from the parsed YAML mapping (see the module docstring)."""
    if not isinstance(data, dict):
        raise LabelMapError(f"{source}: the top level must be a mapping with keys {', '.join(_TOP_KEYS)}")
    _no_unknown_keys(data, _TOP_KEYS, source, "")
    categories = _categories(data.get("categories", list(DEFAULT_TAXONOMY)), source)
    mapping_in = data.get("map") or {}
    if not isinstance(mapping_in, dict):
        raise LabelMapError(f"{source}: map: must be a mapping of raw label -> category")
    mapping: dict[str, str | None] = {}
    for raw, target in mapping_in.items():
        key = str(raw).strip().lower()
        category = _category(target, categories, source, f"map: {raw!r}", allow_null=True)
        if key in mapping and mapping[key] != category:
            raise LabelMapError(f"{source}: map: {raw!r} appears twice, as {mapping[key]!r} and {category!r} "
                                "(keys are case-insensitive). Fix: keep one")
        mapping[key] = category
    rules_in = data.get("rules") or []
    if not isinstance(rules_in, list):
        raise LabelMapError(f"{source}: rules: must be a list of {{header|field, matches, category}}")
    rules = tuple(_rule(r, i, categories, source) for i, r in enumerate(rules_in))
    default = _category(data.get("default"), categories, source, "default", allow_null=True)
    return LabelMap(categories=categories, mapping=mapping, rules=rules, default=default, source=source)


def _no_unknown_keys(data: dict, valid: tuple[str, ...], source: str, where: str) -> None:
    for key in data:
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise LabelMapError(f"{source}: {where}unknown key {key!r}{hint}; valid keys: {', '.join(valid)}")


def _categories(value: Any, source: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(c, str) and c.strip() for c in value):
        raise LabelMapError(f"{source}: categories: must be a non-empty list of names, e.g. "
                            f"[{', '.join(DEFAULT_TAXONOMY[:3])}]")
    cats = tuple(c.strip() for c in value)
    dup = sorted({c for c in cats if [x.lower() for x in cats].count(c.lower()) > 1})
    if dup:
        raise LabelMapError(f"{source}: categories: {dup} appear more than once")
    return cats


def _category(value: Any, categories: tuple[str, ...], source: str, key: str, allow_null: bool) -> str | None:
    """`value` spelled as in `categories` (matched case-insensitively), or None where allowed."""
    if value is None and allow_null:
        return None
    by_lower = {c.lower(): c for c in categories}
    if isinstance(value, str) and value.strip().lower() in by_lower:
        return by_lower[value.strip().lower()]
    close = difflib.get_close_matches(str(value), categories, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise LabelMapError(f"{source}: {key}: {value!r} is not one of the categories{hint}. Fix: use one of "
                        f"{', '.join(categories)}, or add it to categories:")


def _rule(data: Any, index: int, categories: tuple[str, ...], source: str) -> Rule:
    where = f"rules[{index}] (rule {index + 1}): "
    if not isinstance(data, dict):
        raise LabelMapError(f"{source}: {where}must be a mapping like "
                            "{header: List-Id, matches: '.', category: Newsletter}")
    _no_unknown_keys(data, _RULE_KEYS, source, where)
    if "category" not in data:
        raise LabelMapError(f"{source}: {where}category: is missing")
    when = data.get("when", "unmapped")
    if when not in ("always", "unmapped"):
        raise LabelMapError(f"{source}: {where}when: {when!r}; use always (before map) or unmapped (the default)")
    category = _category(data["category"], categories, source, f"{where}category", allow_null=True)
    if "signs" in data:
        return _scored_rule(data, where, category, when == "always", source)
    if "at_least" in data:
        raise LabelMapError(f"{source}: {where}at_least: applies to a rule with signs:")
    return Rule(category=category, tests=((_test(data, where, source), 1.0),), always=when == "always")


def _scored_rule(data: dict, where: str, category: str | None, always: bool, source: str) -> Rule:
    """A rule with signs: [{header|field, matches, weight}, ...] and at_least: the score it needs."""
    signs = data["signs"]
    if "header" in data or "field" in data or "matches" in data:
        raise LabelMapError(f"{source}: {where}a rule has either header|field + matches, or signs:, not both")
    if not isinstance(signs, list) or not signs:
        raise LabelMapError(f"{source}: {where}signs: must be a non-empty list of "
                            "{field: text, matches: REGEX, weight: 2}")
    at_least = data.get("at_least")
    if not isinstance(at_least, (int, float)) or isinstance(at_least, bool) or at_least <= 0:
        raise LabelMapError(f"{source}: {where}at_least: must be a positive number (the score the signs' "
                            "weights must add up to)")
    tests = []
    for j, sign in enumerate(signs):
        at = f"{where}signs[{j}]: "
        if not isinstance(sign, dict):
            raise LabelMapError(f"{source}: {at}must be a mapping like {{field: text, matches: REGEX, weight: 1}}")
        _no_unknown_keys(sign, _SIGN_KEYS, source, at)
        weight = sign.get("weight", 1)
        if not isinstance(weight, (int, float)) or isinstance(weight, bool):
            raise LabelMapError(f"{source}: {at}weight: must be a number")
        tests.append((_test(sign, at, source), float(weight)))
    return Rule(category=category, tests=tuple(tests), at_least=float(at_least), always=always)


def _test(data: dict, where: str, source: str) -> Test:
    if ("header" in data) == ("field" in data):
        raise LabelMapError(f"{source}: {where}give exactly one of header: NAME or field: "
                            f"{'|'.join(RULE_FIELDS)}")
    if "field" in data and data["field"] not in RULE_FIELDS:
        raise LabelMapError(f"{source}: {where}field: {data['field']!r} is not one of {', '.join(RULE_FIELDS)}")
    if "header" in data and not (isinstance(data["header"], str) and data["header"].strip()):
        raise LabelMapError(f"{source}: {where}header: must be a header name such as List-Id")
    if not isinstance(data.get("matches"), str):
        raise LabelMapError(f"{source}: {where}matches: must be a regular expression in quotes")
    try:
        pattern = re.compile(data["matches"], re.IGNORECASE)
    except re.error as exc:
        raise LabelMapError(f"{source}: {where}matches: {data['matches']!r} is not a valid regular "
                            f"expression ({exc})") from None
    return Test(pattern=pattern, header=data.get("header"), field=data.get("field"))
