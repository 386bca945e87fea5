from topowise.cli.main import main

raise SystemExit(main())
