"""Part: does disklab's parallel ceiling read as fast as fio with the same block size, queue depth and
direct I/O?

disklab side: the ``ceiling`` step's own parallel read (disklab_host.steps.ceiling: ``streams``
threads, each reading its own contiguous slice of the file front to back in synchronous os.preadv
calls of ``block`` bytes into a page-aligned buffer, on one O_DIRECT descriptor), after the step's
eviction (cache.evict). Reference side: fio with the matching job, one synchronous job per stream
over the same slices::

    fio --rw=read --ioengine=psync --direct=1 --bs=BLOCK --numjobs=STREAMS --thread
        --size=SLICE --offset_increment=SLICE --group_reporting

(psync: one pread at a time per job, so STREAMS jobs keep STREAMS reads in flight, the queue
depth of disklab's threads; ``--thread``: jobs are threads of one process, as disklab's streams
are; ``--size``/``--offset_increment``: job i reads bytes [i*SLICE, (i+1)*SLICE), disklab's slice
i). fio's rate is its grouped ``io_bytes`` over its grouped ``runtime`` (ms; the slowest job's);
disklab's the file's bytes over the time from the streams' common start to the last one's end.
The file's size is a multiple of STREAMS * BLOCK, so both sides read the same ranges in the same
calls. Pairs alternate their order; the part is judged on the median of the pair ratios,
disklab / fio, target at least 0.95 (issue 27).
"""

from __future__ import annotations

import os
from pathlib import Path

from common import judged_part, pair_orders, run_fio

from disklab_host.cache import pagecache as cache
from disklab_host.common import sampling
from disklab_host.common.units import MIB
from disklab_host.steps import ceiling

TARGET = {"op": ">=", "value": 0.95}


def _disklab(path: Path, streams: int, block: int) -> dict:
    evicted = cache.evict(path, become_allowed=False, system="Linux")
    if evicted["method"] is None:
        raise RuntimeError(f"disklab could not evict {path}: {evicted['attempts']}")
    before = cache.cache_state(path)["fraction"]
    fd, mode = ceiling.open_for_parallel(path, "Linux", True)
    try:
        read = ceiling.parallel_read(path, fd, streams, block, sampling.Interval(str(path)))
    finally:
        os.close(fd)
    if read["bytes"] != path.stat().st_size:
        raise RuntimeError(f"disklab read {read['bytes']} bytes of {path}, expected {path.stat().st_size}")
    device = (read["io"] or {}).get("device") or {}
    return {
        "mib_s": read["mib_s"],
        "time_s": read["time_s"],
        "direct_io": mode,
        "streams_used": read["streams_used"],
        "resident_fraction_before": before,
        "device_read_bytes": device.get("read_bytes"),
    }


def fio_args(path: Path, size_bytes: int, streams: int, block: int) -> list[str]:
    """The fio job that matches disklab's parallel read of ``path`` (module docstring)."""
    slice_bytes = size_bytes // streams
    return [
        "--name=parallel_ceiling",
        f"--filename={path}",
        "--rw=read",
        "--ioengine=psync",
        "--direct=1",
        f"--bs={block}",
        f"--numjobs={streams}",
        "--thread",
        f"--size={slice_bytes}",
        f"--offset_increment={slice_bytes}",
        "--group_reporting",
        "--invalidate=1",
    ]


def _fio(path: Path, size_bytes: int, streams: int, block: int) -> dict:
    job = run_fio(fio_args(path, size_bytes, streams, block))
    read = job["read"]
    if read["io_bytes"] != size_bytes:
        raise RuntimeError(f"fio read {read['io_bytes']} bytes, expected {size_bytes}")
    return {
        "mib_s": read["io_bytes"] / MIB / (read["runtime"] / 1e3),
        "bw_mib_s": read["bw_bytes"] / MIB,  # fio's own figure, kept beside
        "runtime_ms": read["runtime"],
        "total_ios": read["total_ios"],
    }


def settings(size_bytes: int) -> dict:
    """Streams and block size: the ceiling step's defaults, the block cut down to fit a tiny file."""
    from disklab_host.registry import SIZES

    streams = SIZES["ceiling_streams"].quick
    block = min(SIZES["ceiling_block_bytes"].quick, size_bytes // streams)
    return {"streams": streams, "block_bytes": block}


def parallel_ceiling_fidelity(workbench: Path, size_bytes: int, repeats: int) -> dict:
    """``repeats`` pairs of disklab's parallel direct read and fio's matching job, in MiB/s.

    One file of ``size_bytes`` random bytes (rounded down to whole STREAMS * BLOCK) is written in
    ``workbench``, read by both sides in every pair, and deleted. Raises RuntimeError when fio fails,
    the eviction finds no method, or either side reads another number of bytes than the file's.
    """
    from io_parts import make_big_file

    s = settings(size_bytes)
    streams, block = s["streams"], s["block_bytes"]
    size_bytes -= size_bytes % (streams * block)
    path = workbench / "bench_parallel.bin"
    make_big_file(path, size_bytes)
    runners = {
        "disklab": lambda: _disklab(path, streams, block),
        "fio": lambda: _fio(path, size_bytes, streams, block),
    }
    pairs = []
    try:
        for order in pair_orders(repeats, ("disklab", "fio")):
            pair = {"order": list(order)}
            for name in order:
                pair[name] = runners[name]()
            pairs.append(pair)
    finally:
        path.unlink(missing_ok=True)
    part = judged_part(
        title="parallel ceiling fidelity",
        quantity=f"parallel direct read of a {size_bytes // MIB} MiB file: {streams} streams of "
        f"{block // 1024} KiB O_DIRECT reads",
        unit="mib_s",
        sides={k: [p[k]["mib_s"] for p in pairs] for k in ("disklab", "fio")},
        target=TARGET,
        notes=[
            "disklab: the ceiling step's parallel_read (threads, os.preadv, one contiguous slice each) after "
            "cache.evict; fio: psync, --direct=1, numjobs = streams as threads, --size/--offset_increment "
            "= the same slices; fio's rate is io_bytes over its group runtime (ms)",
        ],
    )
    part |= {"size_bytes": size_bytes, "streams": streams, "block_bytes": block, "direct_io": "O_DIRECT",
             "fio_args": fio_args(path, size_bytes, streams, block), "pairs": pairs}  # fmt: skip
    return part
