"""trmkit's version: a leaf module, so that a checkpoint can record it without importing the package's
front door (trmkit/__init__.py) or anything else. pyproject.toml's version is the same string."""

__version__ = "0.1.0"
