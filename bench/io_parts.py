"""Parts 1 and 2: do disklab's fsync latency and cold read rate match fio's on this workbench?

Part 1, fsync fidelity: disklab_host.steps.fsync_bench.bench_mode("fsync") against
``fio --rw=write --bs=4k --fsync=1`` on a fresh file of the same size in the
same directory. fio times the write and the fsync apart: ``write.clat_ns`` is
the pwrite alone and ``sync.lat_ns`` is the fsync alone (fio(1), JSON output).
disklab keeps the write time and the write+fsync time of each block, so its
fsync time is their difference. The judged quantity is therefore the p50 of
the fsync(2) call after one 4 KiB write, on both sides. The write+fsync p50 is
kept as well; on fio's side it is the sum of the two p50s, which is close
because the fsync is most of the total, but is not the p50 of a sum.

Part 2, cold-read fidelity: disklab's eviction (disklab_host.cache.pagecache.evict) and
then a plain sequential read with cache.warm, against
``fio --rw=read --bs=1M --invalidate=1`` on the same file. Then each reads the
file again with it resident: the warm figures.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from common import fio_p50_ns, judged_part, pair_orders, run_fio, summary

from disklab_host.cache import pagecache as cache
from disklab_host.common.stats import percentile
from disklab_host.common.units import MIB
from disklab_host.steps import fsync_bench

FSYNC_BLOCK_BYTES = 4096


def _disklab_fsync(path: Path, blocks: int) -> dict:
    res = fsync_bench.bench_mode("fsync", path, blocks, FSYNC_BLOCK_BYTES)
    sync_ns = sorted(t - w for t, w in zip(res["samples_ns"], res["write_samples_ns"], strict=True))
    return {
        "fsync_p50_us": percentile(sync_ns, 50) / 1e3,
        "write_plus_fsync_p50_us": res["latency"]["p50_us"],
        "write_p50_us": res["write_latency"]["p50_us"],
        "blocks": len(res["samples_ns"]),
    }


def _fio_fsync(path: Path, blocks: int) -> dict:
    path.unlink(missing_ok=True)
    try:
        job = run_fio(
            [
                "--name=fsync_fidelity",
                f"--filename={path}",
                "--rw=write",
                f"--bs={FSYNC_BLOCK_BYTES}",
                f"--size={blocks * FSYNC_BLOCK_BYTES}",
                "--fsync=1",
                "--ioengine=psync",
                "--fallocate=none",
            ]
        )
    finally:
        path.unlink(missing_ok=True)
    write_p50 = fio_p50_ns(job["write"]["clat_ns"]) / 1e3
    sync_p50 = fio_p50_ns(job["sync"]["lat_ns"]) / 1e3
    return {
        "fsync_p50_us": sync_p50,
        "write_plus_fsync_p50_us": write_p50 + sync_p50,
        "write_p50_us": write_p50,
        "blocks": job["write"]["total_ios"],
        "syncs": job["sync"]["total_ios"],
    }


def fsync_fidelity(workbench: Path, blocks: int, repeats: int) -> dict:
    """Part 1: ``repeats`` pairs of disklab's and fio's fsync p50 on ``blocks`` 4 KiB blocks.

    Each side writes a fresh file of ``blocks * 4096`` bytes in ``workbench``
    and deletes it. Returns a :func:`common.judged_part` section in µs with
    ``pairs`` (each side's fsync, write and write+fsync p50 in µs) and the
    write+fsync ratios under ``write_plus_fsync_ratio``. Raises RuntimeError
    when fio fails.
    """
    runners = {"disklab": _disklab_fsync, "fio": _fio_fsync}
    pairs = []
    for order in pair_orders(repeats, ("disklab", "fio")):
        pair = {"order": list(order)}
        for name in order:
            pair[name] = runners[name](workbench / f"bench_fsync_{name}.bin", blocks)
        pairs.append(pair)
    part = judged_part(
        title="fsync fidelity",
        quantity="p50 of the fsync(2) call after each 4 KiB write",
        unit="us",
        sides={k: [p[k]["fsync_p50_us"] for p in pairs] for k in ("disklab", "fio")},
        target={"op": "between", "low": 0.9, "high": 1.1},
        notes=[
            "fio times pwrite (write.clat_ns) and fsync (sync.lat_ns) apart; disklab's fsync time is "
            "its write+fsync sample minus its write sample, so both sides time the fsync call alone",
            "fio percentiles are histogram bin values; disklab's are exact order statistics",
        ],
    )
    part["blocks"] = blocks
    part["block_bytes"] = FSYNC_BLOCK_BYTES
    part["pairs"] = pairs
    part["write_plus_fsync_ratio"] = summary(
        [p["disklab"]["write_plus_fsync_p50_us"] / p["fio"]["write_plus_fsync_p50_us"] for p in pairs]
    )
    return part


def make_big_file(path: Path, size_bytes: int) -> None:
    """Write ``size_bytes`` of os.urandom bytes to ``path`` in 8 MiB chunks, then fsync it."""
    with open(path, "wb") as f:
        left = size_bytes
        while left:
            n = min(left, 8 * MIB)
            f.write(os.urandom(n))
            left -= n
        f.flush()
        os.fsync(f.fileno())


def _disklab_read(path: Path, size_bytes: int) -> dict:
    evicted = cache.evict(path, become_allowed=False)
    if evicted["method"] is None:
        raise RuntimeError(f"disklab could not evict {path}: {evicted['attempts']}")
    before = cache.residency(path)["fraction"]
    t0 = time.perf_counter()
    got = cache.warm(path)
    cold_s = time.perf_counter() - t0
    warm_before = cache.residency(path)["fraction"]
    t0 = time.perf_counter()
    cache.warm(path)
    warm_s = time.perf_counter() - t0
    if got != size_bytes:
        raise RuntimeError(f"disklab read {got} bytes of {path}, expected {size_bytes}")
    return {
        "cold_mib_s": size_bytes / MIB / cold_s,
        "warm_mib_s": size_bytes / MIB / warm_s,
        "eviction_method": evicted["method"],
        "resident_fraction_before_cold": before,
        "resident_fraction_before_warm": warm_before,
    }


def _fio_read(path: Path, size_bytes: int) -> dict:
    common = [f"--filename={path}", "--rw=read", "--bs=1M", f"--size={size_bytes}", "--ioengine=psync"]
    cold = run_fio(["--name=cold_read", "--invalidate=1", *common])
    warm_before = cache.residency(path)["fraction"]
    warm = run_fio(["--name=warm_read", "--invalidate=0", *common])
    return {
        "cold_mib_s": cold["read"]["bw_bytes"] / MIB,
        "warm_mib_s": warm["read"]["bw_bytes"] / MIB,
        "eviction_method": "fio --invalidate=1 (posix_fadvise POSIX_FADV_DONTNEED)",
        "resident_fraction_before_warm": warm_before,
    }


def cold_read_fidelity(workbench: Path, size_bytes: int, repeats: int) -> dict:
    """Part 2: ``repeats`` pairs of cold and warm sequential-read rates, disklab vs fio, in MiB/s.

    One file of ``size_bytes`` random bytes is written in ``workbench``, read
    by both sides in every pair, and deleted at the end. The cold rate is
    judged; warm rates go under ``warm`` with their own ratio. Raises
    RuntimeError when fio fails or disklab's eviction finds no working method.
    """
    path = workbench / "bench_big.bin"
    make_big_file(path, size_bytes)
    runners = {"disklab": _disklab_read, "fio": _fio_read}
    pairs = []
    try:
        for order in pair_orders(repeats, ("disklab", "fio")):
            pair = {"order": list(order)}
            for name in order:
                pair[name] = runners[name](path, size_bytes)
            pairs.append(pair)
    finally:
        path.unlink(missing_ok=True)
    part = judged_part(
        title="cold-read fidelity",
        quantity=f"sequential read of a {size_bytes // MIB} MiB file after eviction",
        unit="mib_s",
        sides={k: [p[k]["cold_mib_s"] for p in pairs] for k in ("disklab", "fio")},
        target={"op": ">=", "value": 0.9},
        notes=[
            "disklab: cache.evict, then cache.warm (8 MiB read calls); fio: --invalidate=1, 1 MiB reads",
        ],
    )
    part["size_bytes"] = size_bytes
    part["pairs"] = pairs
    warm = {k: [p[k]["warm_mib_s"] for p in pairs] for k in ("disklab", "fio")}
    part["warm"] = {
        "ratio": summary([a / b for a, b in zip(warm["disklab"], warm["fio"], strict=True)]),
        "sides": {k: summary(v, "mib_s") for k, v in warm.items()},
    }
    return part
