"""In situ PCA of the heat field, streamed by the deisa plugin (DEISA paper, Listing 7).

Start a Dask scheduler (``dask scheduler --scheduler-file scheduler.json``) and workers, run
this script, and run the simulation with configs/heat_deisa.yml from the same directory::

    python analytics/insitu_pca.py configs/simulation.yml --scheduler-file scheduler.json \
        --out insitu.json

``posthoc_pca.py`` is the same analysis on the HDF5 file written with configs/heat_hdf5.yml:
the two scripts differ by two lines of code.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml
from distributed import Client

import deisa
from deisa import IncrementalPCA


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("simulation", help="simulation YAML (configs/simulation.yml)")
    parser.add_argument("--scheduler-file", required=True, help="Dask scheduler file")
    parser.add_argument("--out", help="write the explained variance of every step here (JSON)")
    args = parser.parse_args(argv)
    # Connect to Dask
    client = Client(scheduler_file=args.scheduler_file)
    # load the simulation configuration
    simu = yaml.safe_load(Path(args.simulation).read_text())
    # a lazy (t, x, y) array, whatever the data source
    gtemp = deisa.Adapter(client)["gtemp"]
    variances = []
    for step in range(simu["steps"]):
        pca = IncrementalPCA(n_components=2, copy=False, svd_solver="full")
        pca.fit(gtemp[step, :, :])
        print(step, pca.explained_variance_, flush=True)
        variances.append(pca.explained_variance_.tolist())
    if args.out:
        Path(args.out).write_text(json.dumps({"explained_variance": variances}, indent=1))
    client.close()


if __name__ == "__main__":
    main()
