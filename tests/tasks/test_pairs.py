"""Your own puzzle: `trmkit data pairs` from JSONL (good and bad lines), and the 6 x 6 Sudoku generator."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from trmkit.data.store import open_store
from trmkit.tasks.pairs.build import build_pairs
from trmkit.tasks.pairs.codec import Layout, parse_value

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
    built = build_pairs(source, tmp_path / "d", test_fraction=0.25, blank="0", log=logged.append)
    assert built["skipped"] == 7 and built["train"] + built["test"] == 4
    text = "\n".join(logged)
    assert "12 pairs read, 4 kept, 7 skipped" not in text  # blank lines are not read as pairs
    assert "11 pairs read, 4 kept, 7 skipped" in text
    for where, reason in [(2, "bad_json"), (3, "missing_key"), (4, "shape_mismatch"), (5, "ragged_grid"),
                          (6, "mixed_kinds"), (7, "too_large"), (8, "bad_value")]:
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
