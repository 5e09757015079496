"""trmkit: train Tiny Recursive Models on ordinary CPU laptops."""

__version__ = "0.1.0"
