import sys

from iclr25_lozo.cli import main

sys.exit(main())
