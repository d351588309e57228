"""ADIOS2's SST writer for the ``adios2 SST`` lane of :mod:`bench.bandwidth.peaks`: run as a
script in a child process (``python adios_writer.py NAME SIZES REPEAT``)."""

import sys

import adios2.bindings as ab
import numpy as np


def main() -> None:
    name, sizes, repeat = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], int(sys.argv[3])
    adios = ab.ADIOS()
    io = adios.DeclareIO("w")
    io.SetEngine("SST")
    io.SetParameters(
        {
            "RendezvousReaderCount": "1",
            "QueueLimit": "1",
            "DataTransport": "WAN",
            "OpenTimeoutSecs": "60",
        }
    )
    engine = io.Open(name, ab.Mode.Write)
    for size in sizes:
        block = np.random.default_rng(0).random(size // 8)
        var = io.DefineVariable(f"b{size}", block, [block.size], [0], [block.size], True)
        for _ in range(repeat + 1):
            engine.BeginStep()
            engine.Put(var, block, ab.Mode.Sync)
            engine.EndStep()
    engine.Close()


if __name__ == "__main__":
    main()
