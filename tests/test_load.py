"""The load step on tiny real files: real torch and safetensors loads, real page cache, real smaps_rollup."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from pathlib import Path

import jsonschema
import pytest
import torch
from safetensors.torch import save_file

from disklab import schemas
from disklab.sections.load import residency as load_residency
from disklab.sections.load import sentences as load_sentences
from disklab_host import registry
from disklab_host.cache import pagecache as cache
from disklab_host.common.facts import peak_rss_bytes
from disklab_host.common.stages import STAGES
from disklab_host.loadlab import load_one, model, prep, workers
from disklab_host.steps import load

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / "src/disklab/schema/experiments/load.schema.json"
# The big file: prep.py's big family with a 512-token vocabulary at width 256, whose model at the smallest
# big file (registry.BIG_MIN_MIB, 18 MiB) is a DecoderLM of 12 layers (17.3 MiB of bf16), so one tensor
# (the embedding, first in the file) is a small share of it, as at the profiles' sizes. The real family's
# 18 MiB model is one layer under a 16 MiB embedding: one-tensor's cold residency would show nothing.
BIG_VOCAB, BIG_WIDTH = 512, 256
BIG_CONFIG = model.DecoderConfig(
    vocab_size=BIG_VOCAB, hidden_size=BIG_WIDTH, num_layers=12, num_heads=4, num_kv_heads=1,
    intermediate_size=768, rope_theta=model.BIG_ROPE_THETA,
)  # fmt: skip
BIG_WEIGHTS_BYTES = 2 * model.param_count(BIG_CONFIG)
EMBED_BYTES = 2 * BIG_VOCAB * BIG_WIDTH


@contextlib.contextmanager
def _big_family_512():
    """prep.py's big family at :data:`BIG_VOCAB` and :data:`BIG_WIDTH` (model.big_config reads both)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(model, "BIG_VOCAB", BIG_VOCAB)
        mp.setattr(model, "BIG_WIDTHS", (BIG_WIDTH,))
        yield


def _cfg(profile: str) -> dict:
    """The step's cfg at ``profile``: the smallest big file, the tiny small model, one repeat (no test
    here reads a spread: each checks every sample on its own)."""
    overrides = {"load_big_mib": registry.BIG_MIN_MIB, "load_small_full_size": 0, "load_repeats": 1}
    sizes = registry.resolve(profile, overrides)
    return {"sizes": sizes, "system": "Linux", "become_allowed": False, "profile": profile}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """prep.prepare's files in this module's workbench, made once (the section's load.run reuses them),
    and the big model's expected next token, computed here from the weights in memory."""
    root = tmp_path_factory.mktemp("loadlab")
    with _big_family_512():
        manifest = prep.prepare(_cfg("full"), root)
    assert manifest["big_model"]["config"] == dataclasses.asdict(BIG_CONFIG)
    net = model.DecoderLM(BIG_CONFIG)
    net.load_state_dict(model.build_weights(BIG_CONFIG, seed=0, label=prep.BIG_LABEL))
    return root, {**manifest, "expected_big_token": model.next_token(net)[0]}


def _page_cache_taken() -> dict[str, int]:
    """/proc/vmstat's counters of page cache taken by anyone on the machine: drop_caches writes
    (``drop_pagecache``) and pages reclaimed under memory pressure (``pgsteal_*``)."""
    with open("/proc/vmstat") as f:
        pairs = (line.split() for line in f)
        return {k: int(v) for k, v in pairs if k == "drop_pagecache" or k.startswith("pgsteal_")}


# What the machine took from the page cache while the section was measured (counter -> increase), empty
# when nothing: a residency a test expects full is checked strictly only then.
SECTION_TAKEN: dict[str, int] = {}


@pytest.fixture(scope="module")
def section(env):
    """The load step end to end, measured once for every test that reads its results: load.run at the
    full profile (prep.prepare finds env's files and reuses them; then every cell, cold and warm, each in
    a fresh process, and the two workers)."""
    root, _ = env
    before = _page_cache_taken()
    with _big_family_512():
        got = load.run(_cfg("full"), root)
    after = _page_cache_taken()
    SECTION_TAKEN.update({k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)})
    return got


@pytest.mark.heavy
def test_section_matches_schema(section):
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    schemas.validator(schema).validate(json.loads(json.dumps(section)))


@pytest.mark.heavy
def test_every_stage_records_the_hosts_noise_and_where_its_time_went(section):
    """Each ok stage of each sample carries its noise record and time split for real (results 6): the
    split covers the stage's own time, its CPU parts are the process's, and the noise spans the clock."""
    from disklab.sections.load import time_split as load_time

    cpu_of_long_stages = []
    for s in section["samples"]:
        for name, st in s["stages"].items():
            if st["status"] != "ok":
                continue
            split, nz = st["time_split"], st["noise"]
            assert split["wall_s"] == st["time_s"], (s["method"], name)
            # getrusage's CPU time never goes back, but over a stage of a millisecond on a busy machine it
            # may not have moved yet: only a stage of 50 ms or more must show some
            assert split["user_s"] >= 0 and split["system_s"] >= 0 and split["rest_s"] >= 0
            if st["time_s"] >= 0.05:
                cpu_of_long_stages.append(split["user_s"] + split["system_s"])
            assert isinstance(split["waiting_s"], float) and split["threads"] >= 1
            blocked = split["blocked_io_s"]  # a float where kernel.task_delayacct was 1, else why not
            assert (isinstance(blocked, float) and blocked >= 0) or "unavailable" in blocked
            assert nz["interval_s"] >= st["time_s"] and {"cpu", "pressure", "swap", "runnable"} <= set(nz)
    assert cpu_of_long_stages and min(cpu_of_long_stages) > 0
    rows = load_time.rows(section, section["cells"], lambda c: f"{c['method']}, {c['file']}")
    cold_mmap = [r for r in rows if r["what"].startswith("torch.load-mmap") and r["cache_state"] == "cold"]
    assert {r["stage"] for r in cold_mmap} >= {"loader_return", "all_touched"}
    touched = next(r for r in cold_mmap if r["stage"] == "all_touched")["split"]
    assert touched["major_faults"] > 0  # a cold mapped load faults its pages in: the I/O record counts them


def _requested(cell: dict) -> str:
    # A warm sample whose file something else on this shared machine dropped (memory pressure, another
    # job's drop_caches) between the warm-up read and the load is warm_unverified: still measured warm.
    return "warm" if cell["cache_state"] in ("warm", "warm_unverified") else cell["cache_state"]


def test_every_cell_measured_cold_and_warm(section):
    got = {(c["file"], c["method"], c["populate"], _requested(c)) for c in section["cells"]}
    for file, method in load.BIG_CELLS:
        populate = None if method == "one-tensor" else "assign"  # every whole-state-dict method populates
        for state in ("cold", "warm"):
            assert (file, method, populate, state) in got
    for file, method in load.SMALL_CELLS:
        for mode in ("copy", "assign"):
            for state in ("cold", "warm"):
                assert (file, method, mode, state) in got
    assert section["n_cold_unverified"] == 0
    assert section["eviction_methods_used"] == ["fadvise_dontneed"]


def test_stage_ordering_and_cache_states(section):
    for s in section["samples"]:
        st = s["stages"]
        assert s["stage_order"] == [name for name in STAGES if name in st]  # the one order, common.stages
        order = [name for name in s["stage_order"] if st[name]["status"] == "ok"]
        times = [st[name]["time_s"] for name in order]
        assert times == sorted(times) and times[0] > 0, (s["method"], st)
        assert order[-1] == "all_touched"  # last: it must not make the first response's pages resident
        if s["model"]:
            assert order == ["loader_return", "module_populated", "first_response", "all_touched"]
            assert st["first_response"]["ran_on"] == "cpu" and isinstance(s["next_token_id"], int)
        else:
            assert order == ["loader_return", "all_touched"] and "next_token_id" not in s
        if s["cache_state"] == "cold":
            assert s["before"]["resident_fraction"] <= cache.COLD_MAX_FRACTION
            assert s["eviction"]["method"] == "fadvise_dontneed"
            proof = s["cache_proof"]
            assert proof["verdict"] == "cold" and proof["failed"] == []
            io = st["all_touched"]["io"]
            if "unavailable" not in io["device"]:  # the real device delivered what the stage touched
                assert proof["parts"]["device_reads"]["status"] == "pass"
                assert io["device"]["read_bytes"] >= s["touched_bytes"]
            if s["method"] != "torch.load":  # a mapped read of a cold file waits on I/O
                assert proof["parts"]["major_faults"]["status"] == "pass" and io["faults"]["major"] > 0
        elif s["cache_state"] == "warm":
            assert s["before"]["cache"]["fraction"] >= 0.99 and s["cache_proof"]["failed"] == []
        else:  # the file left the page cache after the warm-up read (see _requested): labelled, not hidden
            assert s["cache_state"] == "warm_unverified" and s["cache_state_requested"] == "warm"
            assert s["before"]["cache"]["fraction"] < 0.99 and s["cache_proof"]["failed"] == ["residency"]
        # peak RSS never falls, and it covers the RSS seen at the same stage, up to the few hundred
        # KiB by which the kernel's batched RSS counters (read by getrusage) lag /proc/self/statm
        peaks = [s["before"]["peak_rss_bytes"]] + [st[n]["peak_rss_bytes"] for n in order]
        assert peaks == sorted(peaks)
        assert all(st[n]["peak_rss_bytes"] >= st[n]["rss_bytes"] - 4 * 2**20 for n in order)


def test_all_touched_makes_the_file_resident(section):
    for s in section["samples"]:
        frac = s["stages"]["all_touched"]["resident_fraction"]
        if s["method"] == "one-tensor":
            assert s["n_tensors"] == 1 and s["touched_bytes"] == EMBED_BYTES
            assert EMBED_BYTES / s["file_size_bytes"] * 0.99 <= frac
            if s["cache_state"] == "cold":
                assert frac <= 0.5  # only its own pages (and some readahead) came in
        else:
            assert s["touched_bytes"] >= 0.95 * s["file_size_bytes"]  # every tensor read once
            # the whole file is resident after every byte was read, unless something on this machine took
            # page cache meanwhile (another test's drop_caches, memory pressure): then it may be less
            assert frac > 0.99 or SECTION_TAKEN, (s["method"], s["cache_state"], frac)


def test_torch_load_copies_and_mmap_does_not(section):
    big = [s for s in section["samples"] if s["file"] == "big_pt"]
    for s in big:
        grow = s["stages"]["loader_return"]["rss_bytes"] - s["before"]["rss_bytes"]
        if s["method"] == "torch.load":
            assert grow >= 0.9 * BIG_WEIGHTS_BYTES  # private copies exist when the call returns
        elif s["cache_state"] == "cold":
            assert s["stages"]["loader_return"]["resident_fraction"] < 0.5  # mapped, not yet read


def test_mapped_then_resident_at_the_first_response(section):
    """The measured ML-216: a cold torch.load-mmap returns with little of the file resident; meta + assign
    keeps it so through module_populated; the forward pass reads every weight, so at first_response it is
    all in. (load_file, mapped too, reads the whole file inside the call with this safetensors.)"""
    cold = [
        s
        for s in section["samples"]
        if s["file"].startswith("big") and s["method"] in ("torch.load-mmap", "load_file")
        and s["cache_state"] == "cold"
    ]  # fmt: skip
    assert {s["method"] for s in cold} == {"torch.load-mmap", "load_file"}
    for s in cold:
        st = s["stages"]
        assert s["populate"] == "assign" and s["model"] == load.BIG_MODEL
        assert st["first_response"]["resident_fraction"] > 0.99, s["method"]
        assert st["first_response"]["peak_rss_bytes"] >= st["loader_return"]["peak_rss_bytes"]
        if s["method"] != "torch.load-mmap":
            continue
        assert st["loader_return"]["resident_fraction"] < 0.5
        assert st["module_populated"]["resident_fraction"] < 0.5  # assign read nothing
        io = st["first_response"]["io"]  # the forward pass waited on the device for those pages
        assert io["faults"]["major"] > st["module_populated"]["io"]["faults"]["major"]
    rows = {(r["method"], r["cache_state"]): r for r in load_residency.residency_rows(section)}
    mmap = rows[("torch.load-mmap", "cold")]
    assert mmap["mapped"] and mmap["return_fraction"] < 0.5 < 0.99 < mmap["first_fraction"]
    assert not rows[("torch.load", "cold")]["mapped"]
    lines = load_sentences.explanations(section)
    said = next(ln for ln in lines if ln.startswith("cold, torch.load-mmap → module (assign), big_pt: "))
    assert "at first_response" in said and "the mapping moved these reads into it, not away" in said


def test_every_load_of_the_big_file_gives_the_same_next_token(section, env):
    """A real correctness check: both formats, every method, cold and warm, give the token the weights
    give in memory here; the section records that they agree."""
    root, manifest = env
    populated = [s for s in section["samples"] if s["model"] == load.BIG_MODEL]
    assert len(populated) == 2 * 4  # torch.load, torch.load-mmap, load_file, load_file+willneed; cold, warm
    assert {s["next_token_id"] for s in populated} == {manifest["expected_big_token"]}
    fr = section["first_response"]
    assert fr["status"] == "ok" and fr["agree"] is True
    big = next(m for m in fr["models"] if m["model"] == load.BIG_MODEL)
    assert (
        big["agree"]
        and big["n"] == 8
        and [v["next_token_id"] for v in big["votes"]] == [manifest["expected_big_token"]]
    )
    assert big["margin_min"] >= 0
    assert {m["model"] for m in fr["models"]} == {load.BIG_MODEL, "tiny"}
    cell = next(c for c in section["cells"] if c["file"] == "big_pt" and c["method"] == "torch.load")
    assert cell["next_token_ids"] == [manifest["expected_big_token"]]
    assert section["big_model"] == manifest["big_model"]


def test_a_disagreeing_next_token_is_surfaced_not_hidden():
    def sample(token, method, file="big_pt", margin=0.5):
        return {
            "file": file, "method": method, "populate": "assign", "model": "big", "cache_state": "cold",
            "stages": {"first_response": {"status": "ok"}},
            "next_token_id": token, "next_token_margin": margin,
        }  # fmt: skip

    got = load.first_response_summary(
        [
            sample(7, "torch.load"),
            sample(7, "load_file", "big_safetensors"),
            sample(9, "torch.load-mmap", margin=0.01),
        ]
    )
    assert got["agree"] is False
    big = got["models"][0]
    assert big["agree"] is False and big["margin_min"] == 0.01
    assert [(v["next_token_id"], v["n"]) for v in big["votes"]] == [(7, 2), (9, 1)]
    assert big["votes"][1]["cells"] == ["torch.load-mmap → module (assign), big_pt, cold"]
    none = load.first_response_summary([{"stages": {"loader_return": {"status": "ok"}}}])
    assert none == {"status": "not_run", "reason": "no cell populated a module, so none could respond"}


def test_device_placed_recorded_as_not_run_without_a_backend(section):
    if torch.cuda.is_available() or torch.backends.mps.is_available():
        pytest.skip("this host has a GPU backend; the stage runs")
    for s in section["samples"]:
        reason = s["stages"]["device_placed"]["reason"]
        # each backend checked, and why, in words that do not read like a broken install
        assert reason.startswith("torch.cuda.is_available() is False (")
        assert "; torch.backends.mps.is_available() is False (not macOS" in reason
        assert [c["backend"] for c in s["device"]["checked"]] == ["cuda", "mps"]
        assert s["device"]["status"] == "not_run" and s["process"]["device_init_s"] is None
    if torch.version.cuda is None:
        assert "CPU-only build: torch.version.cuda is None" in section["device_placed"]["reason"]
    assert section["device_placed"]["status"] == "not_run"
    assert section["device"]["reason"] == section["device_placed"]["reason"]


def _args(path, **kw) -> object:
    base = {
        "method": "load_file",
        "path": [path],
        "model": None,
        "populate": "copy",
        "model_module": "disklab_host.loadlab.model",
        "decoder_config": None,
        "spawn_wall_ns": 0,
        "hold": False,
    }
    return load_one.argparse.Namespace(**{**base, **kw})


def test_device_placed_stage_with_a_cuda_stand_in(env, monkeypatch):
    """No GPU here: CUDA is faked as available and the weights go to the meta device instead.

    This checks the stage's bookkeeping only; device_placed was not run on real GPU hardware.
    """
    root, manifest = env
    events = []
    props = load_one.argparse.Namespace(
        name="Stand-in GB10", total_memory=128 << 30, is_integrated=1, major=12, minor=1
    )
    monkeypatch.setattr(load_one.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(load_one.torch.cuda, "synchronize", lambda: events.append("sync"))
    monkeypatch.setattr(load_one.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(load_one.torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(load_one, "DEVICE_OVERRIDE", "meta")
    real_init = load_one.device_init
    monkeypatch.setattr(load_one, "device_init", lambda b, d: (events.append("init"), real_init(b, d))[1])
    rec = load_one.measure(_args(manifest["files"]["big_safetensors"]["path"]))
    st = rec["stages"]
    assert rec["stage_order"] == ["loader_return", "device_placed", "all_touched"]
    assert st["device_placed"]["status"] == "ok" and st["device_placed"]["backend"] == "cuda"
    assert st["device_placed"]["time_s"] <= st["all_touched"]["time_s"]
    # the start-up ran (and synchronized) before the clock, and is timed apart
    assert events[:2] == ["init", "sync"] and events.count("sync") == 2
    assert rec["process"]["device_init_s"] > 0
    dev = rec["device"]
    assert dev["backend"] == "cuda" and dev["name"] == "Stand-in GB10"
    assert dev["total_memory_bytes"] == 128 << 30 and dev["shares_memory_with_cpu"] is True
    assert dev["capability"] == "12.1"


def _fake_cuda(monkeypatch, events: list) -> None:
    props = load_one.argparse.Namespace(
        name="Stand-in", total_memory=80 << 30, is_integrated=0, major=9, minor=0
    )
    monkeypatch.setattr(load_one.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(load_one.torch.cuda, "synchronize", lambda: events.append("sync"))
    monkeypatch.setattr(load_one.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(load_one.torch.cuda, "get_device_properties", lambda i: props)


def _big_module_args(manifest: dict, method: str = "load_file") -> object:
    key = "big_pt" if method.startswith("torch.load") else "big_safetensors"
    config = json.dumps(manifest["big_model"]["config"])
    return _args(
        manifest["files"][key]["path"], method=method, model="big", populate="assign", decoder_config=config
    )


def test_first_response_on_the_meta_stand_in_is_not_run_and_says_why(env, monkeypatch):
    """The tests' GPU stand-in (meta) holds no values: device_placed runs, the forward pass cannot, and
    all_touched still reads every byte on the host afterwards. Not run on real GPU hardware."""
    root, manifest = env
    _fake_cuda(monkeypatch, [])
    monkeypatch.setattr(load_one, "DEVICE_OVERRIDE", "meta")
    rec = load_one.measure(_big_module_args(manifest))
    st = rec["stages"]
    assert rec["stage_order"] == list(STAGES)
    assert [st[n]["status"] for n in STAGES] == ["ok", "ok", "ok", "not_run", "ok"]
    assert "meta device" in st["first_response"]["reason"] and "no values" in st["first_response"]["reason"]
    assert "next_token_id" not in rec
    assert rec["touched_bytes"] == BIG_WEIGHTS_BYTES and st["all_touched"]["resident_fraction"] > 0.99
    assert st["module_populated"]["time_s"] <= st["device_placed"]["time_s"] <= st["all_touched"]["time_s"]


def test_first_response_runs_where_the_weights_were_placed(env, monkeypatch):
    """CUDA faked as available with the weights placed on the CPU: device_placed, then the forward pass on
    that device, then all_touched, and the same token as without a device. Not run on a real GPU."""
    root, manifest = env
    events = []
    _fake_cuda(monkeypatch, events)
    monkeypatch.setattr(load_one, "DEVICE_OVERRIDE", "cpu")
    rec = load_one.measure(_big_module_args(manifest, "torch.load-mmap"))
    st = rec["stages"]
    assert [st[n]["status"] for n in STAGES] == ["ok"] * 5
    times = [st[n]["time_s"] for n in STAGES]
    assert times == sorted(times)
    assert st["first_response"]["ran_on"] == "cpu" and st["device_placed"]["device"] == "cpu"
    assert rec["next_token_id"] == manifest["expected_big_token"]
    assert events.count("sync") == 2  # the start-up's, then device_placed's


def test_first_response_leaves_probe_time_out_of_its_clock(env, monkeypatch):
    """A probe that takes 10 s at every stop event: the stages' times stay as without it (StageClock
    subtracts probe time), so the forward pass is all the first_response stage adds.

    The probe's 10 s pass on load_one's clock alone (its ``time.perf_counter_ns`` runs 10 s ahead after
    each probe), not in real time: a counted probe would add 10 s, far past any forward pass of this
    17 MiB model however busy the machine, and the test waits for none of it."""
    root, manifest = env
    monkeypatch.setattr(load_one, "DEVICE_OVERRIDE", None)
    probe_ns = 10 * 10**9
    skew = [0]

    class Clock:  # the time module as load_one sees it, with the probes' 10 s added
        def __getattr__(self, name):
            return getattr(time, name)

        def perf_counter_ns(self):
            return time.perf_counter_ns() + skew[0]

    monkeypatch.setattr(load_one, "time", Clock())
    real = load_one.snapshot

    def slow_probe(held):
        skew[0] += probe_ns
        return real(held)

    monkeypatch.setattr(load_one, "snapshot", slow_probe)
    rec = load_one.measure(_big_module_args(manifest, "torch.load"))
    st = rec["stages"]
    assert rec["probe_s"] >= 4 * 10  # before the call, then loader_return, module_populated, first_response
    assert st["all_touched"]["time_s"] < 10  # none of the probes before it counted
    assert st["first_response"]["time_s"] - st["module_populated"]["time_s"] < 10  # the forward pass alone


def test_no_probe_opens_the_file_while_the_clock_runs(env, monkeypatch):
    """Where open(2) drops a file's page cache (sshfs's default; test_fleet_netfs.py runs there), a probe
    that opened the file at a stop event would evict what the loader had read, mapped pages included, and
    a mapped load would read it all again. The probes read residency on the descriptor opened before the
    load call: from the clock's start to all_touched, disklab's own code opens the file no time."""
    root, manifest = env
    monkeypatch.setattr(load_one, "DEVICE_OVERRIDE", None)
    args = _big_module_args(manifest, "torch.load-mmap")
    path = os.path.realpath(args.path[0])
    opens: dict[str, int] = {"before": 0, "clocked": 0}
    clocked = [False]
    real_open, real_start = os.open, load_one.StageClock.start

    def counting_open(name, *a, **k):
        if os.path.realpath(name) == path:
            opens["clocked" if clocked[0] else "before"] += 1
        return real_open(name, *a, **k)

    def start(self):
        real_start(self)
        clocked[0] = True

    monkeypatch.setattr(os, "open", counting_open)  # the cache module's os.open (torch opens its own way)
    monkeypatch.setattr(load_one.StageClock, "start", start)
    rec = load_one.measure(args)
    assert opens["clocked"] == 0 and opens["before"] >= 1, opens  # held once, before the call
    st = rec["stages"]
    assert [st[n]["status"] for n in STAGES if n != "device_placed"] == ["ok"] * 4
    assert st["first_response"]["resident_fraction"] > 0.99  # the probe sees what the forward pass mapped


def test_device_placed_with_an_mps_stand_in(env, monkeypatch):
    """MPS faked as available (no Mac here): the record says it shares memory; not run on real MPS."""
    root, manifest = env
    synced = []
    monkeypatch.setattr(load_one.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(load_one.torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(load_one.torch.mps, "synchronize", lambda: synced.append(1))
    monkeypatch.setattr(load_one.torch.mps, "recommended_max_memory", lambda: 32 << 30, raising=False)
    monkeypatch.setattr(load_one, "DEVICE_OVERRIDE", "meta")
    rec = load_one.measure(_args(manifest["files"]["big_safetensors"]["path"]))
    assert rec["stages"]["device_placed"]["backend"] == "mps" and len(synced) == 2
    dev = rec["device"]
    assert dev["shares_memory_with_cpu"] is True and dev["recommended_max_memory_bytes"] == 32 << 30
    assert "unavailable" in dev["total_memory_bytes"]
    assert dev["checked"][0]["backend"] == "cuda" and not dev["checked"][0]["available"]
    schema = json.loads(SCHEMA.read_text())
    schemas.validator({"$defs": schema["$defs"], "$ref": "#/$defs/device"}).validate(dev)


def test_cuda_build_without_a_gpu_says_so(monkeypatch):
    monkeypatch.setattr(load_one.torch.version, "cuda", "12.8")
    monkeypatch.setattr(load_one.torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    reason = load_one._cuda_unavailable()
    assert "CUDA 12.8 build, torch.cuda.device_count() is 0, CUDA_VISIBLE_DEVICES=''" in reason


def test_cells_summarise_raw_samples(section):
    for c in section["cells"]:
        raw = [
            s["stages"]["all_touched"]["time_s"]
            for s in section["samples"]
            if (s["file"], s["method"], s["populate"], s["cache_state"])
            == (c["file"], c["method"], c["populate"], c["cache_state"])
        ]
        t = c["stages"]["all_touched"]["time_s"]
        assert t["n"] == len(raw) == c["n"]
        assert t["min"] <= t["median"] <= t["max"] and sorted(raw)[0] == t["min"]


def test_two_workers_recorded(section):
    tw = section["two_workers"]
    assert tw["status"] == "ok"
    assert [r["method"] for r in tw["runs"]] == ["torch.load", "torch.load-mmap"]
    for r in tw["runs"]:
        assert len(r["workers"]) == 2 and len({w["pid"] for w in r["workers"]}) == 2
        assert r["pss_sum_bytes"] == sum(w["pss_bytes"] for w in r["workers"])
        for w in r["workers"]:
            assert w["pss_bytes"] <= w["rss_bytes"]
            assert w["private_bytes"] + w["shared_bytes"] == w["rss_bytes"]


@pytest.mark.heavy
def test_two_workers_private_copies_against_shared_pages(tmp_path):
    """128 MiB, so the payload stands well above the few MiB the allocator varies by."""
    path = tmp_path / "workers.pt"
    gen = torch.Generator().manual_seed(1)
    torch.save({f"w{i}": torch.randn(2048, 4096, generator=gen).to(torch.bfloat16) for i in range(8)}, path)
    payload = 8 * 2048 * 4096 * 2
    cache.warm(path)
    tw = workers.run(str(path), "Linux")
    runs = {r["method"]: r for r in tw["runs"]}
    copy, mapped = runs["torch.load"], runs["torch.load-mmap"]
    # Each torch.load worker holds its own copy; each mmap worker maps the same page-cache pages.
    for w in copy["workers"]:
        assert w["private_bytes"] >= payload, tw
    for w in mapped["workers"]:
        assert w["shared_bytes"] >= payload, tw
        assert w["private_bytes"] <= min(c["private_bytes"] for c in copy["workers"]) - 0.8 * payload, tw
    saved = copy["pss_sum_bytes"] - mapped["pss_sum_bytes"]
    assert saved >= 0.8 * payload, tw  # two copies against one shared set


def test_two_workers_not_measured_off_linux():
    got = workers.run("/nonexistent", "Darwin")
    assert got["status"] == "not_run" and "smaps_rollup" in got["reason"] and "Darwin" in got["reason"]


def test_parse_smaps_rollup_kib_to_bytes():
    text = (
        "Rss: 10 kB\nPss: 6 kB\nShared_Clean: 4 kB\nShared_Dirty: 1 kB\n"
        "Private_Clean: 2 kB\nPrivate_Dirty: 3 kB\n"
    )
    got = workers.parse_smaps_rollup(text)
    assert (
        got["pss_bytes"] == 6 * 1024 and got["shared_bytes"] == 5 * 1024 and got["private_bytes"] == 5 * 1024
    )
    with pytest.raises(ValueError, match="lacks the fields"):
        workers.parse_smaps_rollup("Rss: 1 kB\n")


@pytest.mark.heavy
def test_cold_unverified_when_eviction_is_skipped(env):
    root, manifest = env
    path = manifest["files"]["big_safetensors"]["path"]
    cache.warm(path)
    cell = {"file": "big_safetensors", "path": path, "method": "load_file", "model": None, "populate": None}
    s = load.measure_one(cell, "cold", cfg={"system": "Linux"}, skip_eviction=True)
    assert s["cache_state_requested"] == "cold"
    assert s["cache_state"] == "cold_unverified"
    assert s["eviction"] is None and s["before"]["resident_fraction"] > 0.99
    assert s["cache_proof"]["verdict"] == "cold_unproven" and "residency" in s["cache_proof"]["failed"]
    cells = load.summarise([s])
    assert [c["cache_state"] for c in cells] == ["cold_unverified"]


@pytest.mark.heavy
def test_warm_unverified_when_the_file_left_the_cache_after_the_warm_up(env, monkeypatch):
    """Other work dropped the file between the warm-up read and the load: never reported as warm."""
    root, manifest = env
    path = str(root / "dropped.safetensors")  # a file no earlier test has mapped into this process
    save_file({"w": torch.randn(512, 512)}, path)
    assert cache.evict(path, ["fadvise_dontneed"], become_allowed=False)["method"] == "fadvise_dontneed"
    monkeypatch.setattr(load.cache, "warm", lambda p: 0)  # the warm-up read, undone at once
    cell = {"file": "big_safetensors", "path": path, "method": "load_file", "model": None, "populate": None}
    s = load.measure_one(cell, "warm", cfg={"system": "Linux"})
    assert s["cache_state"] == "warm_unverified" and s["cache_proof"]["failed"] == ["residency"]
    assert s["cache_proof"]["parts"]["residency"]["fraction"] <= cache.COLD_MAX_FRACTION
    assert [c["cache_state"] for c in load.summarise([s])] == ["warm_unverified"]


def test_willneed_hint_names_the_call(env):
    root, manifest = env
    path = manifest["files"]["big_safetensors"]["path"]
    cache.evict(path, ["fadvise_dontneed"], become_allowed=False)
    assert load_one.willneed_hint(path) == "posix_fadvise(POSIX_FADV_WILLNEED)"


@pytest.mark.heavy
def test_unknown_method_and_state_are_refused(env, capsys):
    root, manifest = env
    with pytest.raises(ValueError, match="METHOD must be one of"):
        load_one.load("pickle.load", manifest["files"]["big_pt"]["path"])
    cell = {"file": "big_pt", "path": manifest["files"]["big_pt"]["path"], "method": "torch.load"}
    with pytest.raises(ValueError, match="cache state must be one of"):
        load.measure_one(cell, "lukewarm", cfg={})
    # the command line's own refusal, by the parser `python -m load_one` runs first (main(); every sample
    # of the section ran that entry point in a fresh process): argparse's exit status 2 and its words
    with pytest.raises(SystemExit) as done:
        load_one.main(["pickle.load", "x"])
    assert done.value.code == 2 and "invalid choice: 'pickle.load'" in capsys.readouterr().err


def test_repeats_must_be_positive(env):
    root, manifest = env
    with pytest.raises(ValueError, match="sizes.load_repeats must be > 0"):
        load.measure({"sizes": {"load_repeats": 0}}, manifest)


def test_quick_profile_skips_only_the_named_cells(env):
    root, manifest = env
    plan, _ = load.cell_plan(manifest)
    kept = {
        (c["file"], c["method"], c["populate"], st)
        for c in plan
        for st in load.CACHE_STATES
        if not load.skipped(c, st, "quick")
    }
    big_st = "big_safetensors"
    assert (big_st, "one-tensor", None, "warm") not in kept and (big_st, "one-tensor", None, "cold") in kept
    assert (big_st, "load_file+willneed", "assign", "warm") not in kept
    assert (big_st, "load_file+willneed", "assign", "cold") in kept
    small = "small_safetensors"
    assert (small, "load_file", "assign", "cold") not in kept
    assert (small, "load_file", "assign", "warm") in kept
    assert not any(k[0] == "small_pt" for k in kept)  # copy against assign is asked once, of load_file
    for file, method in (("big_pt", "torch.load"), ("big_pt", "torch.load-mmap"), (big_st, "load_file")):
        assert {(file, method, "assign", "cold"), (file, method, "assign", "warm")} <= kept
    assert len(kept) == 5 * 2 - 2 + 2
    assert all(load.skipped(c, st, "full") is None for c in plan for st in load.CACHE_STATES)


def test_user_model_cells_are_planned(env):
    root, manifest = env
    plan, _ = load.cell_plan(manifest)
    assert not any(c["file"].startswith("user") for c in plan)  # no setting, no user cells
    files = dict(manifest["files"])
    files["user_safetensors"] = {"path": "/u/a", "paths": ["/u/a", "/u/b"], "size_bytes": 2, "format": "x"}
    files["user_pt"] = {"path": "/wb/user.pt", "size_bytes": 1, "format": "pt"}
    user = {"status": "ok", "module_config": None, "module_reason": "no config.json"}
    plan, _ = load.cell_plan({**manifest, "files": files, "user_model": user})
    mine = [c for c in plan if c["file"].startswith("user")]
    assert {(c["file"], c["method"]) for c in mine} == set(load.USER_CELLS)
    assert next(c for c in mine if c["method"] == "load_file")["paths"] == ["/u/a", "/u/b"]
    user = {"status": "ok", "module_config": {"vocab_size": 8}, "module_reason": None}
    plan, _ = load.cell_plan({**manifest, "files": files, "user_model": user})
    populated = [c for c in plan if c["model"] == load.USER_MODEL]
    assert len(populated) == 4 and json.loads(populated[0]["decoder_config"]) == {"vocab_size": 8}
    # the quick profile still measures the user's model cold and warm
    assert all(load.skipped(c, st, "quick") is None for c in populated for st in load.CACHE_STATES)
    bad = {"status": "not_run", "setting": "x", "reason": "x: no such file"}
    plan, _ = load.cell_plan({**manifest, "user_model": bad})
    assert not any(c["file"].startswith("user") for c in plan)
    assert load.user_section({"user_model": bad}, []) == bad


@pytest.mark.parametrize(("system", "raw", "want"), [("Linux", 1000, 1_024_000), ("Darwin", 1000, 1000)])
def test_ru_maxrss_normalised_to_bytes(system, raw, want):
    assert peak_rss_bytes(raw, system) == want


def test_ru_maxrss_unknown_os_refused():
    with pytest.raises(ValueError, match="ru_maxrss unit unknown"):
        peak_rss_bytes(1, "Plan9")


@pytest.mark.heavy
def test_child_peak_rss_is_its_own_not_the_callers(env):
    """ru_maxrss survives exec: a child exec'd from a big parent would report the parent's peak."""
    root, manifest = env
    ballast = bytearray(1 << 30)  # this process now holds 1 GiB more than any child needs
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    path = manifest["files"]["small_safetensors"]["path"]
    cell = {"file": "small_safetensors", "path": path, "method": "load_file", "model": None, "populate": None}
    s = load.measure_one(cell, "warm", cfg={"system": "Linux"})
    assert s["pid"] != os.getpid()
    assert s["before"]["peak_rss_bytes"] < len(ballast)
    assert s["stages"]["all_touched"]["peak_rss_bytes"] < len(ballast)
    del ballast


def test_peak_rss_covers_current_rss_here():
    with load_one.cache.HeldResidency([__file__]) as held:
        snap = load_one.snapshot(held)
    assert snap["peak_rss_bytes"] >= snap["rss_bytes"] - 4 * 2**20 > 0  # batched counters, see above


def test_step_runs_with_prep_and_the_real_model(section, env):
    """The step end to end (the module's one load.run): prep.prepare's files, model.DecoderLM populated by
    copy and by assign, every cell the profile plans measured in the order measure() plans it."""
    root, manifest = env
    schemas.validator(json.loads(SCHEMA.read_text())).validate(json.loads(json.dumps(section)))
    assert section["module_populated"] == {"status": "ok"} and section["first_response"]["agree"] is True
    assert section["big_model"] == {
        "family": "big",
        "mib": registry.BIG_MIN_MIB,
        **model.describe_config(BIG_CONFIG),
    }
    assert {k: Path(v["path"]).parent for k, v in section["files"].items()} == dict.fromkeys(
        prep.FILES, root.resolve()
    )
    # the real family's smallest big model, as prep makes it at lab_run_load_big_mib's minimum: one layer
    assert model.big_config(registry.BIG_MIN_MIB).num_layers == 1
    plan, _ = load.cell_plan(manifest)
    measured = [
        (s["file"], s["method"], s["populate"], s["cache_state_requested"]) for s in section["samples"]
    ]
    assert measured == [
        (c["file"], c["method"], c["populate"], st) for _, c, st in load.schedule(plan, "full", 1)
    ]
    populated = [s for s in section["samples"] if s["model"]]
    assert {(s["file"], s["populate"]) for s in populated} == {
        ("small_pt", "copy"), ("small_pt", "assign"), ("small_safetensors", "copy"),
        ("small_safetensors", "assign"), ("big_pt", "assign"), ("big_safetensors", "assign"),
    }  # fmt: skip
    # quick: copy against assign once, of load_file on the small model (small_pt is the full profile's)
    quick = {(c["file"], c["populate"]) for _, c, _ in load.schedule(plan, "quick", 1) if c["model"]}
    assert quick == {
        ("small_safetensors", "copy"), ("small_safetensors", "assign"), ("big_pt", "assign"),
        ("big_safetensors", "assign"),
    }  # fmt: skip
    for s in populated:
        st = s["stages"]
        assert s["model"] == ("big" if s["file"].startswith("big") else "tiny")
        times = [
            st[n]["time_s"] for n in ("loader_return", "module_populated", "first_response", "all_touched")
        ]
        assert times == sorted(times)
        assert st["first_response"]["resident_fraction"] > 0.99  # the forward pass read every weight
    assert section["n_cold_unverified"] == 0
