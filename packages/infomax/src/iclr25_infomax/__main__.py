"""``python -m iclr25_infomax``."""

import sys

from iclr25_infomax.cli import main

sys.exit(main())
