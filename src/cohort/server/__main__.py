from cohort.server.cli import main

raise SystemExit(main())
