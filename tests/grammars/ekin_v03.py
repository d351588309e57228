"""An analytics written for the pdidev/deisa 0.3.x client, as its example (derivative.py) is:
the scheduler file and config.yml in the working directory, the whole array selected, the
contract checked and signed; the kinetic energy of ekin_main.py goes to ``ekin.npz``."""

import numpy as np

from deisa import Deisa

# Scheduler file name and configuration file
scheduler_info = "scheduler.json"
config_file = "config.yml"

# Initialize Deisa
Deisa = Deisa(scheduler_info, config_file)

# Get client
client = Deisa.get_client()

# Get data descriptor as a list of Deisa arrays object
arrays = Deisa.get_deisa_arrays()

# Select data
gt = arrays["global_t"][...]
print(gt, flush=True)

# Check contract
arrays.check_contract()

mz = gt.shape[2]
slice = gt[:, :, int(mz / 3)]
ekin = 0.5 * slice[:, 0] * (slice[:, 2] ** 2 + slice[:, 3] ** 2 + slice[:, 4] ** 2) / (mz * mz)

# Submit the task graph to the scheduler
s = client.persist(ekin, release=True)

# Sign contract
arrays.validate_contract()
del gt
np.savez("ekin.npz", ekin=client.compute(s).result(), shape=ekin.shape)
print("Done", flush=True)
Deisa.wait_for_last_bridge_and_shutdown()
