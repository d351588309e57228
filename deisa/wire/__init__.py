"""The wire protocol between the sides: what the simulation ranks, the Dask workers, the scheduler
and the analytics send each other. One module per conversation, their names re-exported here:

- :mod:`.routes`: the scheduler's routes and their replies (route names, statuses, the protocol
  version, the names of a step's keys, the scheduler file's variable);
- :mod:`.dims`: an array's dimension names in its metadata;
- :mod:`.layout`: one step of a moving array (its shape and boxes, in parcels);
- :mod:`.attributes`: an array's attributes (plain values, which of an ADIOS2 io's belong to
  which array, openPMD record names);
- :mod:`.steering`: steering values in their plain form;
- :mod:`.insitu`: the names deisa-core's backend keeps on the scheduler;
- :mod:`.shm`: a rank and a worker of its node sharing blocks through memory;
- :mod:`.relay`: rank 0's calls relayed by a worker of its node;
- :mod:`.guard`, :mod:`.names`, :mod:`.tls_files`: what every listener shares (who may connect,
  socket names another account cannot guess, the job's TLS files).

Imported by every side, it imports no side: the simulation side (:mod:`deisa.bridge`), the
scheduler side (:mod:`deisa.scheduler`) and the analytics side (:mod:`deisa.analysis`) never
import each other's code (except to install the scheduler extension): what they share is here.

Runs in every process; imports nothing of the sides.
"""

from __future__ import annotations

from .dims import (
    TIME_DIM,
    check_dims,
)
from .insitu import (
    INSITU_CONTROL_PREFIX,
    INSITU_GO,
    insitu_control_arrays,
    insitu_control_name,
    insitu_index_name,
    insitu_value_name,
)
from .routes import (
    EXTENSION_NAME,
    PROTOCOL,
    SCHEDULER_FILE_ENV,
    WATCH_SECONDS,
    ProtocolError,
    Reply,
    Route,
    Status,
    error,
    is_ok,
    ok,
    status,
    step_key_name,
)
from .steering import (
    ACCEPTED_VALUES,
    MAX_VALUE_BYTES,
    SteeringError,
    decode_value,
    encode_value,
    value_name_problem,
    value_problem,
)

__all__ = [
    "ACCEPTED_VALUES",
    "EXTENSION_NAME",
    "INSITU_CONTROL_PREFIX",
    "INSITU_GO",
    "MAX_VALUE_BYTES",
    "PROTOCOL",
    "SCHEDULER_FILE_ENV",
    "TIME_DIM",
    "WATCH_SECONDS",
    "ProtocolError",
    "Reply",
    "Route",
    "Status",
    "SteeringError",
    "check_dims",
    "decode_value",
    "encode_value",
    "error",
    "insitu_control_arrays",
    "insitu_control_name",
    "insitu_index_name",
    "insitu_value_name",
    "is_ok",
    "ok",
    "status",
    "step_key_name",
    "value_name_problem",
    "value_problem",
]
