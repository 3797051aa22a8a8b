from iclr25_vl_interp.cli import main

raise SystemExit(main())
