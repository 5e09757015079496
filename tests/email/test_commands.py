"""`email predict --workers`: when parsing moves to worker processes, and why (each choice is printed)."""

import pytest

from trmkit.config import ConfigError
from trmkit.email.commands import WORKER_MIN_BYTES, choose_workers, model_threads


def test_workers_parse_folders_and_large_mboxes_on_several_cores(tmp_path):
    folder = tmp_path / "mail"
    folder.mkdir()
    (folder / "1.eml").write_text("From: a@b.c\nSubject: hi\n\nbody\n")
    big = tmp_path / "big.mbox"
    big.write_bytes(b"From x\nFrom: a@b.c\n\n" + b"x" * WORKER_MIN_BYTES)
    assert choose_workers("auto", [str(folder)], "auto", 2, 32)[0] == 2
    assert choose_workers("auto", [str(folder)], "auto", 16, 32)[0] == 4  # the model is the bottleneck beyond
    assert choose_workers("auto", [str(big)], "auto", 2, 32)[0] == 2
    assert choose_workers("auto", [str(folder)], "auto", 2, 128)[0] == 1  # a costly model: it keeps a core


def test_model_threads_leave_the_workers_their_cores_unless_the_model_is_the_bottleneck():
    assert model_threads(2, 2, 32)[0] == 1 and model_threads(8, 4, 32)[0] == 4
    assert model_threads(2, 1, 128)[0] == 2
    # no workers: the parsing thread in this process keeps a core
    assert model_threads(2, 0, 32)[0] == 1 and model_threads(8, 0, 128)[0] == 7 and model_threads(1, 0, 32)[0] == 1


def test_no_workers_where_they_cannot_pay(tmp_path):
    one = tmp_path / "1.eml"
    one.write_text("From: a@b.c\nSubject: hi\n\nbody\n")
    rows = tmp_path / "mail.csv"
    rows.write_text("text,label\nhello,ham\n")
    workers, why = choose_workers("auto", [str(tmp_path)], "auto", 1, 32)
    assert workers == 0 and "1 core" in why
    workers, why = choose_workers("auto", [str(one)], "auto", 2, 32)
    assert workers == 0 and "a few messages" in why
    workers, why = choose_workers("auto", [str(tmp_path), str(rows)], "auto", 2, 32)
    assert workers == 0 and "is csv" in why
    assert choose_workers("auto", ["-"], "auto", 2, 32)[0] == 0
    assert choose_workers("3", [str(one)], "auto", 1, 32) == (3, "--workers")
    with pytest.raises(ConfigError, match="--workers 'many'"):
        choose_workers("many", [str(one)], "auto", 2, 32)


def test_workers_asked_for_rows_are_refused_with_the_fix(tmp_path):
    rows = tmp_path / "mail.csv"
    rows.write_text("text,label\nhello,ham\n")
    with pytest.raises(ConfigError, match="mail.csv is csv.*use --workers 0"):
        choose_workers("2", [str(rows)], "auto", 2, 32)
    assert choose_workers("0", [str(rows)], "auto", 2, 32) == (0, "--workers")


def test_no_command_imports_torch_before_it_runs():
    """Building the parser (every command does) must not import torch: `email predict` starts its parsing
    workers before the model's load imports it (1.5-3 s), and `trmkit --help` stays instant."""
    import subprocess
    import sys

    code = ("import sys; from trmkit import cli; cli.build_parser().parse_args(['email', 'predict', 'B', 'x']); "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "False"
