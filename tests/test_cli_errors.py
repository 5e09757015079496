"""No traceback reaches a user: every subcommand, given a missing path, a damaged file or the wrong kind of
run, ends with one line that names the path (and the fix), exit code 2. Genuine bugs keep their traceback.
`trmkit runs` lists every readable run and names the unreadable one; each task shows its own headline metric;
report.md lists every metric once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.tiny import EMAIL_TINY, PAIRS_TINY, mail_csv, pairs_jsonl
from trmkit import cli

ROOT = Path(__file__).resolve().parents[1]
BINARY = b"{\xff\x00[not what it should be"


def _copy_run(run: Path, to: Path, damaged: str) -> Path:
    shutil.copytree(run, to)
    (to / damaged).write_bytes(BINARY)
    return to


@pytest.fixture(scope="module")
def w(tmp_path_factory) -> dict[str, str]:
    """A tiny pairs run and a tiny e-mail run (built once), copies of them with one damaged file each, and
    other inputs the cases below name. Every output path a case names is new: nothing is overwritten."""
    t = tmp_path_factory.mktemp("errors")
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(t / "cache"))
    pairs_jsonl(t / "pairs.jsonl")
    assert cli.main(["data", "pairs", "--source", str(t / "pairs.jsonl"), "--out", str(t / "pstore")]) == 0
    (t / "tiny.yaml").write_text(PAIRS_TINY)
    assert cli.main(["train", str(t / "tiny.yaml"), f"run.dir={t / 'prun'}", f"data.path={t / 'pstore'}"]) == 0
    mail_csv(t / "mail.csv")
    assert cli.main(["data", "email", "--source", str(t / "mail.csv"), "--seq-len", "16", "--bag", "0",
                     "--vocab-size", "300", "--out", str(t / "estore")]) == 0
    (t / "etiny.yaml").write_text(EMAIL_TINY)
    assert cli.main(["train", str(t / "etiny.yaml"), f"run.dir={t / 'erun'}", f"data.path={t / 'estore'}"]) == 0
    (t / "eml").mkdir()
    (t / "eml" / "1.eml").write_text("From: a@b.c\nSubject: cheap prize\n\nwin money now\n")
    for name in ("bad.json", "bad.yaml", "bad.csv", "bad.jsonl"):
        (t / name).write_bytes(BINARY)
    _copy_run(t / "prun", t / "p-weights", "weights.safetensors")
    _copy_run(t / "prun", t / "p-config", "config.yaml")
    _copy_run(t / "prun", t / "p-summary", "summary.json")
    _copy_run(t / "prun", t / "p-metrics", "metrics.jsonl")
    _copy_run(t / "erun", t / "e-weights", "weights.safetensors")
    _copy_run(t / "erun", t / "e-config", "config.yaml")
    shutil.copytree(t / "pstore", t / "pstore-meta")
    (t / "pstore-meta" / "train" / "meta.json").write_bytes(BINARY)
    shutil.copytree(t / "estore", t / "estore-meta")
    (t / "estore-meta" / "train" / "meta.json").write_bytes(BINARY)
    yield {"t": str(t), "tiny": str(t / "tiny.yaml"), "prun": str(t / "prun"), "erun": str(t / "erun"),
           "pstore": str(t / "pstore"), "estore": str(t / "estore"), "eml": str(t / "eml"),
           "csv": str(t / "mail.csv"), "sa3": str(ROOT / "configs" / "email-sa3.yaml")}
    mp.undo()


# (argv, the path the message must name); {name} is a path of the fixture above
MISSING = [
    ("data pairs --source {t}/nope.jsonl --out {t}/new-1", "{t}/nope.jsonl"),
    ("data email --source {t}/nope --out {t}/new-2", "{t}/nope"),
    ("train {t}/nope.yaml", "{t}/nope.yaml"),
    ("train {tiny} data.path={t}/nope run.dir={t}/new-3", "{t}/nope"),
    ("train --resume {t}/nope", "{t}/nope"),
    ("eval {t}/nope", "{t}/nope"),
    ("eval {prun} --data {t}/nope", "{t}/nope"),
    ("predict {prun} {t}/nope.jsonl", "{t}/nope.jsonl"),
    ("report {t}/nope", "{t}/nope"),
    ("runs {t}/nope", "{t}/nope"),
    ("plan {t}/nope.yaml", "{t}/nope.yaml"),
    ("bench {t}/nope.yaml", "{t}/nope.yaml"),
    ("bench {tiny} --compare {t}/nope.json", "{t}/nope.json"),
    ("email predict {t}/nope {csv}", "{t}/nope"),
    ("email predict {erun} {t}/nope.mbox", "{t}/nope.mbox"),
    ("email sort {t}/nope {eml} --into {t}/new-4", "{t}/nope"),
    ("email export {t}/nope --out {t}/new-5", "{t}/nope"),
    ("email serve {t}/nope", "{t}/nope"),
    ("email baseline {t}/nope", "{t}/nope"),
    ("email weak-label {t}/nope --label-map {sa3}", "{t}/nope"),
    ("email label {t}/nope", "{t}/nope"),
    ("email pretrain {t}/nope --run-dir {t}/new-6", "{t}/nope"),
    ("rl seed {t}/nope.yaml", "{t}/nope.yaml"),
    ("rl eval {t}/nope", "{t}/nope"),
    ("rl compare {t}/nope.json {t}/nope.json", "{t}/nope.json"),
]
DAMAGED = [
    ("eval {t}/p-weights", "{t}/p-weights/weights.safetensors"),
    ("predict {t}/p-weights {t}/pairs.jsonl", "{t}/p-weights/weights.safetensors"),
    ("train {tiny} train.init_from={t}/p-weights data.path={pstore} run.dir={t}/new-7",
     "{t}/p-weights/weights.safetensors"),
    ("eval {t}/p-config", "{t}/p-config/config.yaml"),
    ("report {t}/p-summary", "{t}/p-summary/summary.json"),
    ("report {t}/p-metrics", "{t}/p-metrics/metrics.jsonl"),
    ("train {t}/bad.yaml", "{t}/bad.yaml"),
    ("train {tiny} data.path={t}/pstore-meta run.dir={t}/new-8", "{t}/pstore-meta/train/meta.json"),
    ("plan {tiny} data.path={t}/pstore-meta", "{t}/pstore-meta/train/meta.json"),
    ("eval {prun} --data {t}/pstore-meta", "{t}/pstore-meta/train/meta.json"),
    ("bench {tiny} --compare {t}/bad.json", "{t}/bad.json"),
    ("data pairs --source {t}/bad.jsonl --out {t}/new-9", "{t}/bad.jsonl"),
    ("email predict {t}/e-weights {csv}", "{t}/e-weights/weights.safetensors"),
    ("email predict {erun} {t}/bad.csv", "{t}/bad.csv"),
    ("email export {t}/e-config --out {t}/new-10", "{t}/e-config/config.yaml"),
    ("email baseline {t}/estore-meta", "{t}/estore-meta/train/meta.json"),
    ("rl compare {t}/bad.json {t}/bad.json", "{t}/bad.json"),
]
WRONG_KIND = [
    ("email predict {prun} {csv}", "{prun} is a pairs run"),
    ("email sort {prun} {eml} --into {t}/new-11", "{prun} is a pairs run"),
    ("email serve {prun}", "{prun} is a pairs run"),
    ("email export {prun} --out {t}/new-12", "{prun}"),
    ("email baseline {pstore}", "{pstore} is a pairs store"),
    ("email label {pstore}", "{pstore}"),
    ("email pretrain {pstore} --run-dir {t}/new-13", "{pstore}"),
    ("rl eval {prun}", "{prun} is a pairs run"),
    ("rl train --resume {prun}", "{prun} is a pairs run"),
    ("eval {prun} --data {estore}", "{estore}"),
    ("predict {erun} {t}/pairs.jsonl", "{erun}"),
]


@pytest.mark.parametrize("argv, named", MISSING + DAMAGED + WRONG_KIND,
                         ids=[a for a, _ in MISSING + DAMAGED + WRONG_KIND])
def test_every_command_says_what_is_wrong_in_one_line_with_exit_code_2(w, capsys, argv, named):
    capsys.readouterr()
    code = cli.main(argv.format(**w).split())  # an exception here is the traceback a user would see
    err = capsys.readouterr().err
    assert code == 2, err
    assert named.format(**w) in err and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("trmkit "), err


def test_a_pairs_run_is_refused_by_name_from_python_too(w):
    import trmkit
    from trmkit.config import ConfigError

    with pytest.raises(ConfigError, match=f"{w['prun']} is a pairs run, not an e-mail run"):
        trmkit.classify_mail(w["prun"], w["csv"])


def test_a_bug_keeps_its_traceback_and_a_file_error_does_not(monkeypatch, capsys):
    def broken(args):
        raise KeyError("a bug")

    monkeypatch.setitem(cli.COMMANDS, "hw", ("probe", cli._add_hw, broken))
    with pytest.raises(KeyError):
        cli.main(["hw"])

    def missing(args):
        raise IsADirectoryError(21, "Is a directory", "/some/folder")

    monkeypatch.setitem(cli.COMMANDS, "hw", ("probe", cli._add_hw, missing))
    assert cli.main(["hw"]) == 2
    assert capsys.readouterr().err.strip() == "trmkit hw: a folder, where a file was expected: give the file's path " \
                                              "(/some/folder)"


def test_runs_lists_every_readable_run_and_names_the_unreadable_one(w, tmp_path, capsys):
    for name in ("prun", "erun"):
        shutil.copytree(w[name], tmp_path / name)
    _copy_run(Path(w["prun"]), tmp_path / "broken", "summary.json")
    capsys.readouterr()
    assert cli.main(["runs", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    table, unreadable = out.split("\nunreadable: ")
    assert "prun " in table and "erun " in table and "broken" not in table
    assert unreadable.startswith(f"broken: {tmp_path / 'broken' / 'summary.json'} is damaged")


def test_runs_shows_each_tasks_own_headline_metric(w, tmp_path, capsys):
    for name in ("prun", "erun"):
        shutil.copytree(w[name], tmp_path / name)
    capsys.readouterr()
    assert cli.main(["runs", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "result" in lines[0].split() and "exact" not in lines[0].split()
    erun = next(line for line in lines if line.startswith("erun "))
    prun = next(line for line in lines if line.startswith("prun "))
    assert "macro-F1 " in erun and "exact " not in erun
    assert "exact " in prun and "cell " in prun and "macro-F1" not in prun


def test_report_lists_every_metric_once_and_plots_a_classifiers_validation_macro_f1(w, tmp_path):
    run = tmp_path / "erun"
    shutil.copytree(w["erun"], run)
    assert cli.main(["report", str(run)]) == 0
    md = (run / "report" / "report.md").read_text()
    final = md.split("## Final metrics")[1].split("##")[0]
    names = [line.split("|")[1].strip() for line in final.splitlines() if line.startswith("| ")][1:]
    assert "eval/loss" in names and "loss" not in names and "macro_f1" not in names
    assert len(names) == len(set(names))
    assert (run / "report" / "macro_f1.png").is_file() and "![macro_f1](macro_f1.png)" in md


def test_bench_save_refuses_a_file_that_is_not_a_saved_result_before_it_runs(w, tmp_path, capsys):
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}\n')
    capsys.readouterr()
    assert cli.main(["bench", w["tiny"], "--save", str(notes), "--steps", "1", "--warmup", "0", "--no-memory"]) == 2
    err = capsys.readouterr().err
    assert f"--save {notes} exists and is not a benchmark result" in err and "--force" in err
    assert notes.read_text() == '{"mine": true}\n'
