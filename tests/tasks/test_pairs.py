"""Your own puzzle: `trmkit data pairs` from JSONL (good and bad lines), training a tiny model on it,
and `trmkit predict` answering new inputs in their own form."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from trmkit import cli, registry
from trmkit.data.store import open_store
from trmkit.tasks.base import Task
from trmkit.tasks.options import BuildOptions
from trmkit.tasks.pairs.build import build_pairs
from trmkit.tasks.pairs.codec import Layout, parse_value
from trmkit.tasks.pairs.reference import write_reference

TINY = """
run: {seed: 0, threads: 1, compile: "off"}
model: {mixer: mlp_t, hidden_size: 32, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 2, puzzle_emb_len: 2}
train: {batch_size: 8, max_steps: 4, lr: 1.0e-3, warmup_steps: 1, eval_every: 0, log_every: 2,
        checkpoint_minutes: 0, ema_decay: 0.0}
"""
GOOD_GRID = {"input": [[1, 0], [0, 2]], "output": [[1, 2], [2, 2]]}


def _write(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_bad_lines_are_reported_with_file_line_and_reason_counted_and_skipped(tmp_path):
    source = _write(tmp_path / "p.jsonl", [
        GOOD_GRID,
        "{not json",                                                # line 2
        {"input": [[1, 2]]},                                        # 3: no output
        {"input": [[1, 2]], "output": [[1, 2, 3]]},                 # 4: shapes differ
        {"input": [[1, 2], [3]], "output": [[1, 2], [3]]},          # 5: ragged
        {"input": "ab", "output": "ba"},                            # 6: a string in a grid file
        {"input": [[300]], "output": [[1]]},                        # 7: too large a value
        {"input": [[1.5]], "output": [[1]]},                        # 8: not an integer
        "",                                                         # blank lines are passed over
        {"input": [[3, 0, 0]], "output": [[3, 1, 1]]},              # 10: another shape: padded
        GOOD_GRID, GOOD_GRID,
    ])
    logged = []
    with open(source, "ab") as f:
        f.write(b'{"input": "\xff", "output": "a"}\n')  # line 13: not UTF-8
    built = build_pairs(source, tmp_path / "d", test_fraction=0.25, blank="0", log=logged.append)
    assert built["skipped"] == 8 and built["train"] + built["test"] == 4
    text = "\n".join(logged)
    assert "12 pairs read, 4 kept, 8 skipped" in text  # blank lines are not read as pairs
    for where, reason in [(2, "bad_json"), (3, "missing_key"), (4, "shape_mismatch"), (5, "ragged_grid"),
                          (6, "mixed_kinds"), (7, "too_large"), (8, "bad_value"), (13, "bad_encoding")]:
        assert f"p.jsonl:{where}: {reason}:" in text, (where, reason)
    assert "canvas 2 x 3 (the largest of 2 shapes" in text
    splits = open_store(tmp_path / "d")
    meta = splits["train"].meta
    assert meta.task == "pairs" and meta.vocab == ("<pad>", "0", "1", "2", "3") and meta.grid_shape == (2, 3)
    assert meta.blank_id == 1 and meta.build["skipped_by_reason"]["bad_json"] == 1
    rows = np.concatenate([np.asarray(s.inputs) for s in splits.values()])
    assert sorted(map(tuple, rows.tolist()))[0] == (2, 1, 0, 1, 3, 0)  # 2 x 2 at the top left, padding around


def test_strings_any_alphabet_round_trip_through_the_layout(tmp_path):
    source = _write(tmp_path / "s.jsonl", [{"input": "héllo", "output": "HÉLLO"}, {"input": "ab", "output": "AB"}])
    build_pairs(source, tmp_path / "d", test_fraction=0.5, log=lambda m: None)
    layout = Layout.from_meta(open_store(tmp_path / "d")["test"].meta)
    assert layout.kind == "string" and layout.canvas == (5,) and "É" in layout.vocab
    value = parse_value("hab", "input")
    assert layout.decode(layout.encode(value), value.shape) == "hab"
    with pytest.raises(ValueError, match="no usable pairs"):
        build_pairs(_write(tmp_path / "bad.jsonl", ["[1, 2]"]), tmp_path / "e", log=lambda m: None)
    with pytest.raises(ValueError, match="--blank 'z' is not a symbol"):
        build_pairs(source, tmp_path / "f", blank="z", log=lambda m: None)


def test_a_tiny_run_predicts_new_inputs_in_their_own_form(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    pairs = [{"input": g.tolist(), "output": (3 - g).tolist()} for g in rng.integers(0, 4, size=(24, 2, 3))]
    _write(tmp_path / "train.jsonl", pairs)
    assert cli.main(["data", "pairs", "--source", str(tmp_path / "train.jsonl"), "--out", str(tmp_path / "d")]) == 0
    (tmp_path / "tiny.yaml").write_text(TINY)
    assert cli.main(["train", str(tmp_path / "tiny.yaml"), f"run.dir={tmp_path / 'run'}",
                     f"data.path={tmp_path / 'd'}"]) == 0
    inputs = _write(tmp_path / "in.jsonl", [{"input": [[1, 2]]}, "oops", {"input": [[1, 1, 1, 1]]},
                                            {"input": [[0, 1, 2], [3, 0, 1]], "output": [[3, 2, 1], [0, 3, 2]]}])
    capsys.readouterr()
    assert cli.main(["predict", str(tmp_path / "run"), str(inputs), "--out", str(inputs)]) == 2
    assert "which this command reads" in capsys.readouterr().err
    assert cli.main(["predict", str(tmp_path / "run"), str(inputs), "--out", str(tmp_path / "run" / "a.jsonl")]) == 2
    assert "lies inside" in capsys.readouterr().err  # never into the run it reads
    assert cli.main(["predict", str(tmp_path / "run"), str(inputs), "--out", str(tmp_path / "out.jsonl")]) == 0
    err = capsys.readouterr().err
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [line["line"] for line in lines] == [1, 2, 3, 4]
    first = lines[0]["output"]
    assert len(first) == 1 and len(first[0]) == 2 and all(v in range(4) for v in first[0])  # a 1 x 2 grid back
    assert lines[1]["error"].startswith("bad_json") and lines[2]["error"].startswith("too_large")
    assert isinstance(lines[3]["correct"], bool) and "against the 1 given outputs: cell_accuracy" in err
    assert "in.jsonl:2: bad_json" in err and "2 inputs answered, 2 lines skipped" in err


def _generator():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "pairs_sudoku6.py"
    spec = importlib.util.spec_from_file_location("pairs_sudoku6", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_6x6_sudoku_generator_writes_valid_unique_puzzles(tmp_path):
    gen = _generator()
    assert gen.main(["--num", "3", "--seed", "1", "--out", str(tmp_path / "s.jsonl")]) == 0
    for line in (tmp_path / "s.jsonl").read_text().splitlines():
        pair = json.loads(line)
        grid, solution = np.array(pair["input"]), np.array(pair["output"])
        assert (grid == 0).sum() == 18 and np.all((grid == 0) | (grid == solution))
        units = [*solution, *solution.T, *(solution[r:r + 2, c:c + 3].ravel() for r in (0, 2, 4) for c in (0, 3))]
        assert all(sorted(u) == [1, 2, 3, 4, 5, 6] for u in units)
        assert gen.count_solutions(grid.tolist()) == 1


def _reference_split(folder: Path, sets: dict, meta: dict) -> None:
    """A split folder as the TRM reference's builders write it: dataset.json and <set>__<array>.npy."""
    folder.mkdir(parents=True)
    (folder / "dataset.json").write_text(json.dumps({**meta, "sets": list(sets)}))
    for name, (inputs, labels, groups) in sets.items():
        n = len(inputs)
        arrays = {"inputs": inputs, "labels": labels, "puzzle_identifiers": np.zeros(n, np.int32),
                  "puzzle_indices": np.arange(n + 1, dtype=np.int32), "group_indices": np.array(groups, np.int32)}
        for key, value in arrays.items():
            np.save(folder / f"{name}__{key}.npy", np.asarray(value, dtype=np.int32))


def test_a_trm_reference_folder_is_imported_with_its_splits_and_sets_joined(tmp_path):
    meta = {"pad_id": 0, "ignore_label_id": 0, "blank_identifier_id": 0, "vocab_size": 5, "seq_len": 4,
            "num_puzzle_identifiers": 1, "total_groups": 2, "mean_puzzle_examples": 1.0}
    x = np.array([[1, 2, 3, 4], [1, 1, 2, 2], [4, 3, 2, 1]])
    _reference_split(tmp_path / "ref" / "train", {"a": (x[:2], 5 - x[:2], [0, 2]), "b": (x[2:], 5 - x[2:], [0, 1])},
                     meta)
    _reference_split(tmp_path / "ref" / "test", {"all": (x[:1], 5 - x[:1], [0, 1])}, meta)
    assert cli.main(["data", "pairs", "--source", str(tmp_path / "ref"), "--out", str(tmp_path / "d"),
                     "--blank", "1"]) == 0
    splits = open_store(tmp_path / "d")
    train = splits["train"]
    assert np.array_equal(np.asarray(train.inputs), x) and np.array_equal(np.asarray(train.labels), 5 - x)
    assert list(train.group_indices) == [0, 2, 3] and train.meta.grid_shape == (2, 2)
    assert train.meta.vocab == ("<pad>", "1", "2", "3", "4") and train.meta.blank_id == 1
    assert Layout.from_meta(splits["test"].meta).canvas == (2, 2)
    assert cli.main(["data", "pairs", "--source", str(tmp_path / "ref"), "--out", str(tmp_path / "x"),
                     "--aug", "2", "--permute", "1,2"]) == 2  # augmentation is for JSONL pairs
    bad = tmp_path / "bad" / "train"
    _reference_split(bad, {"all": (np.array([[1, 9, 1, 1]]), np.array([[1, 1, 1, 1]]), [0, 1])}, meta)
    with pytest.raises(ValueError, match="inputs row 0 holds token 9, outside vocab_size 5"):
        write_reference(tmp_path / "bad", tmp_path / "e", lambda layout: None, log=lambda m: None)


PLUGGED = Task(name="plugged", shape="grid", summary="a task from another package",
               options=BuildOptions, build=lambda args, log: log("plugged built"))
CLASH = Task(name="sudoku", shape="grid", summary="", options=BuildOptions, build=lambda args, log: None)


def test_third_party_tasks_load_from_entry_points_and_a_broken_one_is_named(monkeypatch, capsys):
    from importlib import metadata

    group = registry.PLUGIN_GROUP
    plugins = [metadata.EntryPoint("plugged", "tests.tasks.test_pairs:PLUGGED", group),
               metadata.EntryPoint("broken", "tests.tasks.no_such_module:TASK", group),
               metadata.EntryPoint("notask", "json:dumps", group),
               metadata.EntryPoint("clash", "tests.tasks.test_pairs:CLASH", group)]
    monkeypatch.setattr(metadata, "entry_points", lambda group: [ep for ep in plugins if ep.group == group])
    monkeypatch.setattr(registry, "TASKS", dict(registry.TASKS))
    assert cli.main(["data", "plugged", "--out", "unused"]) == 0
    out, err = capsys.readouterr()
    assert "plugged built" in out and registry.get("plugged") is PLUGGED
    assert "task plugin broken = tests.tasks.no_such_module:TASK failed to load: ModuleNotFoundError" in err
    assert "task plugin notask = json:dumps is a function, not a trmkit.tasks.base.Task" in err
    assert "task plugin clash = tests.tasks.test_pairs:CLASH is named 'sudoku', which another task has" in err
    assert "broken" not in registry.TASKS and registry.get("sudoku") is not CLASH


def test_get_loads_the_plugins_for_a_name_it_does_not_know(monkeypatch):
    """A store of a plugin's task, trained or evaluated from Python (no CLI start), finds its task."""
    from importlib import metadata

    plugins = [metadata.EntryPoint("plugged", "tests.tasks.test_pairs:PLUGGED", registry.PLUGIN_GROUP)]
    monkeypatch.setattr(metadata, "entry_points", lambda group: [ep for ep in plugins if ep.group == group])
    monkeypatch.setattr(registry, "TASKS", dict(registry.TASKS))
    monkeypatch.setattr(registry, "_PLUGINS_READ", [])
    assert "plugged" not in registry.TASKS and registry.get("plugged") is PLUGGED
    with pytest.raises(KeyError, match="unknown task 'nothing'"):  # read once: no second load
        registry.get("nothing")
    assert registry._PLUGINS_READ == [True]


def test_augmentation_only_with_the_named_symmetries_keeps_sudoku_answers_valid(tmp_path):
    _generator().main(["--num", "6", "--seed", "2", "--out", str(tmp_path / "s.jsonl")])
    quiet = dict(test_fraction=2 / 6, log=lambda m: None)
    built = build_pairs(tmp_path / "s.jsonl", tmp_path / "d", aug=3, transforms="flip_rows,flip_cols,rot180",
                        permute="1,2,3,4,5,6", **quiet)
    assert built["train"] == 4 * 4 and built["test"] == 2  # the test split is never augmented
    train = open_store(tmp_path / "d")["train"]
    assert list(train.group_indices) == [0, 4, 8, 12, 16]
    layout = Layout.from_meta(train.meta)
    inputs, labels = np.asarray(train.inputs), np.asarray(train.labels)
    assert len({row.tobytes() for row in labels}) > 4  # the copies differ from their originals
    for x, y in zip(inputs, labels):
        grid, solution = np.array(layout.decode(x, (6, 6))), np.array(layout.decode(y, (6, 6)))
        assert np.all((grid == 0) | (grid == solution)) and (grid == 0).sum() == 18
        boxes = [solution[r:r + 2, c:c + 3].ravel() for r in (0, 2, 4) for c in (0, 3)]
        assert all(sorted(u) == [1, 2, 3, 4, 5, 6] for u in [*solution, *solution.T, *boxes])
    for kwargs, message in [(dict(aug=2), "--aug N needs the symmetries"),
                            (dict(permute="1,2"), "give their number with --aug N"),
                            (dict(aug=1, transforms="rot45"), "a grid's transforms are"),
                            (dict(aug=1, permute="1,9"), "two or more distinct symbols of the data")]:
        with pytest.raises(ValueError, match=message):
            build_pairs(tmp_path / "s.jsonl", tmp_path / "e", **kwargs, **quiet)
    _write(tmp_path / "wide.jsonl", [{"input": [[1, 2, 3]], "output": [[3, 2, 1]]}] * 3)
    with pytest.raises(ValueError, match="turn rows into columns, and the canvas 1 x 3 is not square"):
        build_pairs(tmp_path / "wide.jsonl", tmp_path / "f", aug=1, transforms="transpose", **quiet)


def test_shift_places_each_copy_somewhere_on_a_larger_canvas_the_same_for_input_and_output(tmp_path):
    """A model trained on 4 x 4 puzzles in the corner of a 6 x 6 canvas never sees the other cells filled;
    `--transforms shift` places every copy (input and output alike) at a random offset instead."""
    rng = np.random.default_rng(0)
    pairs = []
    for _ in range(20):
        square = (np.arange(4)[:, None] + np.arange(4)[None, :]) % 4 + 1
        hidden = square.copy()
        hidden[rng.integers(0, 4), rng.integers(0, 4)] = 0
        pairs.append({"input": hidden.tolist(), "output": square.tolist()})
    _write(tmp_path / "l4.jsonl", pairs)
    built = build_pairs(tmp_path / "l4.jsonl", tmp_path / "d", aug=6, transforms="shift", canvas="6x6",
                        symbols="0-6", test_fraction=0.25, log=lambda m: None)
    train, test = open_store(tmp_path / "d")["train"], open_store(tmp_path / "d")["test"]
    assert built["train"] == 15 * 7
    offsets = set()
    for x, y in zip(np.asarray(train.inputs).reshape(-1, 6, 6), np.asarray(train.labels).reshape(-1, 6, 6)):
        rows, cols = np.nonzero(y)  # the output's cells: a whole 4 x 4 block somewhere on the canvas
        r, c = int(rows.min()), int(cols.min())
        assert rows.max() - r == 3 and cols.max() - c == 3 and len(rows) == 16
        assert np.all(x[r:r + 4, c:c + 4] > 0) and (x > 0).sum() == 16  # the input sits in the same place
        offsets.add((r, c))
    assert (0, 0) in offsets and len(offsets) >= 6  # the originals at the start, the copies all over
    assert {tuple(np.argwhere(t.reshape(6, 6) > 0).min(0)) for t in np.asarray(test.inputs)} == {(0, 0)}


def test_a_string_run_answers_strings_of_the_input_length(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    words = ["abé", "bca", "cab", "éab", "aé", "ba"] * 3
    _write(tmp_path / "w.jsonl", [{"input": w, "output": w[::-1]} for w in words])
    assert cli.main(["data", "pairs", "--source", str(tmp_path / "w.jsonl"), "--out", str(tmp_path / "d")]) == 0
    (tmp_path / "tiny.yaml").write_text(TINY)
    assert cli.main(["train", str(tmp_path / "tiny.yaml"), f"run.dir={tmp_path / 'run'}",
                     f"data.path={tmp_path / 'd'}"]) == 0
    _write(tmp_path / "in.jsonl", [{"input": "cé"}, {"input": "abcd"}, {"input": [[1]]}])
    capsys.readouterr()
    assert cli.main(["predict", str(tmp_path / "run"), str(tmp_path / "in.jsonl")]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines[0]["output"]) == 2 and set(lines[0]["output"]) <= set("abcé")
    assert lines[1]["error"].startswith("too_large") and lines[2]["error"].startswith("mixed_kinds")
