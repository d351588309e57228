"""PCA of every step of the heat field, in situ or from files: one script, two sources.

In situ (the DEISA paper's Listing 7): start a Dask scheduler and workers, this script, then
the simulation with configs/heat_deisa.yml (or configs/heat_both.yml, which also records every
10th step to heat.h5)::

    python examples/pca.py --scheduler-file scheduler.json --out live.json

Post hoc (Listing 2): the same analysis on what configs/heat_hdf5.yml or heat_both.yml wrote,
on dask's local scheduler (or on a cluster, with --scheduler-file too)::

    python examples/pca.py --replay heat.h5 --out replay.json

Only the line choosing the source differs: ``deisa.Adapter`` reads the live stream,
``deisa.Replay`` the files, and both hand out the same arrays (see docs/streams.md, "Develop on
files").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from distributed import Client

import deisa
from deisa import IncrementalPCA


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler-file", help="Dask scheduler file: read the live stream")
    parser.add_argument(
        "--replay",
        metavar="FILES",
        help="read saved steps instead: an HDF5 file or Zarr store (time axis first), or a "
        "per-step pattern such as 'data_{step}.h5'",
    )
    parser.add_argument("--array", default="gtemp", help="array to analyse (default: gtemp)")
    parser.add_argument("--out", help="write the explained variance of every step here (JSON)")
    args = parser.parse_args(argv)
    if args.scheduler_file is None and args.replay is None:
        parser.error("give --scheduler-file (live) or --replay FILES (saved steps)")
    client = Client(scheduler_file=args.scheduler_file) if args.scheduler_file else None
    # the data source: the only line that differs between in situ and post hoc
    source = deisa.Replay(args.replay, client) if args.replay else deisa.Adapter(client)
    steps, variances = [], []
    with source:
        for step, field in source[args.array].items():  # every step, to the end
            pca = IncrementalPCA(n_components=2, copy=False, svd_solver="full").fit(field)
            print(step, pca.explained_variance_, flush=True)
            steps.append(step)
            variances.append(pca.explained_variance_.tolist())
    if args.out:
        result = {"steps": steps, "explained_variance": variances}
        Path(args.out).write_text(json.dumps(result, indent=1))
    if client is not None:
        client.close()


if __name__ == "__main__":
    main()
