"""trmkit tests: they mirror the package (tests/train/, tests/email/, ...); conftest.py keeps them clean."""

SAFETY_TIMEOUT = 1800  # seconds: a safety net for a child process, not a measurement (steps bound the work)
