from iclr25_lantern.cli import main

raise SystemExit(main())
