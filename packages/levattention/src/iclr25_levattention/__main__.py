"""`python -m iclr25_levattention`."""

import sys

from iclr25_levattention.cli import main

sys.exit(main())
