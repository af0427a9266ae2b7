"""The cache-state proof of one load sample: cold in three parts, warm in one.

A sample asked to be cold is reported as cold only when every part that can be
checked passes (the lesson; reference/004: residency alone is not a read count):

1. ``residency``: at most ``COLD_MAX_FRACTION`` (1 %) of the file in the page
   cache just before the load call, by cachestat(2) where the kernel has it,
   else mincore (``before.cache.method``), and the answer trusted (mincore's
   write-permission caveat, cache.residency_trust);
2. ``device_reads``: the workbench device delivered, during the interval up to
   ``all_touched``, at least the bytes the stage touched (``touched_bytes``:
   every tensor byte read once). Device-wide counters, so other I/O on the
   device can only add: this part can miss a cache hit only on a busy device,
   never fail an honest cold read;
3. ``major_faults``: for the methods that read through a file mapping
   (:data:`MAPPED_METHODS`), at least one major page fault in the interval (a
   fault that had to wait for I/O). ``torch.load`` reads with read(2) into
   its own memory, so the part does not apply to it. A major fault can also
   come from the process's own code pages (after a global drop_caches), so
   this part can only refuse, never prove alone.

A part that cannot be checked on this host (no /sys device, no I/O record,
macOS) is ``unavailable`` and listed in ``unchecked``; it does not fail the
sample, and the report shows it beside the figure. A part that fails is listed
in ``failed`` and the sample's verdict is ``cold_unproven``.

A sample asked to be warm is ``warm`` when at least ``WARM_MIN_FRACTION``
(99 %) of the file was resident just before the call, else
``warm_unverified`` (other work can drop caches between the warm-up read and
the load).

A production loader's sample (loadlab.loaders) carries ``read_path``: whether it
reads through a mapping (``mapping``: decides the major-faults part, as
:data:`MAPPED_METHODS` does for the others) and whether its reads bypassed the
page cache (``page_cache``: ``bypassed`` for O_DIRECT, ``used``, ``unknown``).
A loader that bypasses the page cache reads the device whatever is resident, so
the proof says so (``page_cache``) and: residency just before the call still
shows the eviction, but residency after it counts nothing the loader read; a
warm sample cannot be proven warm by residency, so it must also show that the
device did not deliver the bytes it touched (part ``device_reads``, failed
when it did: the sample is then ``warm_unverified``, never warm, with the reason
named). Standard library only.
"""

from __future__ import annotations

from ..cache.pagecache import COLD_MAX_FRACTION
from ..common.facts import is_unavailable
from ..common.stages import LAST

WARM_MIN_FRACTION = 0.99
PROOF_STAGE = LAST  # all_touched: the last stop event, so the interval covers every read of the load
# Methods that read the file through a mapping: torch.load(mmap=True) and safetensors (memory-mapped).
MAPPED_METHODS = ("torch.load-mmap", "load_file", "one-tensor", "load_file+willneed")
VERDICTS = ("cold", "cold_unproven", "warm", "warm_unverified")
# The sample's cache_state for each verdict (cache_state keeps the name older results used).
CACHE_STATE = {
    "cold": "cold",
    "cold_unproven": "cold_unverified",
    "warm": "warm",
    "warm_unverified": "warm_unverified",
}


def _residency_part(cache: dict, *, cold: bool) -> dict:
    fraction = cache["fraction"]
    part = {"method": cache["method"], "fraction": fraction, "trust": cache["trust"]}
    if cache["trust"] != "ok":
        return {**part, "status": "fail", "why": f"residency cannot be trusted: {cache['trust']}"}
    if cold:
        ok = fraction <= COLD_MAX_FRACTION
        return {**part, "status": "pass" if ok else "fail", "limit": f"<= {COLD_MAX_FRACTION}"}
    ok = fraction >= WARM_MIN_FRACTION
    return {**part, "status": "pass" if ok else "fail", "limit": f">= {WARM_MIN_FRACTION}"}


def _device_part(io: object, touched: int) -> dict:
    if is_unavailable(io):
        return {"status": "unavailable", "why": io["unavailable"]}
    dev = io["device"]
    if is_unavailable(dev):
        return {"status": "unavailable", "why": dev["unavailable"]}
    ok = dev["read_bytes"] >= touched
    return {
        "status": "pass" if ok else "fail",
        "device": dev["name"],
        "device_read_bytes": dev["read_bytes"],
        "touched_bytes": touched,
    }


def _faults_part(io: object, method: str, read_path: dict | None = None) -> dict:
    mapped = read_path["mapping"] if read_path else method in MAPPED_METHODS
    if not mapped:
        why = (
            f"{method} reads the file into its own buffers ({read_path['how']}): no file mapping to fault on"
            if read_path
            else f"{method} reads the file with read(2) into its own memory: no file mapping to fault on"
        )
        return {"status": "not_applicable", "why": why}
    if is_unavailable(io):
        return {"status": "unavailable", "why": io["unavailable"]}
    major = io["faults"]["major"]
    return {
        "status": "pass" if major > 0 else "fail",
        "major_faults": major,
        "minor_faults": io["faults"]["minor"],
    }


def _bypass_note(rec: dict) -> dict | None:
    """The proof's ``page_cache`` note for a loader whose reads bypassed the page cache, else None."""
    read_path = rec.get("read_path")
    if not read_path or read_path.get("page_cache") != "bypassed":
        return None
    return {
        "bypassed": True,
        "how": read_path["how"],
        "why": (
            f"{rec['method']} read with {read_path['how']}: residency after the call counts nothing it read, "
            "and a warm sample is warm only if the device did not deliver the bytes it touched"
        ),
    }


def _warm_device_part(io: object, file_bytes: int, method: str) -> dict:
    """A bypassing loader's warm check: the device delivered, up to PROOF_STAGE, fewer bytes than the
    file holds (a load served by the page cache reads next to nothing from it)."""
    if is_unavailable(io) or is_unavailable(io["device"]):
        why = io["unavailable"] if is_unavailable(io) else io["device"]["unavailable"]
        why = f"{why}: {method} bypasses the page cache, so it cannot be proven warm"
        return {"status": "unavailable", "why": why}
    got = io["device"]["read_bytes"]
    part = {"device": io["device"]["name"], "device_read_bytes": got, "file_size_bytes": file_bytes}
    if got < file_bytes:
        return {**part, "status": "pass"}
    why = (
        f"the device delivered {got} bytes for a {file_bytes}-byte file: {method} read the device, "
        "not the page cache, though the file was resident"
    )
    return {**part, "status": "fail", "why": why}


def cache_proof(rec: dict, requested: str, *, warm_why: str | None = None) -> dict:
    """The proof of one load_one.py record ``rec`` asked to be ``requested`` ("cold" or "warm").

    ``warm_why`` is why no file on this workbench can be warm for a loader
    (cache.open_keeps_cache's ``why``); a warm check that fails then gives it
    as the residency part's ``why``. Returns ``{"verdict", "requested",
    "failed", "unchecked", "stage", "parts"}``, with ``page_cache`` for a
    loader whose reads bypassed the page cache (see the module doc). Raises
    ValueError for another requested state.
    """
    cache = rec["before"]["cache"]
    bypass = _bypass_note(rec)
    if requested == "warm":
        parts = {"residency": _residency_part(cache, cold=False)}
        if parts["residency"]["status"] != "pass" and warm_why and "why" not in parts["residency"]:
            parts["residency"]["why"] = warm_why
        if bypass:
            io = rec["stages"][PROOF_STAGE]["io"]
            parts["device_reads"] = _warm_device_part(io, rec["file_size_bytes"], rec["method"])
        failed = [name for name, p in parts.items() if p["status"] == "fail"]
        unchecked = [name for name, p in parts.items() if p["status"] == "unavailable"]
        ok = not failed and not unchecked
        return {
            "verdict": "warm" if ok else "warm_unverified",
            "requested": "warm",
            "failed": failed,
            "unchecked": unchecked,
            "stage": PROOF_STAGE if bypass else None,
            "parts": parts,
            **({"page_cache": bypass} if bypass else {}),
        }
    if requested != "cold":
        raise ValueError(f"requested cache state must be 'cold' or 'warm', got {requested!r}")
    io = rec["stages"][PROOF_STAGE]["io"]
    parts = {
        "residency": _residency_part(cache, cold=True),
        "device_reads": _device_part(io, rec["touched_bytes"]),
        "major_faults": _faults_part(io, rec["method"], rec.get("read_path")),
    }
    failed = [name for name, p in parts.items() if p["status"] == "fail"]
    return {
        "verdict": "cold_unproven" if failed else "cold",
        "requested": "cold",
        "failed": failed,
        "unchecked": [name for name, p in parts.items() if p["status"] == "unavailable"],
        "stage": PROOF_STAGE,
        "parts": parts,
        **({"page_cache": bypass} if bypass else {}),
    }
