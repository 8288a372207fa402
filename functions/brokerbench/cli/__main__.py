"""`python -m brokerbench.cli`: the same as the brokerbench command."""

import sys

from . import main

sys.exit(main())
