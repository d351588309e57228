"""In situ PCA that stops the simulation once it has converged (steering values, issue #14).

``pca.py`` (in situ) with the analytics answering back: after each step it compares the explained
variance ratio with the previous step's, and once the relative change falls below
``--stop-when-converged EPS`` it sets the steering value ``stop``. The C solver reads it through
the ``read: [stop]`` section of configs/heat_deisa.yml, the Python solver with
``Bridge.get("stop")``; either ends its loop and closes the stream, and this script reads every
step it published until the end::

    python examples/steered_pca.py --scheduler-file scheduler.json --stop-when-converged 0.01

``deisa-run --stop-when-converged EPS`` does the same with pipelined fits and a report.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from distributed import Client

import deisa
from deisa import IncrementalPCA


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler-file", required=True, help="Dask scheduler file")
    parser.add_argument(
        "--stop-when-converged",
        type=float,
        default=0.01,
        metavar="EPS",
        help="relative change of the explained variance ratio below which the simulation is "
        "stopped (default: 0.01)",
    )
    parser.add_argument("--out", help="write the explained variance of every step here (JSON)")
    args = parser.parse_args(argv)
    client = Client(scheduler_file=args.scheduler_file)
    adapter = deisa.Adapter(client)
    adapter.set("stop", None)  # forget a stop left by an earlier run on this scheduler
    variances, previous, stopped_at = [], None, None
    for step, field in adapter["gtemp"].items():  # every published step, to the end
        pca = IncrementalPCA(n_components=2, copy=False, svd_solver="full").fit(field)
        ratio = pca.explained_variance_ratio_
        change = (
            None
            if previous is None
            else np.linalg.norm(ratio - previous) / np.linalg.norm(previous)
        )
        print(step, pca.explained_variance_, change, flush=True)
        if stopped_at is None and change is not None and change < args.stop_when_converged:
            adapter.set("stop", True)  # the simulation ends its loop at its next read
            stopped_at = step
            print(f"converged at step {step}: stop asked", flush=True)
        variances.append(pca.explained_variance_.tolist())
        previous = ratio
    if args.out:
        result = {"explained_variance": variances, "stop_asked_after_step": stopped_at}
        Path(args.out).write_text(json.dumps(result, indent=1))
    client.close()


if __name__ == "__main__":
    main()
