"""Answer the example puzzles with trained runs from Python, each answer in its puzzle's form.

    python examples/predict_puzzles.py SUDOKU_RUN [MAZE_RUN]

SUDOKU_RUN: a run trained on a Sudoku store (runs/py of the README, or runs/example-sudoku/run
written by examples/sudoku_from_python.py); MAZE_RUN: a maze run (runs/maze-trace of the README).
Each run's model is loaded once, on its first `predict`. The same from the shell:
`trmkit predict SUDOKU_RUN examples/sudoku-puzzles.txt`, `trmkit predict MAZE_RUN examples/mazes.txt`.
"""

import sys
from pathlib import Path

import trmkit

here = Path(__file__).resolve().parent
sudoku = trmkit.load(sys.argv[1] if len(sys.argv) > 1 else "runs/example-sudoku/run")
puzzles = (here / "sudoku-puzzles.txt").read_text().split()  # 81 characters each, '0' or '.' blank
for puzzle, answer in zip(puzzles, sudoku.predict(puzzles, details=True)):
    print(puzzle, "->", answer["output"], "valid" if answer["valid"] else f"invalid ({answer['reason']})")

if len(sys.argv) > 2:
    mazes = (here / "mazes.txt").read_text().strip("\n").split("\n\n")  # '#' wall, ' ' open, S, G
    for answer in trmkit.load(sys.argv[2]).predict(mazes, details=True):  # --steps auto, as for the command
        verdict = f"valid, {answer['length']} steps" if answer["valid"] else f"invalid ({answer['reason']})"
        print(answer["output"], verdict, f"after {answer['steps']} supervision steps", sep="\n")
