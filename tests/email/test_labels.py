"""Label strategies and label maps: Gmail labels, the YAML format and its errors, rule order, the shipped taxonomy."""

from __future__ import annotations

from pathlib import Path

import pytest

from trmkit.data.imports import ImportReport
from trmkit.email.labels import (DEFAULT_TAXONOMY, LabelMap, LabelMapError, apply, explain, gmail_label,
                                 label_map_from_dict, load_label_map, map_labels)
from trmkit.email.mail import Message

TAXONOMY = Path(__file__).resolve().parents[2] / "configs" / "email-taxonomy.yaml"


def msg(label: str | None = None, subject: str = "", body: str = "", sender: str = "", **headers: str) -> Message:
    return Message(subject=subject, sender=sender, body=body, label=label, where="test#0",
                   headers={k.replace("_", "-"): v for k, v in headers.items()})


@pytest.mark.parametrize("value, expected", [
    ("Inbox,Category Promotions,Unread", "Promotions"),
    ("Spam,Category Updates,Unread", "Spam"),
    ("Category Updates,Spam", "Spam"),
    ("Inbox,Unread,Important", None),
    ("", None),
    ("Archived,Trips/2019,Opened", "Trips/2019"),
    ('Inbox,"Work, Projects",Unread', "Work, Projects"),
    ("Category Personal,Family", "Family"),  # the default tab yields to a user label
    ("Category Personal,Inbox", "Personal"),
    ("Inbox, Category Social , Starred", "Social"),
])
def test_gmail_label(value: str, expected: str | None) -> None:
    assert gmail_label(value) == expected


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "map.yaml"
    path.write_text(text)
    return path


def test_load_a_small_map_and_apply_in_order(tmp_path: Path) -> None:
    lm = load_label_map(write(tmp_path, """
categories: [Spam, Work, Newsletter, Finance, Other]
map: {Junk: spam, WORK: Work, Drafts: null}
rules:
  - {field: subject, matches: 'invoice', category: Finance}
  - {header: list-id, matches: '.', category: Newsletter}
  - {field: subject, matches: 'invoice|newsletter', category: Other}
  - {field: sender, matches: '@evil\\.example$', category: Spam, when: always}
default: Other
"""))
    assert lm.categories == ("Spam", "Work", "Newsletter", "Finance", "Other")
    assert lm.mapping == {"junk": "Spam", "work": "Work", "drafts": None}  # targets spelled as in categories
    assert apply(lm, msg(" junk ")) == "Spam"  # keys ignore case and surrounding spaces
    assert apply(lm, msg("work", subject="invoice")) == "Work"  # map before ordinary rules
    assert apply(lm, msg("Inbox", subject="Your INVOICE", List_Id="<x.y>")) == "Finance"  # first rule wins
    assert apply(lm, msg(None, subject="newsletter", List_Id="<x.y>")) == "Newsletter"
    assert apply(lm, msg(None, subject="our newsletter")) == "Other"  # the header rule needs the header
    assert apply(lm, msg("work", sender="boss@evil.example")) == "Spam"  # when: always runs first
    assert apply(lm, msg("drafts", subject="invoice")) is None  # null in map drops the label
    assert apply(lm, msg("Inbox")) == "Other"  # default


def test_null_default_leaves_messages_unmapped_and_map_labels_counts_them() -> None:
    lm = label_map_from_dict({"categories": ["Spam", "Personal"], "map": {"spam-1": "Spam", "ham": "Personal"}})
    assert lm.default is None
    report = ImportReport(source="labels")
    messages = [msg("spam-1"), msg("other-folder"), msg(None), msg("ham")]
    out = list(map_labels(lm, messages, report))
    assert [(m.label, c) for m, c in out] == [("spam-1", "Spam"), ("ham", "Personal")]
    assert (report.lines, report.accepted) == (4, 2)
    assert report.skipped_by_reason == {"label not mapped": 1, "no label": 1}


def test_body_and_label_rules() -> None:
    lm = label_map_from_dict({"categories": ["Spam", "Travel", "Other"], "rules": [
        {"field": "label", "matches": "^spam", "category": "Spam"},
        {"field": "body", "matches": "boarding pass", "category": "Travel"}], "default": "Other"})
    assert apply(lm, msg("spam-2")) == "Spam"
    assert apply(lm, msg("x", body="Here is your Boarding Pass")) == "Travel"
    assert apply(lm, msg("x", body="a" * 20_000 + "boarding pass")) == "Other"  # beyond BODY_RULE_CHARS


@pytest.mark.parametrize("text, pattern", [
    ("categories: [Spam, Work]\nmap: {junk: Spma}\n", r"map: 'junk': 'Spma' is not one of the categories "
                                                       r"\(did you mean 'Spam'\?\).*Fix: use one of Spam, Work"),
    ("categories: [Spam]\nrules:\n  - {field: subject, matches: 'ok', category: Spam}\n"
     "  - {field: subject, matches: '(unclosed', category: Spam}\n",
     r"rules\[1\] \(rule 2\): matches: '\(unclosed' is not a valid regular expression"),
    ("categories: [Spam]\nrules:\n  - {header: List-Id, field: subject, matches: x, category: Spam}\n",
     r"rules\[0\] \(rule 1\): give exactly one of header: NAME or field:"),
    ("categories: [Spam]\nrules:\n  - {field: subjet, matches: x, category: Spam}\n",
     r"rules\[0\] \(rule 1\): field: 'subjet' is not one of subject, sender, body, text, label"),
    ("categories: [Spam]\nrules:\n  - {category: Spam, at_least: 2, signs: [{field: text, matches: x, wieght: 2}]}\n",
     r"rules\[0\] \(rule 1\): signs\[0\]: unknown key 'wieght' \(did you mean 'weight'\?\)"),
    ("categories: [Spam]\nrules:\n  - {category: Spam, signs: [{field: text, matches: x}]}\n",
     r"rules\[0\] \(rule 1\): at_least: must be a positive number"),
    ("categories: [Spam]\nrules:\n  - {category: Spam, at_least: 1, field: body, matches: y, signs: [{field: text, "
     "matches: x}]}\n", r"rules\[0\] \(rule 1\): a rule has either header\|field \+ matches, or signs:, not both"),
    ("categories: [Spam]\nrules:\n  - {category: Spam, at_least: 1, signs: []}\n",
     r"rules\[0\] \(rule 1\): signs: must be a non-empty list"),
    ("categories: [Spam]\nrules:\n  - {category: Spam, at_least: 1, signs: [{header: To, matches: '('}]}\n",
     r"rules\[0\] \(rule 1\): signs\[0\]: matches: '\(' is not a valid regular expression"),
    ("categories: [Spam]\nrules:\n  - {field: subject, matches: x, category: Spam, when: sometimes}\n",
     r"rules\[0\] \(rule 1\): when: 'sometimes'"),
    ("categories: [Spam]\nrules:\n  - {field: subject, match: x, category: Spam}\n",
     r"rules\[0\] \(rule 1\): unknown key 'match' \(did you mean 'matches'\?\)"),
    ("categories: [Spam]\ndefualt: Spam\n", r"unknown key 'defualt' \(did you mean 'default'\?\)"),
    ("categories: [Spam]\ndefault: Ham\n", r"default: 'Ham' is not one of the categories"),
    ("categories: []\n", r"categories: must be a non-empty list"),
    ("categories: [Spam, spam]\n", r"categories: \['Spam', 'spam'\] appear more than once"),
    ("categories: [Spam, Work]\nmap: {a: Spam, A: Work}\n", r"map: 'A' appears twice, as 'Spam' and 'Work'"),
    ("categories: [Spam\n", r"not valid YAML"),
    ("- just a list\n", r"the top level must be a mapping"),
])
def test_label_map_errors_name_the_file_the_key_and_the_fix(tmp_path: Path, text: str, pattern: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(LabelMapError, match=pattern) as err:
        load_label_map(path)
    assert str(err.value).startswith(str(path))


def test_missing_label_map_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope.yaml: no such file.*configs/email-taxonomy.yaml"):
        load_label_map(tmp_path / "nope.yaml")


def test_categories_default_to_the_taxonomy() -> None:
    assert label_map_from_dict({"map": {"x": "travel"}}).categories == DEFAULT_TAXONOMY
    assert LabelMap().categories == DEFAULT_TAXONOMY


def test_shipped_taxonomy_maps_spamassassin_gmail_and_csv_labels() -> None:
    lm = load_label_map(TAXONOMY)
    assert lm.categories == DEFAULT_TAXONOMY and lm.default == "Other"
    expected = {"spam-1": "Spam", "spam-2": "Spam", "easy-ham-1": "Personal", "easy-ham-2": "Personal",
                "hard-ham-1": "Newsletter", "Promotions": "Promotional", "Social": "Social", "Forums": "Newsletter",
                "Spam": "Spam", "Primary": "Personal", "Personal": "Personal", "ham": "Personal", "spam": "Spam",
                "Work": "Work", "Bank": "Finance", "Receipts": "Shopping", "Travel": "Travel"}
    for raw, category in expected.items():
        assert apply(lm, msg(raw, List_Id="<list.example.com>")) == category, raw  # map beats the List-Id rule
    assert all(c in DEFAULT_TAXONOMY for c in lm.mapping.values() if c is not None)
    # Updates is left to the rules: transactions first, then bulk headers, then Other
    assert apply(lm, msg("Updates", subject="Your order has shipped", List_Unsubscribe="<mailto:x>")) == "Shopping"
    assert apply(lm, msg("Updates", subject="Your e-invoice for May")) == "Finance"
    assert apply(lm, msg("Updates", subject="Uçuş rezervasyonunuz")) == "Travel"
    assert apply(lm, msg("Updates", subject="Weekly digest", Precedence="bulk")) == "Newsletter"
    assert apply(lm, msg("Updates", subject="Hello")) == "Other"
    assert apply(lm, msg("Drafts")) is None


def test_the_mailing_list_corpus_map_names_each_list_by_its_list_id() -> None:
    """configs/email-lists.yaml (the third corpus of docs/email.md): --label-from header:List-Id gives the
    raw label; each list is a class, any other list 'other-list', a message without List-Id no label."""
    lm = load_label_map(TAXONOMY.parent / "email-lists.yaml")
    expected = {"Irish Linux Users' Group <ilug.linux.ie>": "ilug", "<fork.xent.com>": "fork",
                "Freshrpms RPM discussion list <rpm-zzzlist.freshrpms.net>": "rpm-list",
                "<exmh-users.spamassassin.taint.org>": "exmh-users",
                "<exmh-workers.spamassassin.taint.org>": "exmh-workers",
                "Talk about SpamAssassin <spamassassin-talk.example.sourceforge.net>": "spamassassin-talk",
                "<secprog.list-id.securityfocus.com>": "other-list"}
    for raw, category in expected.items():
        assert apply(lm, msg(raw)) == category, raw
    assert apply(lm, msg(None)) is None


def test_a_scored_rule_adds_the_weights_of_the_signs_that_match() -> None:
    lm = label_map_from_dict({"categories": ["Spam", "Other"], "default": "Other", "rules": [
        {"category": "Spam", "at_least": 3, "signs": [
            {"field": "text", "matches": "click here", "weight": 2},
            {"field": "subject", "matches": "free", "weight": 1},
            {"header": "X-Priority", "matches": "^1"}]}]})
    assert apply(lm, msg(subject="A free gift", body="Click HERE now")) == "Spam"  # 2 + 1
    assert apply(lm, msg(subject="A free gift", body="no link", X_Priority="1 (Highest)")) == "Other"  # 1 + 1
    assert apply(lm, msg(subject="click here", X_Priority="1")) == "Spam"  # text holds the subject too: 2 + 1
    assert explain(lm, msg(body="click here", subject="free"))[1] == "rule 1 (3 signs, score >= 3)"


def test_the_taxonomy_weak_labels_replies_lists_and_spam_without_a_raw_label() -> None:
    lm = load_label_map(TAXONOMY)
    spam = msg(None, subject="Lowest mortgage rates! Save 50%", sender="deals4u82734@hotmail.com",
               body="Dear friend, click here for a FREE quote. To be removed from our list reply REMOVE.")
    assert apply(lm, spam) == "Spam"
    assert apply(lm, msg(None, subject="Re: the meeting", body="Click here for the agenda", In_Reply_To="<a@b>")) \
        == "Personal"  # a reply in a conversation is correspondence
    assert apply(lm, msg(None, subject="[ILUG] kernel question", List_Id="<ilug.linux.ie>")) == "Newsletter"
    assert apply(lm, msg(None, subject="hello")) == "Other"
