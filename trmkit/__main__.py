"""`python -m trmkit ...` is the `trmkit` command (torchrun launches it so: docs/distributed.md)."""

import sys

from trmkit.cli import main

sys.exit(main())
