"""Pairs: your own puzzle, from a JSONL file of {"input": ..., "output": ...} grids or strings.

codec.py  reading and checking lines, the vocabulary and canvas of a store (Layout), encode/decode
build.py  the store builder (`build_pairs`)
augment.py  optional augmentation, only with the symmetries the user names
reference.py  importing a dataset folder built by the TRM reference implementation
task.py   the task: `trmkit data pairs` options, TASK
"""

from trmkit.tasks.pairs.task import TASK

__all__ = ["TASK"]
