"""``python -m iclr25_edgeprompt``."""

import sys

from iclr25_edgeprompt.cli import main

sys.exit(main())
