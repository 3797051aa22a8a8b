from iclr25_diffusion_shapley.cli import main

raise SystemExit(main())
