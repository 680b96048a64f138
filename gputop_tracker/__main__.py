from gputop_tracker.cli import main

raise SystemExit(main())
