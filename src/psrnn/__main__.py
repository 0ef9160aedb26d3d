from psrnn.cli import main

raise SystemExit(main())
