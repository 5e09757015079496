"""Nothing overwritten unasked, and errors that say what is wrong: a store is replaced only with --force
whoever writes it (write_store, every builder, `email label --apply`); `bench --learn --keep` never writes
over a trained run; the benchmark scripts finish a killed run instead of refusing it; a vocabulary that does
not fit a run is named in a few words; a builder's missing source keeps its type (named by errors.py)."""

import dataclasses
import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from trmkit import api, cli, learn, registry, rundir
from trmkit.config import ConfigError
from trmkit.data.store import SplitArrays, store_fingerprints, write_store
from trmkit.email import label
from trmkit.tasks.pairs.build import build_pairs
from trmkit.train.session import check_data_matches

REPO = Path(__file__).resolve().parents[1]
META = {"task": "pairs", "vocab": ["<pad>", "a", "b", "c"], "pad_id": 0, "ignore_label_id": 0, "blank_id": None,
        "num_puzzle_identifiers": 1, "source": "test", "build": {}}
QUIET = lambda m: None  # noqa: E731


def toy(n: int = 3, offset: int = 0) -> SplitArrays:
    inputs = (np.arange(n * 4).reshape(n, 4) + offset) % 3 + 1
    return SplitArrays(inputs=inputs, labels=inputs, puzzle_identifiers=np.zeros(n, np.int64),
                       puzzle_indices=np.arange(n + 1), group_indices=np.arange(n + 1))


# ---------------------------------------------------------------- a store is replaced only when asked


def test_write_store_replaces_a_store_only_with_force(tmp_path: Path) -> None:
    out = write_store(tmp_path / "s", {"train": toy()}, META)
    before = store_fingerprints(out)
    with pytest.raises(FileExistsError, match="already holds a trmkit store.*--force"):
        write_store(out, {"train": toy(offset=1)}, META)
    assert store_fingerprints(out) == before
    write_store(out, {"train": toy(offset=1)}, META, force=True)
    assert store_fingerprints(out) != before


def test_a_builder_called_from_python_does_not_replace_a_store_unasked(tmp_path: Path) -> None:
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps({"input": [[i, 1]], "output": [[1, i]]}) + "\n" for i in range(8)))
    out = tmp_path / "d"
    build_pairs(source, out, test_fraction=0.25, log=QUIET)
    before = store_fingerprints(out)
    with pytest.raises(FileExistsError, match="already holds a trmkit store"):
        build_pairs(source, out, test_fraction=0.5, log=QUIET)
    assert store_fingerprints(out) == before
    build_pairs(source, out, test_fraction=0.5, force=True, log=QUIET)
    assert store_fingerprints(out) != before


def test_label_apply_refuses_to_replace_a_store_without_force(tmp_path: Path, capsys) -> None:
    from tests.email.test_label import write_mail

    mail = write_mail(tmp_path / "mail")
    common = ["data", "email", "--source", str(mail), "--vocab-size", "300", "--seq-len", "16", "--bag", "16",
              "--seed", "1"]
    few, other = tmp_path / "few", tmp_path / "other"
    assert cli.main([*common, "--keep-labels", "2", "--out", str(few)]) == 0
    assert cli.main([*common, "--out", str(other)]) == 0  # a store someone trained on
    pool, answers = label.open_pool(few), []
    label.save_answer(few / label.ANSWERS_FILE, answers, pool, 0, "spam", "test")
    before = store_fingerprints(other)
    capsys.readouterr()
    assert cli.main(["email", "label", str(few), "--apply", "--out", str(other)]) == 2
    err = capsys.readouterr().err
    assert "already holds a trmkit store" in err and "--force" in err, err
    assert store_fingerprints(other) == before
    assert cli.main(["email", "label", str(few), "--apply", "--out", str(other), "--force"]) == 0
    assert store_fingerprints(other) != before


# ---------------------------------------------------------------- bench --learn --keep


def fake_run(folder: Path, finished: bool = True) -> Path:
    folder.mkdir(parents=True)
    rundir.path(folder, rundir.CONFIG).write_text("run: {}\n")
    rundir.path(folder, rundir.WEIGHTS).write_bytes(b"trained weights")
    if finished:
        rundir.path(folder, rundir.METRICS).write_text("{}\n")
        rundir.path(folder, rundir.SUMMARY).write_text("{}")
        (folder / rundir.CHECKPOINTS / "step-00000002").mkdir(parents=True)
    return folder


def test_bench_learn_keep_refuses_a_trained_run_before_any_work(tmp_path: Path, capsys, monkeypatch) -> None:
    from tests.test_learn import TINY

    (tmp_path / "tiny.yaml").write_text(TINY)
    run = fake_run(tmp_path / "run")

    def no_work(*args, **kwargs):
        raise AssertionError("the set was built: --keep was not checked first")

    monkeypatch.setattr(learn, "ensure_dataset", no_work)
    argv = ["bench", "--learn", "0.01", str(tmp_path / "tiny.yaml"), "--data-dir", str(tmp_path / "data"),
            "--keep", str(run)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"--keep {run} holds a run" in err and "--force" in err, err
    assert rundir.path(run, rundir.WEIGHTS).read_bytes() == b"trained weights"
    with pytest.raises(AssertionError, match="the set was built"):  # --force lets it through to the work
        cli.main([*argv, "--force"])


def test_keep_may_write_again_where_only_an_earlier_keep_wrote(tmp_path: Path) -> None:
    learn.check_keep(fake_run(tmp_path / "kept", finished=False))  # config and weights only: its own output
    learn.check_keep(tmp_path / "new")
    with pytest.raises(ConfigError, match="holds a run"):
        learn.check_keep(fake_run(tmp_path / "run"))
    learn.check_keep(tmp_path / "run", force=True)


# ---------------------------------------------------------------- benchmark scripts finish a killed run

RERUN_SCRIPTS = ("sudoku_hard.sh", "rl_arms.sh", "rl_learning.sh", "maze_trace.sh")


@pytest.mark.parametrize("name", RERUN_SCRIPTS)
def test_benchmark_reruns_resume_from_a_saved_checkpoint_else_force(name: str) -> None:
    """A run killed before its first save has no checkpoints/ (or only a .tmp- folder in it): a rerun must
    start it afresh with --force, and resume only from a checkpoints/step-* folder."""
    path = REPO / "benchmarks" / name
    text = path.read_text()
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    assert not re.search(r'\[ -d "[^"]*/checkpoints" \]', text), "a bare checkpoints/ folder chooses --resume"
    assert 'if [ ! -d "$RUN" ]' not in text, "a killed run is never finished"
    assert "checkpoints/step-*" in text and "--force" in text


def test_the_rerun_rule_picks_resume_force_or_nothing(tmp_path: Path) -> None:
    """The rule the scripts share, run by bash on the three states a killed run can leave."""
    (tmp_path / "killed-while-saving" / "checkpoints" / ".tmp-step-00000002").mkdir(parents=True)
    (tmp_path / "saved" / "checkpoints" / "step-00000002").mkdir(parents=True)
    (tmp_path / "killed-before-saving").mkdir()
    (tmp_path / "killed-before-saving" / "config.yaml").write_text("run: {}\n")
    rule = re.search(r"again\(\) \{.*?\n\}", (REPO / "benchmarks" / "rl_learning.sh").read_text(), re.S).group(0)
    script = rule + '\nfor d in "$@"; do echo "$(basename "$d"): $(again "$d")"; done'
    names = ["killed-while-saving", "saved", "killed-before-saving", "never-started"]
    out = subprocess.run(["bash", "-c", script, "rule", *(str(tmp_path / n) for n in names)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["killed-while-saving: --force", f"saved: --resume {tmp_path / 'saved'}",
                   "killed-before-saving: --force", "never-started: "]


# ---------------------------------------------------------------- a vocabulary in a few words


def test_a_vocabulary_that_does_not_fit_is_named_by_task_size_and_first_tokens(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    pairs_vocab = ["<pad>", "0", "1", "2"]
    rundir.path(run, rundir.DATA_META).write_text(json.dumps({"task": "pairs", "vocab": pairs_vocab, "seq_len": 8,
                                                              "path": str(tmp_path / "pairs")}))
    cfg = SimpleNamespace(model=SimpleNamespace(vocab_size=4, seq_len=8, mixer="mlp_t", num_puzzle_ids=1))
    vocab = [f"word{i}" for i in range(4000)]
    meta = SimpleNamespace(task="email", vocab=vocab, vocab_size=4000, seq_len=8, num_puzzle_identifiers=1)
    split = SimpleNamespace(meta=meta, path=tmp_path / "estore" / "test")
    with pytest.raises(ConfigError) as err:
        check_data_matches(cfg, split, run, log=QUIET)
    text = str(err.value)
    assert len(text) < 700, text
    assert "task 'email' (the run's: 'pairs')" in text and "email, 4000 tokens: 'word0'" in text
    assert "pairs, 4 tokens: '<pad>', '0', '1', '2'" in text and "word3999" not in text


# ---------------------------------------------------------------- a builder's errors


def builder(raise_it):
    return dataclasses.replace(registry.get("sudoku"), build=lambda options, log: raise_it())


def options(tmp_path: Path):
    return api.read_options(registry.get("sudoku").options, {"out": tmp_path / "s", "source": "generate"}, "test")


def test_a_missing_source_inside_a_builder_keeps_its_type(tmp_path: Path) -> None:
    def missing_file():
        open(tmp_path / "nope.csv")

    with pytest.raises(FileNotFoundError):  # the CLI's top level names the file in one line (errors.py)
        api.build_store(builder(missing_file), options(tmp_path), QUIET)


def test_a_builders_message_still_becomes_one_config_error(tmp_path: Path) -> None:
    def bad_option():
        raise ValueError("--givens 90: at most 80 givens")

    with pytest.raises(ConfigError, match="--givens 90"):
        api.build_store(builder(bad_option), options(tmp_path), QUIET)
    write_store(tmp_path / "s", {"train": toy()}, META)
    with pytest.raises(ConfigError, match="already holds a trmkit store"):  # checked before the builder runs
        api.build_store(builder(bad_option), options(tmp_path), QUIET)
