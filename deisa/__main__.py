"""``python -m deisa COMMAND``: ``doctor`` prints what a run needs, as found here
(:mod:`deisa.doctor`). ``deisa-run`` (:mod:`deisa.launcher`) runs.

Runs in that command's process; imports :mod:`deisa.doctor` only.
"""

from __future__ import annotations

import sys

COMMANDS = {"doctor": "what deisa needs (MPI, mpi4py, PDI, the plugin, Slurm...), as found here"}


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``argv`` (``sys.argv[1:]``) to its command; 2 for an unknown one."""
    argv = sys.argv[1:] if argv is None else argv
    usage = "usage: python -m deisa {doctor} [options]\n" + "".join(
        f"  {name:<8} {text}\n" for name, text in COMMANDS.items()
    )
    if not argv or argv[0] in ("-h", "--help"):
        print(usage, end="")
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"python -m deisa: unknown command {argv[0]!r}\n{usage}", end="", file=sys.stderr)
        return 2
    from .doctor import main as doctor

    return doctor(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
