from iclr25___SLUG__.cli import main

raise SystemExit(main())
