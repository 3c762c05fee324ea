from cohort.cli import main

raise SystemExit(main())
