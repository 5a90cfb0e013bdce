"""`python -m emu`."""

import sys

from emu.cli import main

sys.exit(main())
