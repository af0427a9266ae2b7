"""The load section's "Production loaders" block."""

from __future__ import annotations

import json

from disklab import markup
from disklab.units import pct


def _knob_value(knob: dict) -> str:
    """A knob's value as the report shows it: the loader's own choice where its default is decided at
    run time, inventory values escaped (markup.md)."""
    if knob["value"] is None:
        return markup.md(knob.get("default_text") or "the loader's choice")
    return markup.md(json.dumps(knob["value"]) if isinstance(knob["value"], bool) else knob["value"])


def _loader_proof(name: str, rec: dict, samples: list[dict]) -> list[str]:
    """What this loader's cold proof could and could not check, from its own samples' proofs."""
    mine = [s for s in samples if s["method"] == name]
    cold = [s for s in mine if s["cache_state_requested"] == "cold"]
    warm = [s for s in mine if s["cache_state_requested"] == "warm"]
    bypass = [s for s in mine if (s.get("read_path") or {}).get("page_cache") == "bypassed"]
    out = []
    if not mine:
        return out
    if rec["reads_through_mapping"]:
        out.append("major faults: checked (it reads through a file mapping)")
    else:
        out.append(
            "major faults: not applicable (no file mapping to fault on: it reads into its own buffers)"
        )
    if cold:
        parts = [p for s in cold for p in [s["cache_proof"]["parts"]["device_reads"]]]
        passed = sum(p["status"] == "pass" for p in parts)
        unchecked = [p.get("why", "") for p in parts if p["status"] == "unavailable"]
        dev = (
            f"device reads: unchecked ({markup.md(unchecked[0])})"
            if unchecked
            else f"device reads: passed in {passed}/{len(parts)} cold samples"
        )
        out.append(f"residency just before the call: checked (the eviction); {dev}")
    if bypass:
        after = [
            s["stages"]["all_touched"]["resident_fraction"]
            for s in bypass
            if s["cache_state_requested"] == "cold"
        ]
        how = markup.md(bypass[0]["read_path"]["how"])
        note = (
            f" (after a cold load, {pct(max(after))} of the file was resident at all_touched)"
            if after
            else ""
        )
        out.append(
            f"residency after the call: meaningless here, its reads bypassed the page cache ({how}){note}"
        )
        failed = sum(s["cache_state"] == "warm_unverified" for s in warm)
        if warm:
            out.append(
                "warm: cannot be proven by residency, so the device had to deliver less than the file: it "
                f"did not in {failed}/{len(warm)} warm samples, reported warm_unverified"
            )
    else:
        out.append("residency after the call: meaningful (its reads go through the page cache)")
    return out


def _gpu_note(rec: dict) -> str | None:
    """Whether a GPU-only loader's GPU path ran here (None for a loader that needs no GPU)."""
    if not rec["needs_gpu"]:
        return None
    if rec["gpu_path_run"]:
        return "its GPU path ran on this host"
    return "it needs a GPU, and its GPU path was not run on real hardware here"


def loaders_block(section: dict) -> dict | None:
    """The "Production loaders" block: for each loader asked for (the section's ``loaders``), its title,
    status (installed version, or not_run with the reason, escaped), pins and why, how it read the file
    (its samples' ``read_path``, else its docs), its knobs with values and sources, and what its cold
    proof could and could not check (:func:`_loader_proof`); with tensorizer's file sizes (the
    section's ``files``). None when no loader was asked for."""
    lo = section.get("loaders")
    if not lo:
        return None
    out = []
    for name in lo["requested"]:
        rec = lo["loaders"][name]
        observed = rec.get("observed") or []
        out.append(
            {
                "name": name,
                "title": rec["title"],
                "ok": rec["status"] == "ok",
                "version": markup.md(rec.get("version", "")),
                "reason": markup.md(rec.get("reason", "")),
                "status_text": f"installed {markup.md(rec['version'])}."
                if rec["status"] == "ok"
                else f"not run: {markup.md(rec['reason'].rstrip('.'))}.",
                "pins": ", ".join(f"`{p}`" for p in rec["pins"]),
                "pin_why": rec["pin_why"],
                "read_path": [
                    f"{markup.md(o['how'])} (from {markup.md(o['source'])}; {o['n']} sample(s))"
                    for o in observed
                ]
                or [rec["read_path"] + " (its docs and code; no sample ran)"],
                "knobs": [
                    {
                        "name": k,
                        "value": _knob_value(v),
                        "source": v["source"],
                        "env": v["env"],
                        "default_source": v["default_source"],
                    }
                    for k, v in rec["knobs"].items()
                ],
                "proof": _loader_proof(name, rec, section["samples"]),
                "gpu": _gpu_note(rec),
            }
        )
    files = section["files"]
    tz = [
        {"file": key, "path": markup.md(files[key]["path"]), "size_bytes": files[key]["size_bytes"]}
        for key in ("big_tensors",)
        if key in files
    ]
    return {"loaders": out, "tensorizer_files": tz}
