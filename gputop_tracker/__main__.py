from gputop_tracker._entry import main

raise SystemExit(main())
