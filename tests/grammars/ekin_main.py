"""An analytics written for pdidev/deisa main's client, as its published benchmarks are (the
in situ kinetic-energy script of luiznery/bench-deisa, in-situ/bench_deisa.py): the same calls in
the same order; its results go to ``<out_dir>/ekin.npz`` instead of text files and a plot.

Usage: python3 ekin_main.py <n_dask_workers> <scheduler_file_name> <out_dir>
"""

import sys
import time

import dask
import dask.array as da
import numpy as np
from dask.distributed import performance_report
from distributed.diagnostics import MemorySampler

from deisa import Deisa

if len(sys.argv) < 4:
    raise Exception("Usage: python3 ekin_main.py <n_dask_workers> <scheduler_file_name> <out_dir>")
nb_workers = int(sys.argv[1])
scheduler_file_name = str(sys.argv[2])
out_dir = sys.argv[3]

deisa = Deisa(scheduler_file_name=scheduler_file_name, nb_workers=nb_workers, use_ucx=False)

client = deisa.get_client()
arrays = deisa.get_deisa_arrays()

# Select data
gt = arrays["global_t"][:, :, :, :, :]
mx = len(gt[0, 0, 0, 0, :])
my = len(gt[0, 0, 0, :, 0])
mz = len(gt[0, 0, :, 0, 0])
mt = len(gt[:, 0, 0, 0, 0])
assert isinstance(mx, int) and isinstance(my, int) and isinstance(mz, int)
z_pos = int(mz / 3)

t_stride = 1
slice = arrays["global_t"][0:mt:t_stride, :, z_pos, :, :]

id, iu, iv, iw = 0, 2, 3, 4
ms = MemorySampler()

with (
    performance_report(filename=f"{out_dir}/dask-report.html"),
    dask.config.set(array_optimize=None),
    ms.sample("collection 1"),
):
    ekin_deisa = (
        0.5
        * slice[:, id, :, :]
        * (
            slice[:, iu, :, :] * slice[:, iu, :, :]
            + slice[:, iv, :, :] * slice[:, iv, :, :]
            + slice[:, iw, :, :] * slice[:, iw, :, :]
        )
        / (mz * mz)
    )
    ekin_persisted = client.persist(ekin_deisa)
    sum_over_xy = ekin_persisted.sum(axis=(1, 2))
    ekin_deisa_rechunked = ekin_persisted.rechunk({0: 1, 1: -1, 2: -1})
    ekin_fft2 = da.fft.fft2(ekin_deisa_rechunked)
    fourier_amplitudes = da.absolute(ekin_fft2) ** 2

    ts = time.time()
    res2 = ekin_persisted.compute()
    res3 = sum_over_xy.compute()
    res4 = fourier_amplitudes.compute()
    print(f"time: {time.time() - ts}", flush=True)

l1 = client.run(lambda dask_worker: dask_worker.transfer_outgoing_log)
l2 = client.run(lambda dask_worker: dask_worker.transfer_incoming_log)
np.savez(f"{out_dir}/ekin.npz", ekin=res2, sum_over_xy=res3, fourier=res4, shape=[mt, mz, my, mx])
print("Done ", flush=True)
deisa.wait_for_last_bridge_and_shutdown()
