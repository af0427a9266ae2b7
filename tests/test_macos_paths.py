"""macOS paths that the Linux test fixtures used to hide, checked here with stand-ins for macOS.

There is no Mac here: MPS, CPython's macOS mmap and F_FULLFSYNC are modelled by injected doubles
(each test says which), and the code around them runs for real on this machine's files. Nothing here
ran on Apple hardware.
"""

from __future__ import annotations

import json
import mmap
import os
from pathlib import Path

import torch
from safetensors.torch import save_file

from disklab import schemas
from disklab_host.cache import pagecache as cache
from disklab_host.loadlab import load_one
from disklab_host.steps import load

REPO = Path(__file__).resolve().parent.parent
LOAD_SCHEMA = json.loads((REPO / "src/disklab/schema/experiments/load.schema.json").read_text())
# What torch's MPS backend raises for a float64 tensor (torch/csrc, "MPS framework doesn't support float64").
MPS_FLOAT64_ERROR = (
    "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
    "Please use float32 instead."
)


def _mps_stand_in(monkeypatch) -> None:
    """MPS as available, with placement on "meta" refusing float64 the way .to("mps") does."""
    monkeypatch.setattr(load_one.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(load_one.torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(load_one.torch.mps, "synchronize", lambda: None)
    monkeypatch.setattr(load_one.torch.mps, "recommended_max_memory", lambda: 16 << 30, raising=False)
    monkeypatch.setattr(load_one, "DEVICE_OVERRIDE", "meta")
    real_to = torch.Tensor.to

    def mps_like_to(self, *args, **kwargs):
        target = args[0] if args else kwargs.get("device")
        if str(target) == "meta" and self.dtype in (torch.float64, torch.complex128):
            raise TypeError(MPS_FLOAT64_ERROR)
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", mps_like_to)


def test_a_float64_tensor_on_mps_is_device_placed_not_run_and_the_rest_kept(tmp_path, monkeypatch):
    """A file with an F64 tensor, on an MPS stand-in that refuses float64 (no Mac here): device_placed is
    recorded as not_run naming the tensor and its dtype, and the earlier stages stay measured."""
    path = tmp_path / "f64.safetensors"
    save_file({"a": torch.ones(64, 64), "b": torch.ones(8, dtype=torch.float64)}, str(path))
    _mps_stand_in(monkeypatch)
    rec = load_one.measure(load_one.parse_args(["load_file", str(path)]))
    st = rec["stages"]
    assert st["device_placed"] == {"status": "not_run", "reason": "MPS has no float64: tensor b is F64"}
    assert st["loader_return"]["status"] == "ok" and st["all_touched"]["status"] == "ok"
    assert rec["device"]["backend"] == "mps" and rec["n_tensors"] == 2
    stage_schema = {"$defs": LOAD_SCHEMA["$defs"], "$ref": "#/$defs/stage"}
    for stage in st.values():
        schemas.validator(stage_schema).validate(stage)


def test_a_float32_file_on_the_mps_stand_in_is_still_placed(tmp_path, monkeypatch):
    path = tmp_path / "f32.safetensors"
    save_file({"a": torch.ones(64, 64)}, str(path))
    _mps_stand_in(monkeypatch)
    rec = load_one.measure(load_one.parse_args(["load_file", str(path)]))
    placed = rec["stages"]["device_placed"]
    assert placed["status"] == "ok" and placed["backend"] == "mps"


def test_the_user_section_names_a_device_placed_refusal():
    """load.user_section carries the first user sample's device_placed refusal into the section."""
    manifest = {
        "user_model": {"status": "ok", "setting": "m.safetensors", "kind": "file", "format": "safetensors",
                       "shards": ["m"], "size_bytes": 8, "module_config": {"num_layers": 1}},
        "files": {"user_pt": {"path": "/w/user.pt", "size_bytes": 9}},
    }  # fmt: skip
    refused = {"status": "not_run", "reason": "MPS has no float64: tensor b is F64"}
    samples = [
        {"file": "big_safetensors", "stages": {"device_placed": {"status": "ok"}}},
        {"file": "user_safetensors", "stages": {"device_placed": refused}},
    ]
    sec = load.user_section(manifest, samples)
    assert sec["device_placed"] == refused
    schemas.validator({"$defs": LOAD_SCHEMA["$defs"], **LOAD_SCHEMA["properties"]["user_model"]}).validate(
        sec
    )


def test_mps_built_but_unavailable_names_the_macos_version(monkeypatch):
    """macOS faked (platform's answers injected): the reason names the host's macOS version."""
    monkeypatch.setattr(load_one, "SYSTEM", "Darwin")
    monkeypatch.setattr(load_one.torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(load_one.platform, "mac_ver", lambda: ("13.6.7", ("", "", ""), "arm64"))
    reason = load_one._mps_unavailable()
    assert "built with MPS, but macOS 13.6.7 offers it no Metal device" in reason


def test_the_macos_willneed_hint_never_maps_with_cpythons_mmap(tmp_path, monkeypatch):
    """macOS modelled by a host without os.posix_fadvise (as macOS's Python has none) and a stand-in
    for CPython's mmap.mmap that records the fcntl(F_FULLFSYNC) it issues on macOS (Modules/mmapmodule.c):
    the hint is given with madvise over a ctypes mapping, so no drive-cache flush falls inside the load."""
    path = tmp_path / "w.safetensors"
    save_file({"a": torch.ones(256, 256)}, str(path))
    flushes = []

    class MacMmap:
        def __init__(self, fd, *args, **kwargs):
            flushes.append(("F_FULLFSYNC", fd))
            raise AssertionError("CPython's mmap.mmap was called: on macOS it runs fcntl(F_FULLFSYNC)")

    monkeypatch.delattr(os, "posix_fadvise")
    monkeypatch.setattr(mmap, "mmap", MacMmap)
    assert load_one.willneed_hint(str(path)) == cache.MADVISE_WILLNEED_CTYPES
    assert flushes == []
    assert cache.MADVISE_WILLNEED_CTYPES in LOAD_SCHEMA["$defs"]["sample"]["properties"]["hint"]["enum"]
