import sys

from iclr25_prdp.cli import main

sys.exit(main())
