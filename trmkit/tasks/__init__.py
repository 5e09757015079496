"""The tasks: one module per task (sudoku, maze, arc), what every task declares (base.py), and
the generic classification shape (classify/: metrics.py, and scorer.py with its files).

A task is one `Task` value (base.py); the registry of tasks by name is trmkit/registry.py,
above this package (the e-mail task lives in trmkit/email/task.py).
"""
