"""Report section for ``write_buffering``: the cost of the syscall boundary.

Explanations are computed from this host's medians; the meaning of the buffer
comes from the lesson ("Layer 1: the buffer inside your process") and the
Python docs for ``open()``.
"""

from __future__ import annotations

from pathlib import Path

from disklab.sections import evidence, layers, status_note
from disklab.units import ibytes, ns, ratio, us


def _buffer_rule(buf: dict) -> str:
    seen, blk, default = (
        buf["observed_buffer_bytes"],
        buf["st_blksize_bytes"],
        buf["default_buffer_size_bytes"],
    )
    if seen == blk:
        return (
            f"that is the file's st_blksize ({ibytes(blk)}), which open() prefers over "
            f"io.DEFAULT_BUFFER_SIZE ({ibytes(default)}) when the OS reports it"
        )
    if seen == default:
        return f"that is io.DEFAULT_BUFFER_SIZE; the file's st_blksize is {ibytes(blk)}"
    return (
        f"neither io.DEFAULT_BUFFER_SIZE ({ibytes(default)}) nor st_blksize ({ibytes(blk)}): "
        "this Python bounds one by the other (Python 3.14 docs: max(min(st_blksize, 8 MiB), "
        "io.DEFAULT_BUFFER_SIZE))"
    )


def build(section: dict, results: dict, plot_dir: Path) -> dict:
    """Explanations for the write_buffering section; never raises on failed/not_run.

    Returns ``{"ok": bool, "status_note": str, "ratio": float | None,
    "explanations": [str]}``; ``ratio`` is unbuffered over buffered median
    ns per call. Writes no plot.
    """
    if section.get("status") != "ok":
        return {
            "ok": False,
            "status_note": status_note(section),
            "ratio": None,
            "explanations": [],
            "layers": None,
        }
    unbuf = section["modes"]["unbuffered"]["per_call_ns"]["median"]
    buf = section["modes"]["buffered"]["per_call_ns"]["median"]
    size = section["buffer"]["observed_buffer_bytes"]
    r = unbuf / buf if buf > 0 else None
    lines = []
    if r is not None and r > 1:
        lines.append(
            f"An unbuffered 1-byte os.write costs {ratio(r)} a buffered f.write here ({ns(unbuf)} against "
            f"{ns(buf)} per call, medians): every unbuffered call crosses the syscall boundary into the "
            "kernel, while the buffered one copies one byte within this process."
        )
    else:
        lines.append(
            f"The buffered f.write was not cheaper than os.write here ({ns(buf)} against {ns(unbuf)} per "
            "call): that is unexpected; check the raw samples for a disturbed run."
        )
    lines.append(
        f"Python {section['python_version']} held {ibytes(size)} before its first write(2) here; "
        f"{_buffer_rule(section['buffer'])}."
    )
    lines.append(
        f"{ibytes(size)} of 1-byte writes cost about {us(size * unbuf / 1e3)} unbuffered against "
        f"{us(size * buf / 1e3)} buffered on this host. For checkpoint safety: up to {ibytes(size)} that "
        "f.write() already accepted live only in this process's memory until a flush, so a kill -9 loses "
        "them and os.fsync cannot see them; call f.flush() before os.fsync."
    )
    layer_block = layers.block(section, plot_dir, "write_buffering_layers.png")
    io = [evidence.io_line(r["io_record"]) for r in section["modes"]["unbuffered"]["rounds"]]
    return {
        "ok": True,
        "status_note": "ok",
        "ratio": r,
        "explanations": lines,
        "layers": layer_block,
        "layers_bytes": section["layers"]["size_bytes"]
        if isinstance(section.get("layers"), dict) and "size_bytes" in section["layers"]
        else None,
        "io_unbuffered": io[0] if io else None,
    }
