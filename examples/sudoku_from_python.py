"""Train a small TRM on generated Sudoku from Python, then look at more steps of thinking.

    python examples/sudoku_from_python.py [WORK_DIR] [STEPS]

WORK_DIR (default runs/example-sudoku) receives the data store and the run; STEPS (default 300)
optimizer steps of batch 64: about 1-2 minutes on 2 cores. Every run rebuilds the store and retrains
from scratch: force=True lets build_data replace the store and fit delete the previous run
(without it both refuse, so that no work is lost or mixed by accident).
"""

import sys
from pathlib import Path

import trmkit

work = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/example-sudoku")
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 300

data = trmkit.build_data("sudoku", work / "data", source="generate", num=300, givens="36-42", aug=2,
                         test_fraction=0.1, force=True)
run = trmkit.fit("configs/sudoku-laptop.yaml", {"data.path": data, "run.dir": work / "run",
                                                   "train.max_steps": steps, "train.eval_every": 0}, force=True)
print("cell accuracy", round(run.summary["cell_accuracy"], 3), "exact", round(run.summary["exact_accuracy"], 3))
curve = trmkit.evaluate(run, steps=[2, 4, 8])["steps"]
for k, metrics in curve.items():
    print(f"K={k}: exact {metrics['exact_accuracy']:.3f}")
