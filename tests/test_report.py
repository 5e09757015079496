"""Run reports (PNG + markdown) and the runs table."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml

from trmkit.monitor import RunFacts, summarize
from trmkit.report import MissingMetricsError, format_runs, list_runs, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _write_run(run_dir, steps: int = 40, hidden: int = 64, with_summary: bool = True,
               start: float = 1_700_000_000.0) -> list[dict]:
    run_dir.mkdir(parents=True)
    history = []
    for i in range(1, steps + 1):
        record = {"step": i, "time": start + 2.0 * i, "wall": 2.0 * i,
                  "train/loss": 2.3 * 0.95**i, "train/accuracy": 1 - 0.9 * 0.95**i,
                  "perf/samples_per_second": 300.0 + (i % 5), "sys/rss_gb": 1.2 + 0.01 * i,
                  "sys/cpu_percent": 650.0}
        if i % 10 == 0:
            record.update({"eval/cell_accuracy": 0.5 + i / 100, "eval/exact_accuracy": i / 100})
        history.append(record)
    lines = [json.dumps({"time": start, "config": {}})] + [json.dumps(r) for r in history]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    config = {"run": {"dir": str(run_dir), "threads": 8}, "data": {"path": "data/sudoku-extreme-1k"},
              "model": {"hidden_size": hidden, "L_layers": 2, "H_cycles": 3, "L_cycles": 6},
              "train": {"batch_size": 64, "max_steps": steps}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    if with_summary:
        summary = summarize(history, RunFacts(cores=8, train_seconds=70, eval_seconds=10))
        (run_dir / "summary.json").write_text(json.dumps(summary))
    return history


def test_write_report_makes_pngs_and_markdown(tmp_path):
    run = tmp_path / "runs" / "sudoku-a"
    _write_run(run)
    written = write_report(run)
    pngs = [p for p in written if p.suffix == ".png"]
    assert {p.stem for p in pngs} == {"loss", "accuracy", "throughput", "memory", "cpu"}
    for png in pngs:
        data = png.read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 5_000
    md = (run / "report" / "report.md").read_text()
    assert written[-1] == run / "report" / "report.md"
    assert "| model.hidden_size | 64 |" in md and "| eval/exact_accuracy | 0.4 |" in md
    assert "![loss](loss.png)" in md and "not plotted: eval/loss, train/exact_accuracy." in md


def test_an_lm_policy_run_reports_its_policy_settings_not_the_probe_s_trm_shape(tmp_path):
    run = tmp_path / "runs" / "lm"
    _write_run(run, steps=10)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["rl"] = {"policy": "lm", "model_shape": "small", "model_path": "", "lora_rank": 16}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    write_report(run)
    md = (run / "report" / "report.md").read_text()
    assert "| rl.model_shape | small |" in md and "| rl.lora_rank | 16 |" in md
    assert "model.hidden_size" not in md and "rl.model_path" not in md  # the probe's TRM; an unset path


def test_write_report_without_summary_or_config(tmp_path):
    run = tmp_path / "bare"
    _write_run(run, with_summary=False)
    (run / "config.yaml").unlink()
    written = write_report(run)
    md = written[-1].read_text()
    assert "No config.yaml" in md and "samples/s mean / median / overall" in md


def test_missing_metrics_is_a_clear_error(tmp_path):
    with pytest.raises(MissingMetricsError, match=r"metrics\.jsonl.*run `trmkit train` first") as err:
        write_report(tmp_path / "nothing")
    assert str(tmp_path / "nothing" / "metrics.jsonl") in str(err.value)


def test_list_runs_on_two_run_dirs(tmp_path):
    _write_run(tmp_path / "b-small", steps=20, hidden=64, start=1_700_000_000.0)
    _write_run(tmp_path / "a-wide", steps=40, hidden=128, with_summary=False, start=1_700_100_000.0)
    (tmp_path / "not-a-run").mkdir()
    rows = list_runs(tmp_path)
    assert [r["name"] for r in rows] == ["b-small", "a-wide"]  # oldest first
    small, wide = rows
    assert (small["task"], small["hidden"], small["layers"], small["cycles"]) == ("sudoku-extreme-1k", 64, 2, 3)
    assert small["steps"] == 20 and small["exact_accuracy"] == pytest.approx(0.2)
    assert small["cell_accuracy"] == pytest.approx(0.7) and small["finished"]
    assert wide["steps"] == 40 and wide["hidden"] == 128 and not wide["finished"]
    table = format_runs(rows)
    lines = table.splitlines()
    assert lines[0].split() == ["name", "task", "hidden", "layers", "cycles", "steps", "result",
                                "samples/s", "wall", "date"]
    assert "exact 20.0%, cell 70.0%" in lines[2] and "3x6" in lines[2] and "1m20s" in lines[3]
    assert lines[3].startswith("a-wide *") and lines[-1].startswith("* no summary.json")
    assert format_runs([]) == "no runs found"


def test_flat_summary_layout_is_read(tmp_path):
    """summary.json as the training loop writes it: flat, eval results at top level."""
    run = tmp_path / "flat"
    _write_run(run, steps=20, with_summary=False)
    flat = {"cell_accuracy": 0.81, "exact_accuracy": 0.125, "loss": 0.6, "steps": 20, "samples_seen": 1280,
            "samples_per_second": 250.0, "wall_seconds": 40.0, "eval_seconds": 30.0, "peak_rss_gb": 1.5}
    (run / "summary.json").write_text(json.dumps(flat))
    (row,) = list_runs(tmp_path)
    assert row["finished"] and row["exact_accuracy"] == 0.125 and row["samples_per_second"] == 250.0
    md = write_report(run)[-1].read_text()
    assert "| eval/exact_accuracy | 0.125 |" in md and "| samples seen | 1280 |" in md
    assert "/ 250.0 |" in md  # overall rate from summary.json, mean and median from the history


def test_report_imports_no_task_and_no_application():
    """report.py draws what a run wrote; a task's own plots come in as an argument (Task.plots)."""
    import trmkit.report

    tree = ast.parse(Path(trmkit.report.__file__).read_text())
    names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not [m for m in names if m.startswith(("trmkit.tasks", "trmkit.email", "trmkit.rl", "trmkit.registry"))]
