"""E-mail end to end on a real subset of SpamAssassin: `trmkit data email` -> `trmkit train` (the
one trainer) -> report plots -> `email export` (bundle round-trip, nothing unpickled) ->
`email predict` (folder, mbox.gz, stdin) -> `email serve` over real HTTP -> `email baseline`."""

import gzip
import http.client
import json
import pickle
import shutil
import sys
from pathlib import Path

import psutil
import pytest
import torch

from trmkit import cli

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SA = DATA / "email" / "spamassassin"
ROOT = Path(__file__).resolve().parents[2]
PER_FOLDER = {"easy-ham-1": 160, "hard-ham-1": 120, "spam-1": 160}
TINY = """
run: {seed: 0, threads: 2, compile: "off", dtype: float32}
model: {mixer: attention, hidden_size: 32, num_heads: 2, L_layers: 1, H_cycles: 2, L_cycles: 1,
        halt_max_steps: 2, puzzle_emb_len: 0}
train: {batch_size: 32, max_steps: 100, lr: 2.0e-3, warmup_steps: 10, eval_every: 50, log_every: 50,
        checkpoint_minutes: 0, ema_decay: 0.0, weight_decay: 0.01, best_metric: macro_f1, restore_best: true}
"""
# Chance is ~0.33. Measured on this subset (86 test messages, 2026-11-29, 2 quiet cores), run.seed 0 / 1 / 2:
# these 100 steps 0.901 / 0.816 / 0.847 (temperature 0.72 / 0.57 / 0.61), 5.2 s of training; the 150 steps
# this test ran before 0.901 / 0.816 / 0.835 in 7-9 s (the best evaluation is restored: step 50 or 100).
# One thread instead of two was no faster (150 steps: 9.7 vs 8.9 s).
MACRO_F1_FLOOR = 0.7

SERVER_START_LIMIT = 120  # seconds: safety nets on a loaded machine, not measurements
HTTP_LIMIT = 120


def _need_data():
    if not SA.is_dir():
        pytest.fail(f"{SA} is missing: the e-mail tests read the shared SpamAssassin corpus at ../shared/data "
                    "(see its README); put it there and run again")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A store built from 440 real messages and a run trained on it (shared by the tests below)."""
    _need_data()
    tmp = tmp_path_factory.mktemp("email")
    source = tmp / "mail"
    for folder, count in PER_FOLDER.items():
        (source / folder).mkdir(parents=True)
        for f in sorted((SA / folder).iterdir())[:count]:
            (source / folder / f.name).symlink_to(f)
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(tmp / "cache"))
    assert cli.main(["data", "email", "--source", str(source), "--label-map", str(ROOT / "configs/email-sa3.yaml"),
                     "--seq-len", "64", "--bag", "0", "--vocab-size", "2000", "--out", str(tmp / "store")]) == 0
    (tmp / "tiny.yaml").write_text(TINY)
    assert cli.main(["train", str(tmp / "tiny.yaml"), f"run.dir={tmp / 'run'}", f"data.path={tmp / 'store'}"]) == 0
    yield tmp, source
    mp.undo()


def test_the_store_is_a_classify_store_with_its_report(trained):
    tmp, _ = trained
    meta = json.loads((tmp / "store" / "train" / "meta.json").read_text())
    assert meta["task"] == "email" and meta["classes"] == ["easy-ham", "hard-ham", "spam"]
    assert meta["ignore_label_id"] == 3 and meta["seq_len"] == 64
    sizes = {s: json.loads((tmp / "store" / s / "meta.json").read_text())["num_examples"]
             for s in ("train", "val", "test")}
    dup = meta["build"]["dataset"]["duplicates"]
    assert sum(sizes.values()) == dup["kept"] == 440 - dup["exact"] - dup["near"]
    report = json.loads((tmp / "store" / "train" / "dataset_report.json").read_text())
    assert "language" in json.dumps(report) and report["lines"]
    json.loads((tmp / "store" / "train" / "tokenizer.json").read_text())  # plain JSON


def test_the_classifier_learns_real_mail_and_is_calibrated_on_validation(trained):
    tmp, _ = trained
    summary = json.loads((tmp / "run" / "summary.json").read_text())
    assert summary["macro_f1"] >= MACRO_F1_FLOOR, summary["macro_f1"]
    cal = json.loads((tmp / "run" / "calibration.json").read_text())
    assert cal["fitted_on"] == "val" and 0 < cal["temperature"] < 20
    assert cli.main(["report", str(tmp / "run")]) == 0
    for name in ("confusion.png", "reliability.png"):
        assert (tmp / "run" / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bundle_round_trip_never_unpickles(trained, monkeypatch):
    from trmkit.email.bundle import Classifier
    from trmkit.email.mail.mailbox import iter_messages

    tmp, source = trained
    assert cli.main(["email", "export", str(tmp / "run"), "--out", str(tmp / "bundle")]) == 0
    names = {p.name for p in (tmp / "bundle").iterdir()}
    assert {"model.safetensors", "tokenizer.json", "config.json", "labels.json", "calibration.json",
            "model_card.md"} <= names
    card = (tmp / "bundle" / "model_card.md").read_text()
    assert "macro-F1" in card and "hard-ham" in card
    assert "as `email predict` runs it (halting, float32)" in card and "at the end of training (all 2 steps)" in card
    cal = json.loads((tmp / "bundle" / "calibration.json").read_text())  # the sure-answer rule, fitted or why not
    assert "halt_probability" in cal and "messages" in cal["halt_fitted_on"] and "halting head says so" in card

    def refuse(*a, **k):
        raise AssertionError("a bundle must load without unpickling")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    bundle, run = Classifier.load(tmp / "bundle"), Classifier.load(tmp / "run")
    msgs = list(iter_messages(source / "spam-1"))[:20]
    a, b = bundle.predict(msgs), run.predict(msgs)
    assert [x["label"] for x in a] == [x["label"] for x in b]
    assert all(abs(x["probability"] - y["probability"]) < 1e-6 for x, y in zip(a, b))
    assert all(x["label"] in bundle.class_names and len(x["top3"]) == 3 for x in a)


def test_predict_streams_folders_mbox_gz_and_stdin(trained, tmp_path, capsys, monkeypatch):
    tmp, source = trained
    files = sorted((source / "spam-1").iterdir())[:5]
    with gzip.open(tmp_path / "box.mbox.gz", "wb") as f:
        for path in files:
            f.write(b"From someone@example.com Thu Jan  1 00:00:00 2004\n" + path.read_bytes().rstrip(b"\n") + b"\n\n")
    out = tmp_path / "pred.jsonl"
    assert cli.main(["email", "predict", str(tmp / "run"), str(source / "hard-ham-1"), str(tmp_path / "box.mbox.gz"),
                     "--out", str(out), "--batch", "16"]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 120 + 5
    assert all({"id", "label", "probability", "top3"} <= set(x) for x in lines)
    assert "messages/s" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left behind
    assert cli.main(["email", "predict", str(tmp / "run"), str(files[0]), "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err  # --out replaces regular files only
    monkeypatch.setattr(sys, "stdin", type("S", (), {"buffer": open(files[0], "rb")})())
    assert cli.main(["email", "predict", str(tmp / "bundle" if (tmp / "bundle").is_dir() else tmp / "run"), "-"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] in ("easy-ham", "hard-ham", "spam")


def test_serve_classifies_real_mail_over_http(trained):
    import threading
    import time
    import socket

    import uvicorn

    from trmkit.email.bundle import Classifier
    from trmkit.email.serve import make_app

    tmp, source = trained
    app = make_app(Classifier.load(tmp / "run"), max_request_bytes=2**20)
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + SERVER_START_LIMIT
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.01)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_LIMIT)
        raw = sorted((source / "spam-1").iterdir())[0].read_bytes()
        conn.request("POST", "/classify", body=raw, headers={"Content-Type": "message/rfc822"})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        assert resp.status == 200 and body["predictions"][0]["label"] in ("easy-ham", "hard-ham", "spam")
        conn.request("POST", "/classify", body=b"{not json", headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 400 and "error" in json.loads(resp.read())
    finally:
        server.should_exit = True
        thread.join(5)


def test_baseline_runs_on_the_same_split(trained, tmp_path, capsys):
    tmp, _ = trained
    assert cli.main(["email", "baseline", str(tmp / "store"), "--run", str(tmp / "run"),
                     "--json", str(tmp_path / "baseline.json")]) == 0
    captured = capsys.readouterr()
    result = json.loads((tmp_path / "baseline.json").read_text())
    test_n = json.loads((tmp / "store" / "test" / "meta.json").read_text())["num_examples"]
    assert result["baseline"]["n"] == test_n == result["trm"]["n"] == result["baseline_balanced"]["n"]
    assert result["baseline"]["settings"]["class_weight"] is None
    assert result["baseline_balanced"]["settings"]["class_weight"] == "balanced"
    assert result["stronger"] == max(("baseline", "baseline_balanced"), key=lambda k: result[k]["macro_f1"])
    for key in ("trm_minus_baseline", "trm_minus_baseline_balanced"):
        side = result[key.replace("trm_minus_", "")]
        assert abs(result[key]["macro_f1"] - (result["trm"]["macro_f1"] - side["macro_f1"])) < 1e-9
    assert "macro-F1" in captured.err and "TRM - LR bal." in captured.err


def test_a_bag_store_trains_exports_and_predicts_with_sources_and_thresholds(trained, tmp_path, capsys):
    """--bag: the whole message as word n-grams beside the tokens, through train, export and
    predict; every prediction names its source and all probabilities; --threshold makes 'uncertain'."""
    tmp, source = trained
    store, run, bundle = tmp_path / "store", tmp_path / "run", tmp_path / "bundle"
    assert cli.main(["data", "email", "--source", str(source), "--label-map", str(ROOT / "configs/email-sa3.yaml"),
                     "--seq-len", "32", "--bag", "24", "--vocab-size", "2000", "--out", str(store)]) == 0
    meta = json.loads((store / "train" / "meta.json").read_text())
    assert meta["seq_len"] == 32 + 24 and meta["part_positions"] == 24
    (tmp_path / "tiny.yaml").write_text(TINY.replace("max_steps: 100", "max_steps: 20"))
    assert cli.main(["train", str(tmp_path / "tiny.yaml"), f"run.dir={run}", f"data.path={store}"]) == 0
    assert cli.main(["email", "export", str(run), "--out", str(bundle)]) == 0
    assert (bundle / "bag.json").is_file()
    assert "reading 32 tokens and a bag of 24 n-grams per message" in (bundle / "model_card.md").read_text()
    capsys.readouterr()
    files = sorted((source / "spam-1").iterdir())[:6]
    assert cli.main(["email", "predict", str(bundle), *map(str, files), "--threshold", "0.999",
                     "--threshold", "spam=0"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    # each file is read on its own; a SpamAssassin file starts with an mbox "From " line: path#0
    assert len(lines) == 6 and {x["source"].removesuffix("#0") for x in lines} == {str(f) for f in files}
    for x in lines:
        assert set(x["probabilities"]) == {"easy-ham", "hard-ham", "spam"}
        assert abs(sum(x["probabilities"].values()) - 1) < 1e-4
        assert x["label"] == (x["predicted"] if x["predicted"] == "spam" else "uncertain")
    assert cli.main(["email", "predict", str(bundle), str(files[0]), "--threshold", "ham=0.5"]) == 2
    assert "CLASS=P with CLASS one of" in capsys.readouterr().err

    # the same folder parsed and encoded by worker processes: the same messages, labels and order,
    # the bad file counted, and no worker left behind
    box = tmp_path / "box"
    box.mkdir()
    for f in sorted((source / "spam-1").iterdir())[:40] + sorted((source / "easy-ham-1").iterdir())[:30]:
        (box / f.name).symlink_to(f.resolve())
    (box / "notes.txt").write_text("shopping list: eggs, milk\n")
    runs = {}
    for workers in ("0", "2"):
        assert cli.main(["email", "predict", str(bundle), str(box), "--batch", "16", "--workers", workers]) == 0
        out, err = capsys.readouterr()
        runs[workers] = [json.loads(x) for x in out.splitlines()]
        assert "1 skipped" in err and "notes.txt: not an e-mail" in err
        assert f"predict: workers={workers} (--workers)" in err
        assert ("started before the model loads" in err) == (workers == "2")  # a bundle: parsing while torch loads
    assert len(runs["0"]) == 70
    assert [(x["source"], x["predicted"]) for x in runs["0"]] == [(x["source"], x["predicted"]) for x in runs["2"]]
    # a run directory starts its workers after the load (its layout comes from its store); a damaged
    # bundle fails its load while the workers parse, and none is left behind either way
    assert cli.main(["email", "predict", str(run), str(box), "--batch", "16", "--workers", "2"]) == 0
    out, err = capsys.readouterr()
    assert "started before" not in err and len(out.splitlines()) == 70
    broken = tmp_path / "broken"
    shutil.copytree(bundle, broken)
    (broken / "model.safetensors").write_bytes(b"not weights")
    assert cli.main(["email", "predict", str(broken), str(box), "--workers", "2"]) == 2
    out, err = capsys.readouterr()
    assert "started before the model loads" in err and "model.safetensors" in err and out == ""
    workers_left = [p for p in psutil.Process().children(recursive=True) if "spawn_main" in " ".join(p.cmdline())]
    assert workers_left == []  # (multiprocessing's resource tracker stays until this process exits, as designed)


def test_sort_files_verified_copies_into_a_maildir_and_never_touches_the_originals(trained, tmp_path, capsys):
    import hashlib

    tmp, source = trained
    box = tmp_path / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (box / sub).mkdir(parents=True)
    picked = sorted((source / "spam-1").iterdir())[:6] + sorted((source / "easy-ham-1").iterdir())[:6]
    for i, f in enumerate(picked):
        (box / ("cur" if i % 2 else "new") / f"{i}.host:2,S").write_bytes(f.read_bytes())
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in box.rglob("*") if p.is_file()}
    into = tmp_path / "sorted"
    base = ["email", "sort", str(tmp / "run"), str(box), "--into", str(into)]
    assert cli.main([*base, "--dry-run"]) == 0
    assert "would file 12 new copies" in capsys.readouterr().err and not into.exists()
    assert cli.main(base) == 0
    assert "filed 12 new copies" in capsys.readouterr().err
    copies = list(into.glob(".*/cur/*"))
    assert sorted(p.read_bytes() for p in copies) == sorted(f.read_bytes() for f in picked)  # each exactly once
    assert {p.parent.parent.name for p in copies} <= {".easy-ham", ".hard-ham", ".spam"}
    assert not [p for p in into.rglob("tmp/*")]  # nothing left half-delivered
    assert cli.main(base) == 0  # a second run finds everything in place
    err = capsys.readouterr().err
    assert "filed 0 new copies" in err and "12 already in place" in err
    assert len(list(into.glob(".*/cur/*"))) == 12
    # reruns with other thresholds move a message between folders, never copy it twice
    for threshold in (["--threshold", "0.999"], ["--threshold", "0.5"], []):
        assert cli.main([*base, *threshold]) == 0
        err = capsys.readouterr().err
        copies = list(into.glob(".*/cur/*"))
        assert sorted(p.read_bytes() for p in copies) == sorted(f.read_bytes() for f in picked), threshold
        if threshold[-1:] == ["0.999"]:
            assert {p.parent.parent.name for p in copies} == {".uncertain"} and "12 moved" in err
    assert cli.main([*base[:-1], str(tmp_path / "stamped"), "--stamp"]) == 0
    for p in (tmp_path / "stamped").glob(".*/cur/*"):
        head, _, rest = p.read_bytes().partition(b"\n")
        assert head.startswith(b"X-Trmkit-Label: " + p.parent.parent.name[1:].encode() + b"; p=")
        assert rest in {f.read_bytes() for f in picked}
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in box.rglob("*") if p.is_file()}
    assert after == before  # the originals: same files, same bytes
    assert cli.main(["email", "sort", str(tmp / "run"), str(tmp_path / "x.mbox"), "--into", str(into)]) == 2


def _fingerprints(*paths: Path) -> dict:
    import hashlib

    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if f.is_file()]
    return {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def test_no_email_command_writes_over_what_it_reads(trained, tmp_path, capsys):
    """--out / --into onto an mbox, a CSV, an .eml, a folder of mail, a bundle's or a run's file:
    refused by name before any work, every input byte-identical afterwards."""
    tmp, source = trained
    bundle, mail = tmp_path / "bundle", tmp_path / "mail"
    assert cli.main(["email", "export", str(tmp / "run"), "--out", str(bundle)]) == 0
    mail.mkdir()
    files = sorted((source / "spam-1").iterdir())[:3]
    for f in files:
        (mail / f.name).write_bytes(f.read_bytes())  # real copies: a failed guard must not reach the shared corpus
    eml, mbox, csv = mail / files[0].name, tmp_path / "box.mbox", tmp_path / "mail.csv"
    mbox.write_bytes(b"".join(f.read_bytes() for f in files))
    csv.write_text("text,label\nwin a prize now,spam\nlunch at noon?,ham\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(mbox)
    inputs = [mail, mbox, csv, bundle, tmp / "run"]
    before = _fingerprints(*inputs)
    capsys.readouterr()
    refused = {  # command -> the words of its refusal
        ("predict", str(bundle), str(mbox), "--out", str(mbox)): "which this command reads",
        ("predict", str(bundle), str(csv), "--out", str(csv)): "which this command reads",
        ("predict", str(bundle), str(eml), "--out", str(eml)): "which this command reads",
        ("predict", str(bundle), str(mbox), "--out", str(link)): "which this command reads",  # through a link
        ("predict", str(bundle), str(mail), "--out", str(mail / "labels.jsonl")): "lies inside",
        ("predict", str(bundle), str(eml), "--out", str(bundle / "labels.json")): "lies inside",
        ("predict", str(tmp / "run"), str(eml), "--out", str(tmp / "run" / "summary.json")): "lies inside",
        ("predict", str(tmp / "run"), str(eml), "--out", str(tmp / "store" / "x.jsonl")): "lies inside",
        ("predict", str(bundle), str(eml), "--out", "/dev/null"): "not a regular file",
        ("sort", str(bundle), str(mail), "--into", str(mail)): "which this command reads",
        ("sort", str(bundle), str(mail), "--into", str(mail / "sorted")): "lies inside",
        ("sort", str(bundle), str(mail), "--into", str(tmp_path)): "holds",
        ("sort", str(bundle), str(mail), "--into", str(bundle / "sorted")): "lies inside",
        ("sort", str(bundle), str(mail), "--into", str(mbox)): "is not a folder",
        ("export", str(tmp / "run"), "--out", str(tmp / "run")): "which this command reads",
        ("export", str(tmp / "run"), "--out", str(tmp / "store")): "which this command reads",
        ("export", str(tmp / "run"), "--out", str(tmp / "store" / "bundle")): "lies inside",
        ("export", str(tmp / "run"), "--out", str(tmp)): "holds",
        ("baseline", str(tmp / "store"), "--out", str(tmp / "store" / "train" / "meta.json")): "lies inside",
        ("baseline", str(tmp / "store"), "--run", str(tmp / "run"), "--out",
         str(tmp / "run" / "classification.json")): "lies inside",
    }
    for args, words in refused.items():
        assert cli.main(["email", *args]) == 2, args
        assert words in capsys.readouterr().err, args
    for args, words in {("--source", str(mail), "--out", str(mail)): "which this command reads",
                        ("--source", str(mail), "--out", str(mail / "store")): "lies inside",
                        ("--source", str(mbox), "--out", str(mbox)): "which this command reads",
                        ("--source", str(csv), "--out", str(tmp_path)): "holds"}.items():
        assert cli.main(["data", "email", *args]) == 2, args
        assert words in capsys.readouterr().err, args
    assert _fingerprints(*inputs) == before
    assert Path("/dev/null").is_char_device()
    # a new folder inside the run stays allowed (the demo exports to RUN/bundle), and again over itself
    for _ in range(2):
        assert cli.main(["email", "export", str(tmp / "run"), "--out", str(tmp / "run" / "bundle")]) == 0
    assert cli.main(["email", "baseline", str(tmp / "store"), "--out", str(tmp_path / "baseline.json")]) == 0
    assert "macro-F1" in capsys.readouterr().err
    assert json.loads((tmp_path / "baseline.json").read_text())["stronger"] in ("baseline", "baseline_balanced")


def test_a_damaged_bundle_is_named_with_the_way_to_rebuild_it(trained, tmp_path, capsys):
    import shutil

    tmp, _ = trained
    bundle = tmp_path / "bundle"
    assert cli.main(["email", "export", str(tmp / "run"), "--out", str(bundle)]) == 0
    pristine = tmp_path / "pristine"
    shutil.copytree(bundle, pristine)
    eml = next(p for p in sorted((tmp / "mail" / "spam-1").iterdir()))
    for name, damage in {"labels.json": b'["easy-ham"] ["x"]', "config.json": b"{not json",
                         "calibration.json": b"\xff\xfe", "tokenizer.json": b'{"version": 1}',
                         "model.safetensors": b"\x00" * 64}.items():
        shutil.rmtree(bundle)
        shutil.copytree(pristine, bundle)
        (bundle / name).write_bytes(damage)
        capsys.readouterr()
        assert cli.main(["email", "predict", str(bundle), str(eml)]) == 2, name
        err = capsys.readouterr().err
        assert f"{bundle / name} is damaged" in err and "trmkit email export RUN --out" in err, (name, err)
        assert "Traceback" not in err


def test_a_store_with_one_class_is_refused_with_its_counts(tmp_path, capsys):
    csv = tmp_path / "mail.csv"
    csv.write_text("text,label\n" + "".join(f"message number {i} about things,spam\n" for i in range(20)))
    assert cli.main(["data", "email", "--source", str(csv), "--out", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert "every labelled message has the label 'spam' (20 messages" in err and "--label-from" in err
    assert not (tmp_path / "store").exists()


def test_the_classify_mailbox_example_runs_on_a_run(trained, tmp_path):
    """examples/classify_mailbox.py: trmkit.classify_mail from Python, on an mbox."""
    from trmkit import procs
    from tests import SAFETY_TIMEOUT

    tmp, source = trained
    mbox = tmp_path / "box.mbox"
    mbox.write_bytes(b"".join(f.read_bytes() for f in sorted((source / "spam-1").iterdir())[:5]))
    proc = procs.run([sys.executable, str(ROOT / "examples/classify_mailbox.py"), str(tmp / "run"), str(mbox)],
                     capture_output=True, text=True, timeout=SAFETY_TIMEOUT, cwd=ROOT,
                     env={**__import__("os").environ, "XDG_CACHE_HOME": str(tmp / "cache")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = eval(proc.stdout.splitlines()[0])  # {'spam': 5} or so: five messages, every one labelled
    assert sum(counts.values()) == 5 and set(counts) <= {"easy-ham", "hard-ham", "spam"}


def test_a_bundle_written_before_the_renames_predicts_as_it_did(trained, tmp_path, capsys):
    """A bundle whose config.json names the bag's model keys as bundles did before (bag_*, in the model section,
    before the e-mail settings had their own) loads under the current names and predicts the same probabilities."""
    tmp, source = trained
    bundle = tmp_path / "bundle"
    assert cli.main(["email", "export", str(tmp / "run"), "--out", str(bundle)]) == 0
    eml = str(sorted((source / "spam-1").iterdir())[0])
    capsys.readouterr()
    assert cli.main(["email", "predict", str(bundle), eml]) == 0
    now = json.loads(capsys.readouterr().out)
    config = json.loads((bundle / "config.json").read_text())
    former = {"part_positions": "bag_positions", "pooled_head": "bag_head", "input_linear": "bag_linear"}
    from dataclasses import asdict

    from trmkit.email.config import EmailModelConfig

    model = {**config["model"], **asdict(EmailModelConfig()), **config.pop("email")}  # one section, every key
    config["model"] = {next((former[n] + k[len(n):] for n in former if k.startswith(n)), k): v
                       for k, v in model.items()}
    assert {"bag_positions", "bag_linear_c"} <= set(config["model"]) and "part_positions" not in config["model"]
    (bundle / "config.json").write_text(json.dumps(config))
    assert cli.main(["email", "predict", str(bundle), eml]) == 0
    assert json.loads(capsys.readouterr().out)["probabilities"] == now["probabilities"]
