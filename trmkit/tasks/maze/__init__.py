"""Maze: shortest paths on N x N grids (the paper's Maze-Hard is 30 x 30).

A maze is a grid of characters: ``#`` wall, space open, ``S`` start, ``G``
goal. The answer is the same grid with the cells of the shortest path from
S to G (S and G excluded) written ``o``. Store tokens: 0 pad (unused, the
grid is never padded), 1 ``#``, 2 space, 3 ``S``, 4 ``G``, 5 ``o``; every
cell is labelled.

Generator (our own; Maze-Hard's public files come from another generator):
a perfect maze is carved by a randomised depth-first search over the cells
at even coordinates (the passages between them at odd ones; for even N the
last row and column stay wall), then each remaining wall between two cells
is opened with probability ``loops``, so that the maze has cycles and the
model has to find the *shortest* of several routes. S is drawn at random, G
at random among the cells at least ``min_path`` steps away; a maze whose
shortest path is not unique is drawn again (up to 30 x 30 by default; past
it ties are kept). Hardness is ``min_path`` (Maze-Hard keeps paths longer
than 110 on 30 x 30; the default scales that by area up to 30 x 30,
``round(110 * N^2 / 900)``, and by side length past it, ``round(110 * N / 30)``).

Importer: the Maze-Hard CSV layout ``source,question,answer,rating`` with
N*N characters per grid. Each row is checked (size, characters, one S and
one G, the answer is the question plus ``o`` cells that form a shortest
path); a bad row is reported as file:line with the reason and skipped.

Augmentation: the 8 symmetries of the square (dihedral group), applied to
question and answer alike.

Metrics beyond the generic cell and exact accuracy: ``valid_path_accuracy``
counts a predicted path that is *a* shortest path from S to G through open
cells (a different one than the label's counts), and ``other_shortest_paths``
says how many of those differ from the label.

Rooms: generate.py (carve, shortest paths), data.py (text, checks, the CSV importer), build.py
(`trmkit data maze`), sampler.py (fresh mazes with a curriculum, data.stream=generate), config.py (its
config section `maze:`: the generator's knobs),
score.py (valid paths, path precision / recall, the loss against the base-rate bound),
variants.py (the 8 symmetries a test-time vote runs, `trmkit eval --vote`), fold.py (a trace model's
answer fold, the task's model part), text.py (mazes and routes as `trmkit predict` reads and writes
them), task.py (the `trmkit data maze` options, the learning-curve
set and TASK, as sudoku/ and arc/ declare theirs).
"""

from __future__ import annotations

from trmkit.tasks.maze.build import build
from trmkit.tasks.maze.data import MazeError, MazeRow, check_answer, is_path, is_shortest_path, parse, read_csv, render
from trmkit.tasks.maze.generate import (CHARS, GOAL, OPEN, PAD, PATH, START, VOCAB, WALL, NoMaze, carve,
                                            default_min_path, distances, generate_maze, generate_within,
                                            shortest_paths)
from trmkit.tasks.maze.sampler import MazeSampler
from trmkit.tasks.maze.score import MazeScorer
from trmkit.tasks.maze.task import TASK, MazeLearnSet, MazeOptions

__all__ = ["CHARS", "GOAL", "OPEN", "PAD", "PATH", "START", "VOCAB", "WALL", "MazeError", "MazeLearnSet",
           "MazeOptions", "MazeRow", "MazeSampler", "MazeScorer", "TASK", "build", "carve", "check_answer",
           "default_min_path", "distances", "NoMaze", "generate_maze", "generate_within", "is_path",
           "is_shortest_path", "parse", "read_csv", "render", "shortest_paths"]
