"""What an error a user can meet means, in one line: the CLI prints it instead of a traceback (exit code 2).

The commands name the file and the fix themselves where they read one (a ConfigError, StoreError or
CheckpointError: `said_in_one_line`); `expected_error` is the net under them, for the file-system, JSON,
text and archive errors that reach the top: missing, unreadable or damaged files. Everything else is a bug
and keeps its traceback. Nothing heavy is imported here: the CLI imports it before any command runs.
"""

from __future__ import annotations

import json
import sys
import zipfile

from trmkit.config import ConfigError

# What an error from the file system means, and its fix; the file comes from the error itself.
OS_HINTS = (
    (FileNotFoundError, "no such file or folder: check the path, or build or train it first"),
    (NotADirectoryError, "not a folder (or a file stands in its path): give the folder's path"),
    (IsADirectoryError, "a folder, where a file was expected: give the file's path"),
    (PermissionError, "permission denied: give a path this user can read (or write)"),
)


def one_line(err: Exception) -> str | None:
    """What to print for `err` instead of a traceback; None for a bug."""
    return str(err) if said_in_one_line(err) else expected_error(err)


def said_in_one_line(err: Exception) -> bool:
    """A trmkit error with its fix in the message (config, store, checkpoint), printed without a traceback.
    A CheckpointError comes only from its module, loaded by then: importing it up front would import
    torch before every command (1.5-3 s, before `email predict` could start its parsing workers)."""
    from trmkit.data.store import StoreError

    checkpoint = sys.modules.get("trmkit.train.checkpoint.errors")
    return isinstance(err, (ConfigError, StoreError)) or (checkpoint is not None
                                                         and isinstance(err, checkpoint.CheckpointError))


def expected_error(err: Exception) -> str | None:
    """One line for an error a user can meet and fix (a missing, unreadable or damaged file), naming the
    file where the error knows it; None for anything else, which is a bug and keeps its traceback."""
    if isinstance(err, OSError):
        if err.filename is None:  # raised with its own message (or a gzip stream that is not gzip)
            return str(err)
        files = " -> ".join(str(f) for f in (err.filename, err.filename2) if f is not None)
        hint = next((h for kind, h in OS_HINTS if isinstance(err, kind)), err.strerror or type(err).__name__)
        return f"{hint} ({files})"
    if isinstance(err, json.JSONDecodeError):
        return (f"a JSON file is damaged ({err.msg}: line {err.lineno} column {err.colno}); write it again with "
                "the command that made it")
    if isinstance(err, UnicodeDecodeError):
        return f"an input is not UTF-8 text ({err.reason} at byte {err.start}): give a text file"
    if isinstance(err, zipfile.BadZipFile):
        return f"a zip archive is damaged ({err}): fetch or write it again"
    safetensors = sys.modules.get("safetensors")
    if safetensors is not None and isinstance(err, safetensors.SafetensorError):
        return f"a weights file is damaged ({str(err)[:160]}): write it again with the command that made it"
    return None
