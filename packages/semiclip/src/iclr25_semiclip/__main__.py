from iclr25_semiclip.cli import main

raise SystemExit(main())
