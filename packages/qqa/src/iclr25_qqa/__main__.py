"""``python -m iclr25_qqa``."""

from iclr25_qqa.cli import main

raise SystemExit(main())
