from iclr25_adak.cli import main

raise SystemExit(main())
