"""``python -m iclr25_hyper_connections``."""

from iclr25_hyper_connections.cli import main

raise SystemExit(main())
