from iclr25_videophy.cli import main

raise SystemExit(main())
