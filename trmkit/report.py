"""Run reports and the runs table, built from what a run directory holds.

A run directory holds metrics.jsonl (always), and summary.json and
config.yaml when the run got that far. `write_report` turns them into PNG
plots and RUN_DIR/report/report.md; `list_runs` reads many run directories
into one table. matplotlib (the `report` extra) is imported inside
`write_report` only, with the Agg backend so no display is needed.

A task with plots of its own (Task.plots: the e-mail classifier's confusion
matrix and reliability diagram) hands them in as `plots`; the CLI looks the
task up from the run's data_meta.json, so this module never imports a task.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

from trmkit import rundir
from trmkit.config import ConfigError
from trmkit.files import write_figure, write_text
from trmkit.monitor import advise, format_duration, read_metrics, summarize

# (file stem, title, metric names) -- each figure shows the series present.
FIGURES = (
    ("loss", "Loss", ("train/loss", "eval/loss")),
    ("accuracy", "Accuracy",
     ("train/accuracy", "train/exact_accuracy", "eval/cell_accuracy", "eval/exact_accuracy")),
    ("throughput", "Throughput (samples/s)", ("perf/samples_per_second",)),
    ("memory", "Resident memory (GB)", ("sys/rss_gb",)),
    ("cpu", "CPU of this process (%, 100 = one core)", ("sys/cpu_percent",)),
)
# Self-play and seeding runs (trmkit rl, docs/rl.md): drawn when their metrics are there.
RL_FIGURES = (
    ("rl_rewards", "Mean reward per role", ("reward/propose", "reward/solve", "reward/critique")),
    ("rl_solve", "Solve rate (held-out by execution; train: the solver's attempts)",
     ("eval/solve_rate", "eval/solve_rate/deduction", "eval/solve_rate/abduction", "eval/solve_rate/induction",
      "solve/train_solve_rate", "propose/difficulty")),
    ("rl_critique", "Critique agreement with the executor", ("critique/agreement",)),
    ("rl_curriculum", "Curriculum: mixed-outcome share, proposer share, proposals outside the generator's window",
     ("solve/mixed_share", "curriculum/proposer_share/deduction", "curriculum/proposer_share/abduction",
      "curriculum/proposer_share/induction", "propose/outside_support")),
    ("rl_kl", "KL to pi_old (k3 estimate, last update epoch)", ("kl/propose", "kl/solve", "kl/critique")),
    ("rl_entropy", "Policy entropy per response position (nats)",
     ("entropy/propose", "entropy/solve", "entropy/critique")),
)
# Grid tasks' own evaluation metrics (a maze's path cells and its loss against the base-rate bound).
PATH_FIGURES = (
    ("paths", "Path cells (held-out): precision, recall, F1; valid shortest paths",
     ("eval/path_precision", "eval/path_recall", "eval/path_f1", "eval/valid_path_accuracy")),
    ("base_rate", "Open-cell loss / the base-rate bound (below 1: the model knows which cells)",
     ("eval/loss_over_base_rate",)),
)
# A classifier's headline (the e-mail task): validation macro-F1 at every evaluation, test at the end.
CLASSIFY_FIGURES = (
    ("macro_f1", "Macro-F1 (validation at each evaluation; test at the end)", ("val/macro_f1", "eval/macro_f1")),
)
# Figures that are drawn against both step and wall time (the rest: step only).
TWO_AXES = ("loss", "accuracy")

# Config settings worth a line in the report and the runs table (dotted keys).
KEY_SETTINGS = (
    "data.path", "model.hidden_size", "model.L_layers", "model.H_cycles", "model.L_cycles",
    "model.halt_max_steps", "model.mixer", "train.batch_size", "train.micro_batch",
    "train.max_steps", "train.lr", "run.threads", "run.dtype", "run.compile", "run.seed",
)
# An LM policy's run (rl.policy: lm) trains no TRM: its model section only sized the planner's probe.
LM_SETTINGS = (
    "rl.policy", "rl.model_path", "rl.model_shape", "rl.lm_dtype", "rl.lora_rank", "rl.checkpoint_layers",
    "rl.max_prompt_tokens", "rl.max_response_tokens", "rl.micro_batch", "rl.lr", "train.batch_size", "train.lr",
    "run.threads", "run.dtype", "run.seed",
)
# A task's own plots: (run_dir, out_dir) -> (figures written, Markdown section appended to report.md).
Plots = Callable[[Path, Path], tuple[list[Path], str]]


class MissingMetricsError(FileNotFoundError):
    """A run directory without metrics.jsonl."""


def _metrics_path(run_dir: Path) -> Path:
    path = rundir.path(run_dir, rundir.METRICS)
    if not path.is_file():
        raise MissingMetricsError(
            f"no metrics found at {path}: run `trmkit train` first "
            f"(or point to a run directory that holds {rundir.METRICS})"
        )
    return path


class DamagedRunFileError(ConfigError):
    """A file of a run directory that exists but cannot be read (cut short, edited by hand)."""


def _read_history(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl (a torn last line skipped); a file that is not JSON lines is named."""
    try:
        history = read_metrics(path)
    except (UnicodeDecodeError, TypeError) as err:  # binary bytes; a line that is JSON but not a record
        raise DamagedRunFileError(f"{path} is damaged ({type(err).__name__}); `trmkit train` appends a JSON line "
                                  "per logged step: restore it, or move it aside") from err
    return history


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        raise DamagedRunFileError(f"{path} is damaged ({type(err).__name__}: {str(err)[:120]}); `trmkit train` "
                                  f"writes it at the end of a run: move it aside to read the run from "
                                  f"{rundir.METRICS} alone") from err
    return data if isinstance(data, dict) else {}


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise DamagedRunFileError(f"{path} is damaged ({type(err).__name__}); `trmkit train` writes it when a "
                                  "run starts: restore it, or move it aside to read the run without it") from err
    return data if isinstance(data, dict) else {}


# Flat summary.json keys (as the training loop writes them) that are eval results.
EVAL_KEYS = ("loss", "cell_accuracy", "blank_accuracy", "exact_accuracy", "act_steps")


def normalize_summary(raw: Mapping[str, Any], history: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """summary.json in the layout of monitor.summarize, gaps filled from the history.

    Accepts the flat layout too ("samples_per_second": 123.4, "exact_accuracy": 0.5
    at top level); values in summary.json win over values derived from metrics.jsonl.
    """
    merged = summarize(history)
    rates = raw.get("samples_per_second")
    final = dict(raw.get("final_metrics") or {})
    final.update({f"eval/{k}": raw[k] for k in EVAL_KEYS if isinstance(raw.get(k), (int, float))})
    for key, value in raw.items():
        if key not in ("samples_per_second", "final_metrics") and key not in EVAL_KEYS and value is not None:
            merged[key] = value
    if isinstance(rates, Mapping):
        merged["samples_per_second"].update({k: v for k, v in rates.items() if v is not None})
    elif isinstance(rates, (int, float)):
        merged["samples_per_second"]["overall"] = rates
    merged["final_metrics"].update(final)
    for key in [k for k in merged["final_metrics"] if f"eval/{k}" in merged["final_metrics"]
                and not k.startswith(("train/", "eval/", "val/"))]:
        del merged["final_metrics"][key]  # the trainer keeps each test result twice, bare and as eval/: once here
    if "advice" not in raw:
        merged["advice"] = advise(merged)
    return merged


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"hidden_size": 512}} -> {"model.hidden_size": 512}."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _points(history: Sequence[Mapping[str, Any]], key: str, x: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for record in history:
        value, at = record.get(key), record.get(x)
        if isinstance(value, (int, float)) and isinstance(at, (int, float)) and math.isfinite(value):
            xs.append(at)
            ys.append(value)
    return xs, ys


def _plot_figure(history: Sequence[Mapping[str, Any]], stem: str, title: str,
                 keys: Sequence[str], out_dir: Path) -> Path:
    import matplotlib.pyplot as plt  # backend already set to Agg by write_report

    axes_x = ("step", "wall") if stem in TWO_AXES else ("step",)
    fig, axes = plt.subplots(1, len(axes_x), figsize=(6 * len(axes_x), 4), squeeze=False)
    for ax, x in zip(axes[0], axes_x):
        for key in keys:
            xs, ys = _points(history, key, x)
            if xs:  # sparse series (eval) get markers so single points show
                ax.plot(xs, ys, label=key, marker="o" if len(xs) < 30 else None, markersize=3)
        ys_all = [y for key in keys for y in _points(history, key, x)[1]]
        if stem == "loss" and ys_all and min(ys_all) > 0 and max(ys_all) / min(ys_all) > 10:
            ax.set_yscale("log")
        ax.set_xlabel("step" if x == "step" else "wall time (s)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / f"{stem}.png"
    write_figure(path, fig, dpi=100)
    plt.close(fig)
    return path


def _present(history: Sequence[Mapping[str, Any]], key: str) -> bool:
    return bool(_points(history, key, "step")[0])


def write_report(run_dir: str | Path, plots: Plots | None = None) -> list[Path]:
    """Write RUN_DIR/report/*.png and report.md; returns the files written.

    `plots`: the run's task's own figures and Markdown section (Task.plots), drawn after the
    generic ones."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed; set here, not at import time
    run_dir = Path(run_dir)
    history = _read_history(_metrics_path(run_dir))
    out_dir = rundir.path(run_dir, rundir.REPORT)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = normalize_summary(_read_json(rundir.path(run_dir, rundir.SUMMARY)), history)
    config = _read_yaml(rundir.path(run_dir, rundir.CONFIG))
    written, absent = [], []
    for stem, title, keys in FIGURES:
        present = [k for k in keys if _present(history, k)]
        absent += [k for k in keys if k not in present]
        if present:
            written.append(_plot_figure(history, stem, title, present, out_dir))
    for stem, title, keys in RL_FIGURES + PATH_FIGURES + CLASSIFY_FIGURES:  # only where the run has them
        present = [k for k in keys if _present(history, k)]
        if present:
            written.append(_plot_figure(history, stem, title, present, out_dir))
    task_figures, task_markdown = plots(run_dir, out_dir) if plots is not None else ([], "")
    steps_figures, steps_markdown = steps_curve(run_dir, out_dir)
    written += task_figures + steps_figures
    task_markdown = steps_markdown + task_markdown
    md = write_text(out_dir / rundir.REPORT_MD,
                    _markdown(run_dir.name, summary, config, written, absent, len(history)) + task_markdown)
    return written + [md]


def steps_curve(run_dir: Path, out_dir: Path) -> tuple[list[Path], str]:
    """RUN_DIR/eval_steps.json (`trmkit eval --steps 8,16,...`): exact accuracy against the number
    of supervision steps at test time, one line per evaluated store, and its table."""
    path = rundir.path(run_dir, rundir.EVAL_STEPS)
    if not path.is_file():
        return [], ""
    import matplotlib.pyplot as plt

    curves = json.loads(path.read_text())
    fig, ax = plt.subplots(figsize=(6, 4))
    lines = ["", "## Test-time supervision steps (`trmkit eval --steps`)", "",
             "| store | K | exact | valid paths | seconds | voted exact (`--vote`) | voting seconds |",
             "|---|---|---|---|---|---|---|"]
    for store, by_k in curves.items():
        ks = sorted(by_k, key=int)
        ax.plot([int(k) for k in ks], [by_k[k].get("exact_accuracy", 0) for k in ks], marker="o",
                label=Path(store).name)
        lines += [f"| {Path(store).name} | {k} | {by_k[k].get('exact_accuracy', 0):.3f} | "
                  f"{_cell(by_k[k].get('valid_path_accuracy'), '.3f')} | {by_k[k].get('seconds', 0):.0f} | "
                  f"{_voted(by_k[k].get('vote'))} |" for k in ks]
    ax.set_xscale("log", base=2)
    ax.set(xlabel="supervision steps K at evaluation", ylabel="exact accuracy", title="More thinking at test time")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = out_dir / "eval_steps.png"
    write_figure(out, fig, dpi=110)
    plt.close(fig)
    return [out], "\n".join(lines) + "\n"


def _voted(vote: Mapping[str, Any] | None) -> str:
    """The largest vote of an eval_steps.json entry: "0.946 (8 variants) | 38" ("- | -" without one)."""
    if not vote:
        return "- | -"
    n = max(vote, key=int)
    return f"{vote[n].get('exact_accuracy', 0):.3f} ({n} variants) | {vote[n].get('seconds', 0):.0f}"


def _table(rows: Sequence[tuple[Any, Any]], header: tuple[str, str]) -> list[str]:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    return lines + [f"| {k} | {v} |" for k, v in rows]


def _markdown(name: str, summary: Mapping[str, Any], config: Mapping[str, Any],
              images: Sequence[Path], absent: Sequence[str], n_records: int) -> str:
    flat = flatten(config)
    rates = summary.get("samples_per_second") or {}
    lines = [f"# Run report: {name}", ""]
    if flat:
        keys = LM_SETTINGS if flat.get("rl.policy") == "lm" else KEY_SETTINGS
        settings = [(k, flat[k]) for k in keys if k in flat and flat[k] != ""]
        lines += ["## Key settings", ""] + _table(settings or list(flat.items()), ("setting", "value"))
        lines += [""]
    else:
        lines += [f"No {rundir.CONFIG} in the run directory.", ""]
    final = summary.get("final_metrics") or {}
    lines += ["## Final metrics", ""]
    lines += _table([(k, f"{v:.4g}") for k, v in sorted(final.items())], ("metric", "value")) if final \
        else ["No train/ or eval/ metrics were logged."]
    timing = [
        ("steps", summary.get("steps")),
        ("wall time", format_duration(summary.get("wall_seconds"))),
        ("training time", format_duration(summary.get("train_seconds"))),
        ("evaluation time", format_duration(summary.get("eval_seconds"))),
        ("samples seen", summary.get("samples_seen") or "-"),
        ("samples/s mean / median / overall",
         " / ".join("-" if rates.get(k) is None else f"{rates[k]:.1f}" for k in ("mean", "median", "overall"))),
        ("peak RSS (GB)", "-" if summary.get("peak_rss_gb") is None else f"{summary['peak_rss_gb']:.2f}"),
        ("mean CPU (%)", "-" if summary.get("cpu_percent_mean") is None else f"{summary['cpu_percent_mean']:.0f}"),
    ]
    lines += ["", "## Timings and resources", ""] + _table(timing, ("quantity", "value")) + [""]
    advice = list(summary.get("throughput_warnings") or []) + list(summary.get("advice") or [])
    lines += ["## Advice", ""] + ([f"- {a}" for a in advice] or ["Nothing held this run back that trmkit could see."])
    lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in images]
    if absent:
        lines += ["", f"Not logged in this run, so not plotted: {', '.join(absent)}."]
    lines += ["", f"Built from {n_records} records of {rundir.METRICS}.", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- runs table

# Where each column is found in config.yaml; the first key present wins.
RUN_COLUMNS = {
    "task": ("data.task", "data.path"),
    "hidden": ("model.hidden_size",),
    "layers": ("model.L_layers", "model.num_layers"),
    "cycles": ("model.H_cycles",),
    "l_cycles": ("model.L_cycles",),
}


def _first_line_time(path: Path) -> float | None:
    if not path.is_file():
        return None
    with open(path, encoding="utf-8", errors="replace") as f:  # a damaged line is skipped, as a torn one
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "time" in record:
                return float(record["time"]) - float(record.get("wall", 0.0))
    return None


# Each task's headline metrics in the runs table (data_meta.json's "task"): (metric, label, format), the first
# present shown; a task not listed (or a run from before data_meta.json) shows exact and cell accuracy.
HEADLINES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "email": (("eval/macro_f1", "macro-F1", ".3f"), ("eval/accuracy", "accuracy", "pct")),
    "maze": (("eval/valid_path_accuracy", "valid paths", "pct"), ("eval/exact_accuracy", "exact", "pct")),
    "selfplay-code": (("eval/solve_rate/nontrivial", "solve nontrivial", ".3f"), ("eval/solve_rate", "solve", ".3f")),
    "email-mlm": (("eval/cell_accuracy", "masked tokens", "pct"),),
}
DEFAULT_HEADLINE = (("eval/exact_accuracy", "exact", "pct"), ("eval/cell_accuracy", "cell", "pct"))


def headline(task: str | None, final: Mapping[str, Any]) -> str:
    """The task's own result in a few words: "macro-F1 0.942, accuracy 95.1%", "exact 63.6%, cell 94.8%"."""
    parts = [f"{label} {_cell(final[key], spec)}" for key, label, spec in HEADLINES.get(task or "", DEFAULT_HEADLINE)
             if isinstance(final.get(key), (int, float))]
    return ", ".join(parts) or "-"


def _run_row(run_dir: Path) -> dict[str, Any]:
    raw = _read_json(rundir.path(run_dir, rundir.SUMMARY))
    flat = flatten(_read_yaml(rundir.path(run_dir, rundir.CONFIG)))
    row: dict[str, Any] = {"name": run_dir.name, "path": str(run_dir)}
    for column, keys in RUN_COLUMNS.items():
        row[column] = next((flat[k] for k in keys if flat.get(k) not in (None, "")), None)
    if row["task"] is not None and "/" in str(row["task"]):
        row["task"] = Path(str(row["task"])).name  # data.path -> the dataset's directory name
    metrics = rundir.path(run_dir, rundir.METRICS)
    history = _read_history(metrics) if not raw and metrics.is_file() else []  # unfinished run
    summary = normalize_summary(raw, history)
    final = summary["final_metrics"]
    rates = summary["samples_per_second"]
    row.update(
        steps=summary.get("steps"),
        exact_accuracy=final.get("eval/exact_accuracy"),
        cell_accuracy=final.get("eval/cell_accuracy"),
        result=headline(rundir.task_of(run_dir), final),
        samples_per_second=rates["median"] if rates["median"] is not None else rates["overall"],
        wall_seconds=summary.get("wall_seconds"),
        started_at=summary.get("started_at") or _first_line_time(metrics),
        finished=bool(raw),
    )
    return row


def list_runs(root: str | Path) -> list[dict[str, Any]]:
    """One row per run directory under root (any directory with summary.json,
    config.yaml or metrics.jsonl), oldest first; a run whose files cannot be read is a row
    with its name, path and "error" (the file and why), after the others."""
    root = Path(root)
    if not root.is_dir():
        kind = "is not a folder" if root.exists() else "does not exist"
        raise ConfigError(f"{root} {kind}: give the folder that holds your run directories "
                          "(`trmkit runs DIR`; without DIR, ./runs)")
    dirs = [d for d in sorted(root.iterdir()) if d.is_dir() and rundir.is_run_dir(d)]
    rows, broken = [], []
    for d in dirs:
        try:
            rows.append(_run_row(d))
        except (DamagedRunFileError, OSError, UnicodeDecodeError) as err:
            broken.append({"name": d.name, "path": str(d), "error": str(err), "started_at": None})
    return sorted(rows, key=lambda r: (r["started_at"] is None, r["started_at"] or 0.0, r["name"])) + broken


def _cell(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    if spec == "pct":
        return f"{100 * value:.1f}%"
    return f"{value:{spec}}" if spec else str(value)


def format_runs(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows of list_runs as a fixed-width text table."""
    broken = [r for r in rows if "error" in r]
    rows = [r for r in rows if "error" not in r]
    unreadable = [f"unreadable: {r['name']}: {r['error']}" for r in broken]
    if not rows:
        return "\n".join(["no runs found"] + unreadable)
    header = ("name", "task", "hidden", "layers", "cycles", "steps", "result", "samples/s", "wall", "date")
    table = [header]
    for r in rows:
        cycles = "-" if r.get("cycles") is None else f"{r['cycles']}x{_cell(r.get('l_cycles'))}"
        date = "-" if r.get("started_at") is None else \
            dt.datetime.fromtimestamp(r["started_at"]).strftime("%Y-%m-%d %H:%M")
        name = r["name"] + ("" if r.get("finished", True) else " *")
        table.append((
            name, _cell(r.get("task")), _cell(r.get("hidden")), _cell(r.get("layers")), cycles,
            _cell(r.get("steps")), r.get("result") or headline(None, {"eval/exact_accuracy": r.get("exact_accuracy"),
                                                                    "eval/cell_accuracy": r.get("cell_accuracy")}),
            _cell(r.get("samples_per_second"), ".0f"), format_duration(r.get("wall_seconds")), date,
        ))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if any(not r.get("finished", True) for r in rows):
        lines.append(f"* no {rundir.SUMMARY} yet: still running, or stopped early")
    return "\n".join(lines + unreadable)
