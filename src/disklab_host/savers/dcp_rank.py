"""One rank of a ``dcp.save``, started by torch's own launcher (``torch.distributed.run``).

Every rank joins a gloo process group (bounded by ``--timeout-s``: a rank waiting on a dead peer fails then,
not after gloo's default 30 minutes), builds the model's state at ``--step`` sharded by rows across the
ranks (DTensor, ``Shard(0)``), and calls ``dcp.save`` into ``--dir`` with its default FileSystemWriter.
Rank 0 marks the import (after the launcher made its own files), the save's begin and its end for the
power-cut recorder (an open of a file that does not exist)
and says "disklab-status begin" / "disklab-status ok" on its stdout, which the launching process relays.
"""

from __future__ import annotations

import argparse
import datetime
import os
import threading
import time
from pathlib import Path

from ..powercut import record

STATUS = "disklab-status "


def _watch_parent() -> None:
    """End this rank when torch's launcher is gone (it is the rank's parent): the launcher starts each rank in
    a session of its own, so a launcher killed with its process group leaves the ranks behind otherwise."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, name="disklab-parent-watch", daemon=True).start()


def _warm(dcp, dist, state: dict, where: Path) -> None:
    """One save of every rank into ``where`` (the crash lab's warm-up), then a barrier."""
    dcp.save(state, checkpoint_id=str(where))
    dist.barrier()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--root", type=Path, required=True, help="where the recorder's markers are opened")
    ap.add_argument("--state-mib", type=int, required=True)
    ap.add_argument("--step", type=int, required=True)
    ap.add_argument("--timeout-s", type=float, required=True)
    ap.add_argument("--markers", nargs="*", default=[], help="import, begin, end: the marker files' names")
    ap.add_argument("--gate", type=Path, default=None, help="the crash lab's gate (savers.gate.wait)")
    args = ap.parse_args(argv)
    _watch_parent()

    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from . import model

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    try:
        lead = dist.get_rank() == 0
        if lead and args.markers:  # the launcher's own files (its run directory in /tmp) are before this
            record.open_marker(args.root / args.markers[0])
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        full = model.state(args.state_mib, args.step)
        state = {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in full.items()}
        if args.gate:
            from . import gate

            gate.wait(
                args.gate,
                dist.get_rank(),
                lambda: _warm(dcp, dist, state, args.gate / "warm"),
                args.timeout_s,
            )
        if lead:  # before the barrier, so no rank can touch the directory before the recorder's begin
            print(STATUS + "begin", flush=True)
            if args.markers:
                record.open_marker(args.root / args.markers[1])
        dist.barrier()
        dcp.save(state, checkpoint_id=str(args.dir))
        dist.barrier()
        if lead:
            if args.markers:
                record.open_marker(args.root / args.markers[2])
            print(STATUS + "ok", flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
