from iclr25_cald.cli import main

raise SystemExit(main())
