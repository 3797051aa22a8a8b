from iclr25_simhand.cli import main

raise SystemExit(main())
