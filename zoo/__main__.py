from zoo.cli import main

raise SystemExit(main())
