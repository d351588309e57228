"""``python -m deisa.launcher``: the same as ``deisa-run``."""

from .cli import main

raise SystemExit(main())
