"""`python3 -m vbmem`: the vbmem command line (vbmem.cli)."""
import sys

from .cli import main

sys.exit(main())
