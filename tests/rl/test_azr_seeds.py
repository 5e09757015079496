"""AZR seed files and LIMO traces: the real files read typed (first 20 lines of each), and a broken
line named by file:line and key, or counted when the caller asks to skip."""

import itertools
import json
from pathlib import Path

import pytest

from trmkit.config import ConfigError
from trmkit.rl.azr.seeds import (CodeFSeed, IoSeed, LimoTrace, Skips, program_source, read_code_f_seeds,
                                 read_io_seeds, read_limo)

RL_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "rl"


def real(name: str) -> Path:
    path = RL_DATA / name
    if not path.is_file():
        pytest.fail(f"AZR seed data not found: looked for {path} (repo root/../shared/data/rl)")
    return path


@pytest.mark.parametrize("name", ["azr_7b_seed_io.jsonl", "azr_3b_coder_seed_io.jsonl"])
def test_io_seed_files(name):
    seeds = list(itertools.islice(read_io_seeds(real(name)), 20))
    assert len(seeds) == 20 and all(isinstance(s, IoSeed) for s in seeds)
    assert all("def f(" in s.snippet and s.input for s in seeds)  # some outputs are recorded as ''
    assert seeds[0].where == f"{real(name)}:1"
    if name == "azr_7b_seed_io.jsonl":
        assert (seeds[0].snippet, seeds[0].input, seeds[0].output) == (
            "def f(a):\n    return a", '"Hello world"', '"Hello world"')
    else:  # this file records the types too, on all lines but one
        assert sum(bool(s.input_type and s.output_type) for s in seeds) == 19
        assert {s.output_type for s in seeds} >= {"int", "str", "dict", "NoneType"}


def test_code_f_seed_file():
    seeds = list(itertools.islice(read_code_f_seeds(real("azr_7b_code_f_seed_io.jsonl")), 20))
    assert len(seeds) == 20 and all(isinstance(s, CodeFSeed) for s in seeds)
    assert all(len(s.inputs) == len(s.outputs) >= 1 and s.message for s in seeds)
    assert seeds[0].message == "Write a function that returns whatever you input"


def test_limo_sample():
    [trace] = read_limo(real("limo_sample.json"))
    assert isinstance(trace, LimoTrace) and trace.answer == "25" and trace.question.startswith("Find")


def test_limo_as_a_list_and_as_jsonl(tmp_path):
    traces = [{"question": f"q{i}", "solution": "s", "answer": i} for i in range(3)]
    (tmp_path / "list.json").write_text(json.dumps(traces, indent=2))
    (tmp_path / "lines.jsonl").write_text("\n".join(json.dumps(t) for t in traces))
    for name in ("list.json", "lines.jsonl"):
        assert [t.answer for t in read_limo(tmp_path / name)] == ["0", "1", "2"]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = json.dumps({"snippet": "def f(a):\n    return a", "input": "1", "output": "1", "imports": []})


def test_a_broken_line_is_named_by_file_line_and_key(tmp_path):
    path = write_lines(tmp_path / "seeds.jsonl", [GOOD, json.dumps({"snippet": "def f(a): return a", "input": "1"})])
    reader = read_io_seeds(path)
    assert next(reader).input == "1"
    with pytest.raises(ConfigError, match=rf"{path}:2: key 'output' is missing; each line must be an AZR seed_io"):
        next(reader)


def test_broken_lines_are_counted_when_asked(tmp_path):
    path = write_lines(tmp_path / "seeds.jsonl", [GOOD, "{not json", json.dumps({"snippet": 3, "input": "1",
                                                                               "output": "1"}), "[1]", GOOD])
    skips = Skips()
    assert len(list(read_io_seeds(path, skips=skips))) == 2
    assert skips.count == 3
    assert [w.split(": ")[0] for w in skips.where] == [f"{path}:{n}" for n in (2, 3, 4)]
    assert "key 'snippet' must be a string" in skips.where[1]


def test_code_f_pairs_must_match(tmp_path):
    line = json.dumps({"snippet": "def f(a): return a", "inputs": ["1", "2"], "outputs": ["1"], "message": "m"})
    with pytest.raises(ConfigError, match=r":1: keys 'inputs' and 'outputs' must be non-empty lists of equal length"):
        list(read_code_f_seeds(write_lines(tmp_path / "f.jsonl", [line])))


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.jsonl: cannot read the seed file"):
        list(read_io_seeds(tmp_path / "nope.jsonl"))


def test_a_limo_item_without_an_answer(tmp_path):
    path = tmp_path / "limo.json"
    path.write_text(json.dumps([{"question": "q", "solution": "s", "answer": "1"}, {"question": "q", "solution": "s"}]))
    with pytest.raises(ConfigError, match=r"limo.json\[1\]: key 'answer' is missing"):
        list(read_limo(path))


def test_program_source_adds_the_imports_it_lacks():
    assert program_source("def f(a):\n    return a", ("import math",)) == "import math\ndef f(a):\n    return a"
    snippet = "import math\ndef f(a):\n    return math.sqrt(a)"
    assert program_source(snippet, ("import math",)) == snippet
