"""`python -m nprof` runs the command-line interface (a Ctrl-C while it loads exits 130 too)."""

import sys

try:
    from nprof.cli import main
except KeyboardInterrupt:
    sys.stderr.write("nprof: interrupted\n")
    raise SystemExit(130) from None

raise SystemExit(main())
