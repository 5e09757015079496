"""`trmkit adapt`: learn a new source of problems from a checker, without its labels (docs/adapt.md).

config.py (the `adapt:` section), problems.py (the new source's inputs, never its labels; the split),
solve.py (tries with the model's test-time compute, the checker's verdicts, the answer kept), stream.py
(the kept answers mixed with the original training set), rounds.py (the rounds as hooks on the one
trainer), command.py (the command and `adapt()` for Python).
"""
