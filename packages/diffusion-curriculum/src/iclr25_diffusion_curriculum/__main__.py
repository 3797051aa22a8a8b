import sys

from iclr25_diffusion_curriculum.cli import main

sys.exit(main())
