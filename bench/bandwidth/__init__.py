"""Bridge bandwidth against the machine's peaks and against its peers, on the same bytes.

    python -m bench.bandwidth --out results/            # ~1 minute; --quick: ~30 s

For each block size (1, 16, 64 MiB of float64 by default), the same numpy array is moved
``--repeat`` times by every path below, one after the other in the same run, and the median
time per block gives the bandwidth (GiB/s = block bytes / time):

``memcpy``              ``np.copyto`` into a preallocated array (the memory peak);
``raw TCP``             loopback TCP stream to another process: ``sendall`` of a length and the
                        bytes, ``recv_into`` a preallocated buffer there, one byte back;
``dask scatter``        ``client.scatter(block, workers=[w], direct=True, hash=False)`` to a
                        worker process (returns when the worker holds it, scheduler told);
``deisa send``          the transfer part of each ``Bridge.publish`` below (``send_s``:
                        ``send_blocks_to_worker``, the worker's ``update_data`` RPC);
``deisa publish``       a full ``Bridge.publish`` with one MPI rank (transfer, then the step's
                        registration on the scheduler);
``deisa-dask 0.6.3``    its ``Bridge.send`` (run in the venv ``--venv``, if it can be installed
                        and works with this distributed; otherwise the failure is recorded);
``adios2 SST``          ADIOS2's SST engine (writer process -> this process over TCP/WAN
                        data plane), then ``client.scatter`` of the block to the worker.

Dask runs as ``LocalCluster(n_workers=1, threads_per_worker=1, processes=True)``. Writes
``bandwidth.json`` and ``bandwidth.png``. Targets: deisa's transfer >= 80 % of raw TCP, and
deisa >= 2x deisa-dask, at the largest block.

``--protocol ucx`` (issue 35) measures instead UCX (distributed-ucxx installed) against plain
TCP and the Bridge's shared memory, side by side: a cluster of one worker per protocol,
``dask scatter`` over tcp and ucx, ``deisa send`` and ``deisa publish`` over tcp and ucx
(``transport="tcp"``: the Dask connection) and over shared memory (the tcp cluster,
``transport="auto"``), the lanes taking turns at every repetition; also the CPU per block of
the sender and of the worker, and each worker's CPU while idle. No target. Writes
``bandwidth_ucx.json``.

``--tls`` (issue #33) measures instead TLS against plain TCP, side by side: fresh credentials
for the run (``bench._common.tls_credentials``), two clusters of one worker (``tcp://`` and
``tls://`` only), and ``raw stream``, ``dask comm`` (distributed's comm alone,
:class:`~.lanes.DaskComm`), ``dask scatter``, ``deisa send`` and ``deisa publish``
(``transport="tcp"``: as to another node) over both, the protocols taking turns at every
repetition. It also times ``openssl speed`` of the AEAD ciphers, the CPU per block of the sender
and of the worker, the TLS record layer alone (:func:`~.tls.time_ssl_in_memory`) and the
worker's ``read`` calls, and prints the cipher negotiated. ``--tls-max-version`` and
``--tls-ciphers`` set distributed's TLS settings on both ends; ``--tls12`` adds a lane of TLS
1.2 limited to :data:`~.tls.TLS12_CIPHERS`. Target: TLS costs <= 15 % of ``deisa publish``'s
bandwidth at 16 MiB. Writes ``bandwidth_tls.json``.

One module per benchmark: :mod:`.peaks` (the default), :mod:`.tls` (``--tls``), :mod:`.ucx`
(``--protocol ucx``); the lanes they time in :mod:`.lanes`; the child scripts they run as
modules beside them, :mod:`.deisa_dask_sender` (in deisa-dask's venv) and :mod:`.adios_writer`.
This module reads the command line and runs one of them.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .._common import PINS

os.environ.update(PINS)

from .peaks import main_peaks
from .tls import TLS12, TLS12_CIPHERS, TLS_PATHS, main_tls
from .ucx import main_protocol


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64], help="MiB")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="--repeat 5")
    parser.add_argument("--venv", type=Path, default=Path("/tmp/bench-venv"),
                        help="venv with deisa-dask 0.6.3 (pip install --no-deps)")  # fmt: skip
    parser.add_argument(
        "--tls",
        action="store_true",
        help="TLS against plain TCP, side by side (writes bandwidth_tls.json)",
    )
    parser.add_argument(
        "--tls-ciphers",
        default=None,
        help="with --tls: distributed.comm.tls.ciphers (TLS 1.2 only)",
    )
    parser.add_argument(
        "--tls-max-version",
        type=float,
        choices=[1.2, 1.3],
        default=None,
        help="with --tls: distributed.comm.tls.max-version",
    )
    parser.add_argument(
        "--tls12",
        action="store_true",
        help=f"with --tls: also a lane of TLS 1.2 limited to {TLS12_CIPHERS} (forward secrecy, "
        "AEAD), taking turns with the others",
    )
    parser.add_argument(
        "--protocol",
        choices=["ucx"],
        default=None,
        help="this protocol against plain TCP, side by side (needs distributed-ucxx; writes "
        "bandwidth_ucx.json)",
    )
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat = min(args.repeat, 5)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.tls:
        return main_tls(args)
    if args.protocol is not None:
        return main_protocol(args)
    return main_peaks(args)


__all__ = ["TLS12", "TLS_PATHS", "main"]
