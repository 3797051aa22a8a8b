import sys

from iclr25_fl_causal.cli import main

sys.exit(main())
