"""An analytics written for the older ``dask_interface`` adaptor (deisa_example's client.py):
``Initialization(Sworkers, scheduler_info)`` and ``get_data()``, its import changed to
``deisa.analysis.compat``; the kinetic energy of ekin_main.py goes to ``ekin.npz``."""

import numpy as np
import yaml

from deisa.analysis.compat import Initialization

# Get configuration
with open(r"config.yml") as file:
    data = yaml.load(file, Loader=yaml.FullLoader)
    Sworkers = data["workers"]

# Scheduler file name
scheduler_info = "scheduler.json"

# Initialize the Deisa Adaptor
C = Initialization(Sworkers, scheduler_info)

# Check if client version is compatible with scheduler version
C.client.get_versions(check=True)

# Get data descriptor as a dict of Dask arrays
arrays = C.get_data()

gt = arrays["global_t"]
mz = gt.shape[2]
slice = gt[:, :, int(mz / 3)]
ekin = 0.5 * slice[:, 0] * (slice[:, 2] ** 2 + slice[:, 3] ** 2 + slice[:, 4] ** 2) / (mz * mz)
s = C.client.compute(ekin, release=True)
np.savez("ekin.npz", ekin=s.result(), shape=ekin.shape)
print("Done", flush=True)
C.wait_for_last_bridge_and_shutdown()
