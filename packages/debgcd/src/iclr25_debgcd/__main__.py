from iclr25_debgcd.cli import main

raise SystemExit(main())
