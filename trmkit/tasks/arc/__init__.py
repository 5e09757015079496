"""ARC-AGI as the TRM paper runs it: few-shot grid puzzles, one learned embedding per augmented task.

data.py   grids, encoding, augmentations; reading and checking the ARC Prize JSON
build.py  the puzzle plan (augmentations, identifiers), the arrays, the sidecar, the store builder
score.py  ArcScorer (voting over augmented copies, pass@k) and the submission
task.py   the task: `trmkit data arc` options and TASK

Data: the ARC Prize "combined" layout, ``arc-agi_<subset>_challenges.json``
(task id -> {"train": [{"input", "output"}...], "test": [{"input"}...]}) and
``arc-agi_<subset>_solutions.json`` (task id -> the test outputs), subsets
training, evaluation (ARC-AGI-1), training2, evaluation2 (ARC-AGI-2), concept.

Encoding (reference dataset/build_arc_dataset.py:50-74): a grid is drawn on a
30 x 30 canvas (seq_len 900); tokens 0 pad, 1 end-of-grid, 2-11 colours 0-9.
The end marker fills the row just below the grid and the column just right
of it where they fit (the corner cell between them stays pad). Labels are
the output grid encoded the same way; pad cells carry no loss
(ignore_label_id 0), end markers do.

Protocol (build_arc_dataset.py:167-222, README "ARC-AGI-1"): every task of
the training subsets puts all its pairs (demonstrations and test pairs with
their solutions) in train; each task of the eval subset puts its
demonstrations in train and its test inputs (labelled with the solutions)
in test. Each (task, augmentation) is one puzzle with its own identifier
(0 is the reference's blank id, unused), the same in both splits, so the
embedding a model learns from a task's demonstrations is the one it uses on
that task's test inputs. A group is a task: all its augmented puzzles.
There is no random split: ``--test-fraction`` is ignored, except that 1
writes the test split alone (identifiers as in the full store, for
``trmkit eval`` of a model trained on it).

Augmentation (build_arc_dataset.py:98-164): one of the 8 symmetries of the
square and a permutation of colours 1-9 (0, black, stays), applied to every
grid of the task. The identity comes first, then up to ``--aug`` distinct
augmented tasks (so a group holds 1 + aug puzzles, as the reference's
``aug_count + 1``), drawn at most 5 * aug times and deduplicated by an
order-free hash of all the task's grids. Translation (build_arc_dataset.py:
248, 267-269): in the train split every example but one random example per
puzzle is shifted to a random offset where both its grids fit; test
examples are never shifted (the scorer crops at the top-left corner).

Scoring (evaluators/arc.py): each predicted grid is cropped as the
reference's ``_crop`` does (the largest top-left rectangle of colour
tokens), its augmentation undone, and the predictions of all augmented
copies of a test input vote: most votes first, ties broken by the mean
halting confidence sigmoid(q_halt). attempt_1 and attempt_2 are the top two.

Departures from the reference, and why:
- pass@1 / pass@2 count a task only when all its test outputs are right
  (the ARC Prize's per-task rule as asked for here); the reference credits
  a fraction per test output (evaluators/arc.py:167), reported as
  ``pass@k_fractional`` so paper numbers can be compared.
- A prediction with no colour cell at the top-left (an empty crop) never
  votes: an empty grid can't be an ARC answer, and in the reference it
  could take an attempt slot.
- Test examples are found from the sidecar (row -> task, test index), not by
  hashing the cropped input (evaluators/arc.py:93, 124): exact, and two test
  inputs with equal grids stay apart.
- A submission always has one entry per test input (``[[0]]`` when nothing
  valid was predicted); the reference skips the input (evaluators/arc.py:134).
- A task id met again in a later training subset (training2 shares 391
  task ids with ARC-AGI-1's training) is skipped and counted; the reference
  keeps both copies under one identifier (build_arc_dataset.py:236-240).
- Training on a subset that holds eval tasks (training2 with evaluation;
  evaluation with evaluation2) is refused unless --allow-overlap; the
  reference only warns in its README.
- Bad grids and tasks without solutions are counted and skipped (the
  reference asserts, build_arc_dataset.py:43-46, or fills dummy outputs,
  :192-198); a missing solutions file is an error.
- Only pass@1 and pass@2 (the reference also reports pass@5 ... pass@1000).
- Tasks are taken in file order (the reference shuffles each subset, :201,
  which matters only for its fractional splits), and each task draws from
  its own generator seeded by (seed, task id), so a task's augmentations do
  not change with --limit or --subsets.
"""

from trmkit.tasks.arc.task import TASK

__all__ = ["TASK"]
