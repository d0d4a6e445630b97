"""`python -m nprof` runs the command-line interface."""

from nprof.cli import main

raise SystemExit(main())
