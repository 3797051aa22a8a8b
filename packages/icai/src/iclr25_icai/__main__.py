from iclr25_icai.cli import main

raise SystemExit(main())
