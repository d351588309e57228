"""``python -m bench.bandwidth``: see :mod:`bench.bandwidth`."""

from . import main

raise SystemExit(main())
