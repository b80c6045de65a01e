from firstmate.cli.main import main

raise SystemExit(main())
