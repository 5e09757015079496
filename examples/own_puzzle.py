"""Your own puzzle from Python: write {"input", "output"} pairs, build a store, train, answer.

    python examples/own_puzzle.py [WORK_DIR] [STEPS]

The puzzle here is a toy (mirror a 4 x 4 grid of the digits 1-4 left to right); any grids of
small integers or equal-length strings work the same way. STEPS (default 400) optimizer steps:
about a minute on 2 cores. Every run rebuilds the store and retrains from scratch: force=True lets
build_data replace the store and fit delete the previous run (without it both refuse).
"""

import json
import random
import sys
from pathlib import Path

import trmkit

work = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/example-puzzle")
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 400
work.mkdir(parents=True, exist_ok=True)

rng = random.Random(0)
with open(work / "mirror.jsonl", "w") as f:
    for _ in range(1000):
        grid = [[rng.randint(1, 4) for _ in range(4)] for _ in range(4)]
        f.write(json.dumps({"input": grid, "output": [row[::-1] for row in grid]}) + "\n")

data = trmkit.build_data("pairs", work / "data", source=work / "mirror.jsonl", force=True)
run = trmkit.fit("configs/pairs-laptop.yaml", {"data.path": data, "run.dir": work / "run",
                                               "train.max_steps": steps, "train.eval_every": 0}, force=True)
print("held-out cell accuracy", round(run.summary["cell_accuracy"], 3))
print("answer:", run.predict([[[1, 2, 3, 4], [4, 4, 1, 1], [2, 3, 2, 3], [1, 1, 1, 2]]])[0])
