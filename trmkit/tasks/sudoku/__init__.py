"""Sudoku: 9 x 9 puzzles, from generated grids, plain-text collections or Sudoku-Extreme CSV.

solver.py    digit grids, the constraint-propagation solver (solve, count, hardness), tokens
generate.py  the puzzle generator and the symmetry augmentation
build.py     readers of text/CSV collections and the store builder (`build_sudoku`), ratings
score.py     exact accuracy per rating band
variants.py  the symmetries a test-time vote runs (`trmkit eval --vote`)
text.py      puzzles and answers as `trmkit predict` reads and writes them, with the rules' verdict
task.py      the task: `trmkit data sudoku` options, the learning-curve set, TASK
"""

from trmkit.tasks.sudoku.task import TASK, SudokuLearnSet, SudokuOptions

__all__ = ["TASK", "SudokuLearnSet", "SudokuOptions"]
