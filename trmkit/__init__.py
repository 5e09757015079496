"""trmkit: train Tiny Recursive Models on ordinary CPU laptops.

    import trmkit
    run = trmkit.fit("configs/sudoku-laptop.yaml", {"train.max_steps": 200, "run.dir": "runs/py"})
    print(run.summary["exact_accuracy"])

The functions (trmkit/api.py) load on first use: `import trmkit` itself does no work.
"""

from trmkit.version import __version__

_API = ("build_data", "fit", "evaluate", "load", "classify_mail", "Run")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        from trmkit import api

        return getattr(api, name)
    raise AttributeError(f"module 'trmkit' has no attribute {name!r}")
