"""Weak labels (`trmkit email weak-label`, `--label-from none`): the taxonomy's rules alone, on the
real SpamAssassin corpus, find >= 80% of its spam as Spam (the target) while marking few
wanted messages as Spam; the command shows counts, a sample with what decided each, and scores."""

from __future__ import annotations

import json
from pathlib import Path

from trmkit import cli
from trmkit.email.labels import load_label_map
from trmkit.email.weak import format_report, weak_label

ROOT = Path(__file__).resolve().parents[2]
TAXONOMY = ROOT / "configs" / "email-taxonomy.yaml"


def test_the_taxonomy_finds_most_spamassassin_spam_without_a_label(spamassassin):
    # the whole corpus, parsed once for this test and test_mail.py's (tests/email/conftest.py)
    report = weak_label(spamassassin.messages, load_label_map(TAXONOMY), against=True, sample=2)
    spam = report.scores()["Spam"]
    easy_as_spam = report.pairs[("Personal", "Spam")] / sum(n for (r, _), n in report.pairs.items() if r == "Personal")
    assert report.seen == 6046 and spam["real"] == 1896
    assert spam["recall"] >= 0.80, spam  # measured 0.828
    assert easy_as_spam <= 0.03, easy_as_spam  # wanted mail (easy ham) marked Spam: measured 2.1%
    text = "\n".join(format_report(report, "folder"))
    assert "decided by: rule" in text and "[Spam] " in text and "recall" in text


def test_weak_label_command_hides_the_raw_label(tmp_path: Path, capsys):
    box = tmp_path / "box" / "spam"
    box.mkdir(parents=True)
    (box / "1.eml").write_text("From: deals48213@hotmail.com\nSubject: FREE offer!!\n\n"
                               "Dear friend, click here. To be removed from our list reply REMOVE.\n")
    (tmp_path / "box" / "ham").mkdir()
    (tmp_path / "box" / "ham" / "2.eml").write_text("From: a@b.org\nSubject: Re: lunch\nIn-Reply-To: <x@y>\n\n"
                                                    "see you at noon\n")
    assert cli.main(["email", "weak-label", str(tmp_path / "box"), "--label-map", str(TAXONOMY),
                     "--against", "folder", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {k: n for k, n in out["counts"].items() if n} == {"Spam": 1, "Personal": 1}  # not the folder "spam"
    assert set(out["counts"]) == set(load_label_map(TAXONOMY).categories)  # every category, 0 included
    assert out["scores"]["Spam"]["recall"] == 1.0 and out["scores"]["Spam"]["precision"] == 1.0
    assert cli.main(["email", "weak-label", str(tmp_path / "box"), "--label-map", str(TAXONOMY)]) == 0
    shown = capsys.readouterr().out
    assert "[Personal]" in shown and "rule" in shown and "against the real labels" not in shown


def test_weak_label_on_a_csv_names_the_rules_its_columns_cannot_fire(tmp_path: Path, capsys):
    csv = tmp_path / "mail.csv"
    csv.write_text("text,label\nDear friend, click here to claim your FREE prize!!,spam\nlunch at noon?,ham\n")
    label_map = tmp_path / "map.yaml"
    label_map.write_text("categories: [Newsletter, Spam, Other]\nrules:\n"
                         "  - {header: List-Id, matches: '.', category: Newsletter}\n"
                         "  - {field: label, matches: spam, category: Spam}\n"
                         "  - {field: subject, matches: '.', category: Other}\ndefault: Other\n")
    assert cli.main(["email", "weak-label", str(csv), "--label-map", str(label_map), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counts"] == {"Other": 2, "Newsletter": 0, "Spam": 0}
    assert out["cannot_fire"] == ["rule 1 (header List-Id ~ /./, -> Newsletter): no message read has the header "
                                  "List-Id", "rule 2 (label ~ /spam/, -> Spam): the raw label is hidden"]
    assert cli.main(["email", "weak-label", str(csv), "--label-map", str(label_map)]) == 0
    shown = capsys.readouterr().out
    assert "Newsletter        0    0.0%" in shown and "rules that cannot fire on this mail (2):" in shown
