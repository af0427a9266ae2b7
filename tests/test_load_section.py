"""The load report section: schema, explanations from the section's own numbers, rendered facts.

The section is built from synthetic samples with known times, passed through the
host-side summariser (disklab_host.steps.load), so every ratio the report prints can
be checked exactly.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jinja2
import jsonschema
import pytest

from disklab import markup, report, schemas, stored
from disklab.sections import evidence
from disklab.sections import load as section_mod
from disklab.sections.load import residency as load_residency
from disklab.sections.load import sentences as load_sentences
from disklab.units import FILTERS
from disklab_host.loadlab import proof
from disklab_host.steps import load

REPO = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((REPO / "src/disklab/schema/experiments/load.schema.json").read_text())
TEMPLATES = REPO / "src/disklab/templates"
MIB = 1 << 20
SIZE = 256 * MIB
# (method, file, populate) -> {state: (loader_return_s, all_touched_s)}
TIMES = {
    ("torch.load", "big_pt", None): {"cold": (0.6, 1.0), "warm": (0.2, 0.5)},
    ("torch.load-mmap", "big_pt", None): {"cold": (0.005, 1.8), "warm": (0.004, 0.1)},
    ("load_file", "big_safetensors", None): {"cold": (0.002, 2.0), "warm": (0.001, 0.1)},
    ("one-tensor", "big_safetensors", None): {"cold": (0.003, 0.05), "warm": (0.001, 0.01)},
    ("load_file+willneed", "big_safetensors", None): {"cold": (0.3, 1.5), "warm": (0.002, 0.1)},
    ("load_file", "small_safetensors", "copy"): {"cold": (0.01, 0.04), "warm": (0.005, 0.02)},
    ("load_file", "small_safetensors", "assign"): {"cold": (0.01, 0.06), "warm": (0.005, 0.04)},
}


def snap(fraction: float, peak: int, size: int = SIZE) -> dict:
    return {
        "resident_bytes": int(fraction * size),
        "resident_fraction": fraction,
        "rss_bytes": peak - MIB,
        "peak_rss_bytes": peak,
    }


def sample(method, file, populate, state, lr, at, rep, *, cache_state=None) -> dict:
    size = SIZE if file.startswith("big") else 2 * MIB
    share = 1 / 8 if method == "one-tensor" else 1.0
    stages = {
        "loader_return": {
            "status": "ok",
            "time_s": lr,
            **snap(0.001 if state == "cold" else 1.0, 200 * MIB, size),
        }
    }
    if populate:
        stages["module_populated"] = {
            "status": "ok",
            "time_s": (lr + at) / 2,
            **snap(1.0, (230 if populate == "copy" else 210) * MIB, size),
        }
    stages["all_touched"] = {"status": "ok", "time_s": at, **snap(share, 460 * MIB, size)}
    stages["all_touched"]["io"] = {
        "process": {
            "read_bytes": size if state == "cold" else 0,
            "write_bytes": 0,
            "source": "/proc/self/io",
        },
        "device": {
            "name": "vda",
            "read_bytes": size if state == "cold" else 0,
            "written_bytes": 0,
            "sectors_read": (size if state == "cold" else 0) // 512,
            "sectors_written": 0,
        },
        "faults": {"major": 3 if state == "cold" else 0, "minor": 100},
    }
    stages["device_placed"] = {
        "status": "not_run",
        "reason": "torch.cuda.is_available() is False on this host",
    }
    rec = {
        "method": method,
        "path": f"/wb/load/{file}",
        "file": file,
        "file_size_bytes": size,
        "model": "tiny" if populate else None,
        "populate": populate,
        "pid": 100 + rep,
        "system": "Linux",
        "torch_version": "2.13.0",
        "cache_state_requested": "cold" if state == "cold" else state,
        "cache_state": cache_state or state,
        "repeat": rep,
        "eviction": {
            "method": "drop_caches",
            "attempts": [
                {"method": "fadvise_dontneed", "ok": False, "error": "RuntimeError: 40.0 % still resident"},
                {"method": "drop_caches", "ok": True, "error": None},
            ],
            "fraction_after": 0.0,
        }
        if state == "cold"
        else None,
        "process": {"spawn_to_main_s": 0.01, "import_s": 1.1},
        "before": snap(0.0 if state == "cold" else 1.0, 190 * MIB, size),
        "residency_trust": "ok",
        "stage_order": list(stages),
        "stages": stages,
        "probe_s": 0.001,
        "residency_probe": "held",
        "n_tensors": 1 if method == "one-tensor" else 8,
        "touched_bytes": int(share * size),
        "checksum": 1.0,
    }
    before = rec["before"]["resident_fraction"] if cache_state != "cold_unverified" else 0.5
    rec["before"]["cache"] = {"method": "cachestat", "fraction": before, "trust": "ok"}
    rec["cache_proof"] = proof.cache_proof(rec, rec["cache_state_requested"])
    return rec


def make_section(*, unverified: bool = False, scales: tuple[float, ...] = (0.9, 1.0, 1.2)) -> dict:
    """A load section of TIMES, one sample per scale of each cell's times (the median scale is 1.0): a
    results-4 section (the big file no model, no first_response) as disklab.stored upgrades it."""
    samples = []
    for (method, file, populate), by_state in TIMES.items():
        for state, (lr, at) in by_state.items():
            for rep, scale in enumerate(scales):  # median is the table's value
                samples.append(sample(method, file, populate, state, lr * scale, at * scale, rep))
    if unverified:
        samples.append(
            sample("load_file", "big_safetensors", None, "cold", 0.001, 0.1, 3, cache_state="cold_unverified")
        )
    workers = [
        {
            "method": "torch.load",
            "pss_sum_bytes": 2 * 400 * MIB,
            "private_sum_bytes": 2 * 390 * MIB,
            "workers": [
                {
                    "pid": 1,
                    "rss_bytes": 480 * MIB,
                    "pss_bytes": 400 * MIB,
                    "private_bytes": 400 * MIB,
                    "shared_bytes": 80 * MIB,
                }
            ]
            * 2,
        },
        {
            "method": "torch.load-mmap",
            "pss_sum_bytes": 2 * 272 * MIB,
            "private_sum_bytes": 2 * 144 * MIB,
            "workers": [
                {
                    "pid": 2,
                    "rss_bytes": 480 * MIB,
                    "pss_bytes": 272 * MIB,
                    "private_bytes": 144 * MIB,
                    "shared_bytes": 336 * MIB,
                }
            ]
            * 2,
        },
    ]
    return {
        "status": "ok",
        "system": "Linux",
        "page_size_bytes": 4096,
        "repeats": len(scales),
        "small_config": "tiny",
        "files": {"big_pt": {"path": "/wb/big.pt", "size_bytes": SIZE, "format": "pt"}},
        "big_model": {"unavailable": stored.BIG_FILE_NOT_A_MODEL},
        "module_populated": {"status": "ok"},
        "first_response": {"status": "not_run", "reason": stored.FIRST_RESPONSE_NOT_MEASURED},
        "device_placed": {"status": "not_run", "reason": "torch.cuda.is_available() is False on this host"},
        "cells_skipped": [
            "one-tensor is measured cold only in the quick profile: its question is cold residency"
        ],
        "eviction_methods_used": ["drop_caches"],
        "drop_caches_used": True,
        "become_allowed": True,
        "n_cold_unverified": int(unverified),
        "residency_trust": ["ok"],
        "samples": samples,
        "cells": load.summarise(samples),
        "two_workers": {"status": "ok", "file_size_bytes": SIZE, "runs": workers},
        "measure_wall_s": 100.0,
        "step_wall_s": 120.0,
    }


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    """The load schema's validator, made once: the schema is checked against its metaschema here, once,
    where jsonschema.validate would check it again on every call."""
    cls = jsonschema.validators.validator_for(SCHEMA)
    cls.check_schema(SCHEMA)
    return schemas.validator(SCHEMA)


def check_section(section: dict) -> None:
    """jsonschema.validate(section, SCHEMA), with the validator made once: raises the same best match."""
    error = jsonschema.exceptions.best_match(_validator().iter_errors(section))
    if error is not None:
        raise error


@functools.cache
def load_template() -> jinja2.Template:
    """sections/load.md.j2 in an environment of the report's filters and escaping (disklab.report's),
    compiled once."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined)
    env.filters.update(FILTERS)
    env.filters.update(markup.FILTERS)  # the report's escaping (disklab.report.environment)
    return env.get_template("sections/load.md.j2")


def render(section: dict, tmp_path: Path) -> tuple[dict, str]:
    check_section(section)
    x = section_mod.build(section, {"experiments": {"load": section}}, tmp_path / "plots")
    md = load_template().render(section=section, view=x, results={})
    return x, md


# Results 5: the big file is a model. (method, file) -> {state: (loader_return, module_populated,
# first_response, all_touched) in s, and the file's residency at loader_return}; at first_response the
# forward pass has read the whole file.
TIMES_V5 = {
    ("torch.load", "big_pt"): {
        "cold": ((0.6, 0.61, 0.9, 1.0), 1.0), "warm": ((0.2, 0.21, 0.4, 0.5), 1.0),
    },
    ("torch.load-mmap", "big_pt"): {
        "cold": ((0.005, 0.01, 1.5, 1.6), 0.002), "warm": ((0.004, 0.01, 0.2, 0.3), 1.0),
    },
    ("load_file", "big_safetensors"): {
        "cold": ((0.4, 0.41, 0.7, 0.8), 1.0), "warm": ((0.1, 0.11, 0.3, 0.4), 1.0),
    },
}  # fmt: skip
BIG_TOKEN = 30933


def v5_sample(method, file, state, times, lr_fraction, rep, token=BIG_TOKEN) -> dict:
    """A results-5 sample of the big model (meta + assign): every stage, all_touched last."""
    rec = sample(method, file, None, state, times[0], times[3], rep)
    lr, mp, fr, at = times
    io = rec["stages"]["all_touched"]["io"]
    rec["stages"] = {
        "loader_return": {"status": "ok", "time_s": lr, **snap(lr_fraction, 200 * MIB)},
        "module_populated": {"status": "ok", "time_s": mp, **snap(lr_fraction, 210 * MIB)},
        "device_placed": {"status": "not_run", "reason": "torch.cuda.is_available() is False on this host"},
        "first_response": {"status": "ok", "time_s": fr, **snap(1.0, 300 * MIB), "io": io, "ran_on": "cpu"},
        "all_touched": {"status": "ok", "time_s": at, **snap(1.0, 310 * MIB), "io": io},
    }
    rec.update(model="big", populate="assign", stage_order=list(rec["stages"]), next_token_id=token,
               next_token_margin=0.0625)  # fmt: skip
    rec["cache_proof"] = proof.cache_proof(rec, rec["cache_state_requested"])
    return rec


def make_v5_section(odd_token: int | None = None) -> dict:
    """A results-5 section: make_section's small model and workers, the big file as a model; with
    ``odd_token``, one warm torch.load-mmap sample answered another token."""
    section = make_section()
    samples = [s for s in section["samples"] if not s["file"].startswith("big")]
    for (method, file), by_state in TIMES_V5.items():
        for state, (times, fraction) in by_state.items():
            for rep, scale in enumerate((0.9, 1.0, 1.2)):
                odd = odd_token is not None and (method, state, rep) == ("torch.load-mmap", "warm", 2)
                scaled = tuple(t * scale for t in times)
                samples.append(
                    v5_sample(method, file, state, scaled, fraction, rep, odd_token if odd else BIG_TOKEN)
                )
    section["samples"] = samples
    section["cells"] = load.summarise(samples)
    section["first_response"] = load.first_response_summary(samples)
    section["big_model"] = {
        "family": "big", "mib": 256, "params": 131_877_888, "weights_bytes": 263_755_776,
        "config": {"vocab_size": 32000, "hidden_size": 1024, "num_layers": 9, "num_heads": 16,
                   "num_kv_heads": 2, "intermediate_size": 2816, "rope_theta": 10000.0, "rms_norm_eps": 1e-5},
    }  # fmt: skip
    return section


def test_first_response_in_the_stage_table_residency_table_and_explanations(tmp_path):
    x, md = render(make_v5_section(), tmp_path)
    assert "`first_response` one forward pass of a fixed short prompt produced its next-token id" in md
    assert "The big file is a DecoderLM of 131,877,888 parameters, 251.54 MiB of bf16" in md
    assert "1024, 9 layers, 16 heads (2 key/value), MLP 2816" in md
    # the stage table: first_response between module_populated and all_touched, per cache state
    assert (
        "| torch.load-mmap → module (assign), big_pt | cold | first_response | 1.500 s [1.350 s–1.800 s] "
        in md
    )
    assert "| torch.load-mmap → module (assign), big_pt | warm | first_response | 0.200 s" in md
    # mapped, then resident: 0.2 % at loader_return, 100 % at first_response, cold and warm, with the proof
    row = next(r for r in x["residency"] if r["method"] == "torch.load-mmap" and r["cache_state"] == "cold")
    assert row["return_fraction"] == pytest.approx(0.002) and row["first_fraction"] == 1.0 and row["mapped"]
    assert row["tokens"] == str(BIG_TOKEN) and "residency ✓ 3/3" in row["proof"]
    assert (
        "| torch.load-mmap → module (assign), big_pt | cold | 0.2 % (524.29 KiB) | 100.0 % (256.00 MiB) | "
        "1.500 s [1.350 s–1.800 s] | 256.00 MiB | 300.00 MiB | 30933 | residency ✓ 3/3" in md
    )
    warm = next(r for r in x["residency"] if r["method"] == "torch.load-mmap" and r["cache_state"] == "warm")
    assert warm["return_fraction"] == 1.0 and "residency" in warm["proof"]
    said = [
        ln for ln in x["explanations"] if ln.startswith("cold, torch.load-mmap → module (assign), big_pt:")
    ]
    assert said == [
        "cold, torch.load-mmap → module (assign), big_pt: 0.2 % of the file (524.29 KiB) was resident when "
        "the call returned, 100.0 % (256.00 MiB) at first_response, 255.49 MiB more; the device delivered "
        "256.00 MiB up to it (medians); the forward pass needed the whole file: the mapping moved these "
        "reads into it, not away."
    ]
    assert any(ln.startswith("cold, load_file → module (assign), big_safetensors: 100.0 % of the file") and
               "read the whole file inside the call" in ln for ln in x["explanations"])  # fmt: skip
    assert any(
        ln.startswith(
            "cold, first_response: torch.load-mmap took 1.7× torch.load here "
            "(1.500 s against 0.900 s, medians; "
        )
        for ln in x["explanations"]
    )
    assert f"`big`: all 18 loads that reached first_response gave next token {BIG_TOKEN}" in md
    assert not any("disagree" in w for w in x["warnings"])
    assert (tmp_path / "plots/load_stages.png").stat().st_size > 1000


def test_a_disagreeing_first_response_is_a_warning_with_both_tokens(tmp_path):
    x, md = render(make_v5_section(odd_token=7), tmp_path)
    assert any(w.startswith("The first responses disagree") for w in x["warnings"])
    assert "> **Warning.** The first responses disagree" in md
    assert (
        f"`big`: the same weights gave different next tokens: token {BIG_TOKEN} from 17 (" in md
        and "token 7 from 1 (torch.load-mmap → module (assign), big_pt, warm)" in md
    )


def test_a_run_from_before_the_first_response_says_it_was_not_measured(tmp_path):
    section = make_section()
    from disklab import stored

    doc = {"experiments": {"load": section}}
    stored._results_update_to_5(doc)
    x, md = render(section, tmp_path)
    assert x["residency"] == [] and "No load reached `first_response` in this run." in md
    assert "`first_response` not run: not measured in this run: written before results version 5" in md
    assert "In this run the big file was not a model" in md
    # its big cells (not populated then) still give the old explanations
    assert any(ln.startswith("cold, all_touched: torch.load-mmap took") for ln in x["explanations"])


@pytest.mark.heavy
def test_explanations_computed_from_the_sections_numbers(tmp_path):
    x, md = render(make_section(), tmp_path)
    lines = x["explanations"]

    def said(start: str) -> str:
        return next(line for line in lines if line.startswith(start))

    # the ratio of medians, then the verdict: at three samples a side the exact test cannot decide
    assert "inconclusive: n = 3 a side cannot decide" in said(
        "cold, loader_return: torch.load-mmap took 0.0083× torch.load here "
        "(0.005 s against 0.600 s, medians; "
    )
    said("cold, all_touched: torch.load-mmap took 1.8× torch.load here (1.800 s against 1.000 s, medians; ")
    said("warm, all_touched: torch.load-mmap took 0.2× torch.load here (0.100 s against 0.500 s, medians; ")
    six = render(make_section(scales=SIX), tmp_path / "six")[0]["explanations"]
    assert any(
        line.startswith("cold, all_touched: torch.load-mmap took 1.8× torch.load here")
        and "changed: 1.80× slower" in line
        for line in six
    )
    assert any(
        line.startswith("cold, all_touched: load_file+willneed took 0.8× load_file and 1.5× torch.load")
        and "could not be decided" in line
        for line in lines
    )
    assert any(
        line.startswith("cold, all_touched: load_file+willneed took 0.8× load_file and 1.5× torch.load")
        and "narrowed" in line
        for line in six
    )
    assert any(
        "one-tensor left 12.5 % of the file resident (the tensor itself is 12.5 % of the file)" in line
        for line in lines
    )
    assert any(
        line.startswith("cold, module_populated, small_safetensors: meta + assign took 1.4×")
        for line in lines
    )
    for line in lines:
        assert line.startswith(("cold,", "warm,"))  # every figure names its cache state and stage
        assert any(stage in line for stage in section_mod.STAGES)
    for line in lines:
        assert line in md


@pytest.mark.heavy
def test_table_plot_and_workers_rendered(tmp_path):
    x, md = render(make_section(), tmp_path)
    assert (
        "| torch.load, big_pt | cold | loader_return | 0.600 s [0.540 s–0.720 s] "
        "| 0.1 % (262.14 KiB) | 200.00 MiB |" in md
    )
    assert "| load_file → module (assign), small_safetensors | warm | module_populated |" in md
    assert x["plot"] == "plots/load_stages.png" and (tmp_path / "plots/load_stages.png").stat().st_size > 1000
    assert "`device_placed` not run: torch.cuda.is_available() is False on this host." in md
    assert "| torch.load | 1 | 480.00 MiB | 400.00 MiB | 400.00 MiB | 80.00 MiB |" in md
    assert "PSS summed to 256.00 MiB more than the two mmap" in md and "1.0× the file's size" in md
    assert "whole machine" in md
    assert (
        "Not measured: one-tensor is measured cold only in the quick profile" in md
    )  # drop_caches is global, and the report says so
    assert "peak since it started" in md
    assert "took 1.100 s per process, median of 42" in md  # import time, outside every stage


def test_cold_unverified_is_flagged_and_never_cold(tmp_path):
    x, md = render(make_section(unverified=True), tmp_path)
    assert "1 cold run(s) found the file more than 1 % resident" in md
    flagged = [r for r in x["rows"] if r["flag"]]
    assert flagged and all(r["cache_state"] == "cold_unverified" for r in flagged)
    assert "| load_file, big_safetensors | cold_unverified ⚠ | all_touched | 0.100 s" in md
    # the cold cell's median is untouched by the unverified run
    cold = next(
        r
        for r in x["rows"]
        if r["what"] == "load_file, big_safetensors"
        and r["cache_state"] == "cold"
        and r["stage"] == "all_touched"
    )
    assert cold["time_s"]["median"] == pytest.approx(2.0) and cold["n"] == 3


@pytest.mark.parametrize("status", ["not_run", "failed"])
def test_not_run_and_failed_render(tmp_path, status):
    section = {
        "status": status,
        "reason": "Windows has no page cache control here",
        "error": "RuntimeError: boom",
    }
    if status == "not_run":
        del section["error"]
    else:
        del section["reason"]
    x, md = render(section, tmp_path)
    assert x == {"ok": False}
    assert (
        ("Not run on this host: Windows" in md)
        if status == "not_run"
        else ("failed: RuntimeError: boom" in md)
    )


def cold_section(times: dict[str, list[float]]) -> dict:
    """A section of cold all_touched samples of the big file, one per time of each method's list."""
    samples = []
    for method, ts in times.items():
        file = "big_pt" if method.startswith("torch.load") else "big_safetensors"
        samples += [sample(method, file, None, "cold", t / 2, t, rep) for rep, t in enumerate(ts)]
    return {"samples": samples, "cells": load.summarise(samples)}


SIX = (0.96, 0.98, 0.99, 1.01, 1.02, 1.04)  # six samples spread ±4 % around the median
# Eight: enough for one changed figure among a compare's ~60 to clear Benjamini–Hochberg (p = 2/C(16, 8))
EIGHT = (0.94, 0.96, 0.98, 0.99, 1.01, 1.02, 1.04, 1.06)


@pytest.mark.parametrize(
    ("willneed", "plain", "verdict"),
    [
        (1.0, 1.0, "no cold mmap gap to close here: load_file was within ±10 % of torch.load"),
        (1.0, 1.9, "the hint closed the cold mmap gap here (against torch.load: no change beyond ±10 %"),
        (
            1.45,
            1.9,
            "the hint narrowed the cold mmap gap here but did not close it (against load_file: changed",
        ),
        (1.9, 1.9, "the hint made no difference that these samples can show"),
    ],
)
def test_willneed_verdict_rests_on_the_statistics_module(willneed, plain, verdict):
    """Six samples a side: each verdict is the module's (exact Mann–Whitney, Hodges–Lehmann, ±10 %)."""

    section = cold_section(
        {
            "torch.load": [0.5 * k for k in SIX],
            "load_file": [0.5 * plain * k for k in SIX],
            "load_file+willneed": [0.5 * willneed * k for k in SIX],
        }
    )
    lines = load_sentences.explanations(section)
    assert any(verdict in line for line in lines), lines


def test_three_samples_a_side_leave_the_willneed_gap_undecided():
    section = cold_section({"torch.load": [0.4, 0.5, 0.6], "load_file": [0.9, 0.95, 1.0],
                            "load_file+willneed": [0.4, 0.41, 0.42]})  # fmt: skip
    line = next(x for x in load_sentences.explanations(section) if "load_file+willneed took" in x)
    assert "whether there was a cold mmap gap here could not be decided" in line
    assert "n = 3 a side cannot decide" in line


def _with_device(section: dict) -> dict:
    """device_placed ran on a CUDA stand-in record (no GPU here: numbers are made up, not measured)."""
    dev = {
        "status": "ok",
        "backend": "cuda",
        "torch_device": "cuda",
        "name": "NVIDIA GB10",
        "index": 0,
        "capability": "12.1",
        "total_memory_bytes": 128 << 30,
        "shares_memory_with_cpu": True,
        "shares_memory_source": "torch.cuda.get_device_properties().is_integrated",
        "checked": [{"backend": "cuda", "available": True, "reason": None}],
    }
    for i, s in enumerate(section["samples"]):
        s["device"] = dev
        s["process"]["device_init_s"] = 0.5 + 0.01 * i
        s["stages"]["device_placed"] = {
            "status": "ok",
            "time_s": 9.0,
            **snap(1.0, 500 * MIB),
            "backend": "cuda",
        }
        s["stage_order"] = list(s["stages"])
    section["cells"] = load.summarise(section["samples"])
    section["device_placed"] = {"status": "ok"}
    section["device"] = dev
    return section


def test_device_backend_memory_and_start_up_rendered(tmp_path):
    x, md = render(_with_device(make_section()), tmp_path)
    assert "`device_placed` used cuda on NVIDIA GB10 (128.00 GiB of device memory)" in md
    assert "it shares one memory with the CPU (torch.cuda.get_device_properties().is_integrated)" in md
    assert x["device"]["init_s"]["n"] == 42 and "ran before the clock started" in md
    assert "| torch.load, big_pt | cold | device_placed | 9.000 s" in md


def test_no_backend_reason_names_each_backend(tmp_path):
    section = make_section()
    reason = (
        "torch.cuda.is_available() is False (CPU-only build: torch.version.cuda is None); "
        "torch.backends.mps.is_available() is False (not macOS: Linux)"
    )
    section["device_placed"] = {"status": "not_run", "reason": reason}
    section["device"] = {"status": "not_run", "reason": reason, "checked": []}
    x, md = render(section, tmp_path)
    assert f"`device_placed` not run: {reason}." in md


def upgraded_from_2(section: dict) -> dict:
    """``section`` as disklab.stored reads it from a results-2 run (every update from 3 on)."""
    doc = {"file_kind": "results", "schema_version": 2, "host": "h", "experiments": {"load": section}}
    return stored.upgrade(doc, "results")["experiments"]["load"]


@pytest.mark.heavy
def test_user_model_rendered_ok_and_refused(tmp_path):
    """A user model from before its format and made file were recorded (results 2: pt_path)."""
    section = make_section()
    section["user_model"] = {
        "status": "ok",
        "setting": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "kind": "hf_repo",
        "shards": ["/hub/blobs/abc"],
        "size_bytes": 269060552,
        "config_json": "/hub/snapshots/r/config.json",
        "repo_id": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "revision": "12fd25f",
        "hub_cache": "/hub",
        "pt_path": "/wb/load/user.pt",
        "pt_size_bytes": 269100000,
        "module_populated": {
            "status": "not_run",
            "reason": "DecoderLM cannot hold this model: no config.json",
        },
        "timed_copies": ["/wb/load/cold_copies/abc"],
    }
    x, md = render(upgraded_from_2(section), tmp_path)
    assert "`HuggingFaceTB/SmolLM2-135M-Instruct` (hf_repo, revision 12fd25f from /hub)" in md
    assert "format found: safetensors" in md and "`user_pt` is a .pt (torch.save) made from it" in md
    assert "the copy in the workbench was timed, not your file: /wb/load/cold_copies/abc" in md
    assert "`module_populated` not run for it: DecoderLM cannot hold this model: no config.json." in md
    section["user_model"] = {
        "status": "not_run",
        "setting": "/m.safetensors",
        "reason": "/m.safetensors: holds no tensors",
    }
    x, md = render(section, tmp_path)
    assert "Not measured: /m.safetensors: holds no tensors. The rest of the lab ran as usual." in md


def _ceiling(median: float, lo: float, hi: float, parallel: tuple | None = None) -> dict:
    """A ceiling section; ``parallel`` (median, min, max) adds the parallel ceiling (4 x 4 MiB O_DIRECT),
    else it is a run upgraded from before the parallel ceiling."""
    out = {
        "status": "ok",
        "cold_mib_s": {"n": 3, "median": median, "min": lo, "max": hi},
        "warm_mib_s": {"n": 3, "median": 5000.0, "min": 4900.0, "max": 5100.0},
        "parallel": {"unavailable": stored.PARALLEL_NOT_IN_RUN},
    }
    if parallel:
        spread = dict(zip(("median", "min", "max"), parallel, strict=True), n=3)
        out["parallel"] = {"status": "ok", "streams": 4, "block_bytes": 4 << 20, "direct_io": "O_DIRECT",
                           "cold_mib_s": spread}  # fmt: skip
    return out


def test_each_cold_figure_carries_its_proof_and_its_share_of_the_cold_ceiling():
    section = make_section(unverified=True)
    results = {"experiments": {"load": section, "ceiling": _ceiling(512.0, 500.0, 520.0)}}
    proof_rows = load_residency.proof_rows(section, results)
    row = next(
        r for r in proof_rows["rows"] if r["what"] == "torch.load, big_pt" and r["cache_state"] == "cold"
    )
    assert row["device_read_bytes"] == SIZE and row["device_mib_s"] == pytest.approx(256.0)
    assert row["share"] == "50.0 %" and not row["below"]
    assert "residency ✓ 3/3" in row["proof"] and "device reads ✓ 3/3" in row["proof"]
    assert "major faults n/a" in row["proof"]  # torch.load reads with read(2)
    flagged = [r for r in proof_rows["rows"] if r["cache_state"] == "cold_unverified"]
    assert flagged and all(r["failed"] == ["residency"] for r in flagged)
    assert all(r["cache_state"] != "warm" for r in proof_rows["rows"])  # cold figures only
    below = load_residency.proof_rows(section, {"experiments": {"ceiling": _ceiling(100.0, 90.0, 110.0)}})
    assert any(r["below"] for r in below["rows"]) and below["below_any"]
    none = load_residency.proof_rows(section, {"experiments": {}})
    assert none["ceiling"]["cold"] is None and all(r["share"] == "n/a" for r in none["rows"])


def test_a_load_that_beat_one_stream_but_not_the_parallel_read_left_bandwidth_unused(tmp_path):
    section = make_section()
    results = {"experiments": {"ceiling": _ceiling(200.0, 190.0, 210.0, (512.0, 500.0, 520.0))}}
    rows = load_residency.proof_rows(section, results)
    row = next(r for r in rows["rows"] if r["what"] == "torch.load, big_pt" and r["cache_state"] == "cold")
    assert row["share"] == "128.0 %" and row["share_parallel"] == "50.0 %"
    # faster than one stream, slower than the parallel read: not a cache below (old rule: one ceiling);
    # the one-tensor cell's 5 GiB/s beats both
    assert not row["below"] and [r["what"] for r in rows["rows"] if r["below"]] == [
        "one-tensor, big_safetensors"
    ]
    assert "this load left about 50.0 % of the bandwidth the storage showed it has unused" in row["reading"]
    assert {"what": "torch.load, big_pt", "reading": row["reading"]} in rows["unused"]
    x = section_mod.build(section, results, tmp_path)
    md = report.environment().get_template("sections/load.md.j2").render(section=section, view=x, results={})
    # the report's own environment (trim_blocks): the two ceilings' sentences, one paragraph, then the table
    assert (
        "(median of 3, 190 MiB/s–210 MiB/s).\nIts parallel cold ceiling (the same file after eviction, " in md
    )
    assert "4 streams of 4.00 MiB O_DIRECT reads" in md and "–520 MiB/s).\n\n| load (all_touched) |" in md
    assert "| 256 MiB/s | 256 MiB/s | 128.0 % | 50.0 % |" in md
    assert "- torch.load, big_pt beat one stream but not the parallel read: faster than one buffered" in md
    assert "faster than both of this host's own cold ceilings: a cache below" in md  # the one-tensor cell
    at = rows["ceiling"]
    assert evidence.ceiling_reading(600.0, at).startswith("at or above the parallel read")
    assert "slower than both" in evidence.ceiling_reading(100.0, at)
    assert evidence.ceiling_reading(100.0, {**at, "parallel": None}) is None
    alone = load_residency.proof_rows(section, {"experiments": {"ceiling": _ceiling(200.0, 190.0, 210.0)}})
    assert alone["ceiling"]["parallel_why"] == "this run's ceiling step predates the parallel ceiling"
    assert all(r["share_parallel"] == "n/a" for r in alone["rows"]) and alone["unused"] == []


def test_the_rendered_table_says_a_cache_below_served_bytes_faster_than_the_ceiling(tmp_path):
    section = make_section()
    x = section_mod.build(section, {"experiments": {"ceiling": _ceiling(100.0, 90.0, 110.0)}}, tmp_path)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined)
    env.filters.update(FILTERS)
    env.filters.update(markup.FILTERS)  # the report's escaping (disklab.report.environment)
    md = env.get_template("sections/load.md.j2").render(section=section, view=x, results={})
    assert "cache below this OS" in md and "This run's single-stream cold ceiling" in md
    assert "No parallel cold ceiling in this run (this run's ceiling step predates" in md
    assert "faster than this host's own cold ceiling: a cache below" in md
    assert "| torch.load, big_pt | cold | 1.000 s | 256.00 MiB | 256.00 MiB | 256 MiB/s |" in md


def test_a_user_models_device_placed_refusal_is_rendered(tmp_path):
    """The user-model part says when its tensors could not be placed (e.g. MPS has no float64)."""
    section = make_section()
    section["user_model"] = {
        "status": "ok", "setting": "/m.safetensors", "kind": "file", "format": "safetensors",
        "shards": ["/m.safetensors"], "size_bytes": 1024,
        "made": {"status": "ok", "file": "user_pt", "path": "/wb/load/user.pt", "size_bytes": 1100},
        "module_populated": {"status": "ok"}, "timed_copies": [], "first_response": {"status": "ok"},
        "device_placed": {"status": "not_run", "reason": "MPS has no float64: tensor lm_head.weight is F64"},
    }  # fmt: skip
    x, md = render(section, tmp_path)
    assert "`device_placed` not run for it: MPS has no float64: tensor lm_head.weight is F64." in md


@pytest.mark.parametrize(
    ("hint", "said"),
    [
        ("madvise(MADV_WILLNEED) on a ctypes mmap", "not CPython's mmap.mmap, which on macOS also calls"),
        ("madvise(MADV_WILLNEED)", "inside the timed load, so this figure includes one"),
        ("posix_fadvise(POSIX_FADV_WILLNEED)", "posix_fadvise(2) POSIX_FADV_WILLNEED over the whole file"),
    ],
)
def test_the_report_says_how_the_willneed_hint_was_given(hint, said, tmp_path):
    section = make_section()
    for s in section["samples"]:
        if s["method"] == "load_file+willneed":
            s["hint"] = hint
    x, md = render(section, tmp_path)
    assert f"load_file+willneed gave its hint inside the timed load, with `{hint}`: " in md and said in md


@pytest.mark.heavy
def test_a_user_checkpoint_names_its_format_copy_key_and_cells_not_run(tmp_path):
    """A legacy ckpt.pt: the block names the format, the safetensors copy, the key and the mmap refusal."""
    section = make_section()
    refusal = "/m/ckpt.pt is a legacy (pre-1.6) torch.save file, and PyTorch refuses mmap there: torch 2.13.0 raised RuntimeError: mmap can only be used with files saved with ..."  # noqa: E501
    section["user_model"] = {
        "status": "ok", "setting": "/m/ckpt.pt", "kind": "file", "format": "legacy", "shards": ["/m/ckpt.pt"],
        "size_bytes": 2048, "state_key": "model",
        "made": {"status": "ok", "file": "user_safetensors", "path": "/wb/load/user.safetensors",
                 "size_bytes": 1024},
        "weights_note": "the weights are the state dict under the checkpoint's key 'model'",
        "cells_not_run": [{"file": "user_pt", "method": "torch.load-mmap", "reason": refusal}],
        "module_populated": {"status": "ok"}, "timed_copies": [], "device_placed": {"status": "ok"},
        "first_response": {"status": "ok"},
    }  # fmt: skip
    x, md = render(section, tmp_path)
    assert "format found: torch.save's legacy pickle format (before torch 1.6); 1 file(s), 2.00 KiB" in md
    assert (
        "(rows `user_pt`); `user_safetensors` is a .safetensors of its state dict alone made from it in "
        in md
    )
    assert "the workbench (/wb/load/user.safetensors, 1.00 KiB)" in md
    assert "In the checkpoint, the weights are the state dict under the checkpoint's key 'model'." in md
    assert f"`torch.load-mmap` on `user_pt` not run: {refusal}\n" in md  # torch's own full stop, no second
    assert "Every `user_pt` row timed your own file: /m/ckpt.pt." in md
    section["user_model"].update(
        format="zip", shards=["/m/a.bin", "/m/b.bin"], cells_not_run=[],
        made={"status": "not_run", "reason": "user.safetensors could not be made: RuntimeError: shared"},
    )  # fmt: skip
    x, md = render(section, tmp_path)
    assert "format found: sharded .bin, 2 files, in torch.save's zip format (torch 1.6 and later)" in md
    assert "no file in the other format was made from it: user.safetensors could not be made: Runtime" in md


def _loader_sample(method, file, state, lr, at, rep, page_cache, warm_device_bytes=0):
    """A production loader's sample (loadlab.loaders): its loader record and read path; proof recomputed."""
    from disklab_host.loadlab import loaders

    s = sample(method, file, None, state, lr, at, rep)
    s["process"]["loader_import_s"] = 0.02
    s["loader"] = {
        "name": method,
        "version": "1.0",
        "knobs": loaders.resolve_knobs(method, {"concurrency": 4}),
    }
    how = "io_uring_direct: O_DIRECT reads" if page_cache == "bypassed" else "read(2) through the page cache"
    s["read_path"] = {"mapping": False, "page_cache": page_cache, "how": how, "source": "its own log"}
    if state == "cold" and page_cache == "bypassed":  # O_DIRECT leaves the page cache as it was
        for st in ("loader_return", "all_touched"):
            s["stages"][st].update(resident_fraction=0.0, resident_bytes=0)
    if state == "warm":
        s["stages"]["all_touched"]["io"]["device"]["read_bytes"] = warm_device_bytes
    s["cache_proof"] = proof.cache_proof(s, s["cache_state_requested"])
    s["cache_state"] = proof.CACHE_STATE[s["cache_proof"]["verdict"]]
    return s


def _with_loaders(section: dict) -> dict:
    from disklab_host.loadlab import loaders

    extra = []
    for rep, scale in enumerate((0.9, 1.0, 1.2)):
        extra.append(
            _loader_sample(
                "model_streamer", "big_safetensors", "cold", 0.5 * scale, 0.8 * scale, rep, "bypassed"
            )
        )
        extra.append(
            _loader_sample("model_streamer", "big_safetensors", "warm", 0.4, 0.6, rep, "bypassed", SIZE)
        )
        extra.append(
            _loader_sample("tensorizer", "big_tensors", "cold", 0.7 * scale, 1.1 * scale, rep, "used")
        )
        extra.append(_loader_sample("tensorizer", "big_tensors", "warm", 0.1, 0.3, rep, "used"))
    samples = section["samples"] + extra
    statuses = {
        "model_streamer": {"status": "ok", "version": "0.17.1"},
        "tensorizer": {"status": "ok", "version": "2.12.1"},
        "fastsafetensors": {
            "status": "not_run",
            "reason": "pip could not install it: ERROR: no | wheel <here>",
        },
        "instanttensor": {"status": "not_run", "reason": "needs CUDA: torch.cuda.is_available() is False"},
    }
    names = ["model_streamer", "fastsafetensors", "instanttensor", "tensorizer"]
    summary = loaders.summary(names, {"model_streamer": {"concurrency": 4}}, statuses)
    files = {
        **section["files"],
        "big_tensors": {"path": "/wb/load/big.tensors", "size_bytes": SIZE + 262_319, "format": "tensorizer"},
    }
    return {
        **section,
        "files": files,
        "samples": samples,
        "cells": load.summarise(samples),
        "loaders": load.loaders_section(summary, samples),
        "n_warm_unverified": sum(s["cache_state"] == "warm_unverified" for s in samples),
    }


@pytest.mark.heavy
def test_production_loaders_rendered_beside_the_others_with_knobs_proof_and_reasons(tmp_path):
    section = _with_loaders(make_section())
    x, md = render(section, tmp_path)
    # the generic table: each loader's rows at every stage, cold and warm, beside torch.load's
    assert (
        "| model_streamer, big_safetensors | cold | all_touched | 0.800 s [0.720 s–0.960 s] | 0.0 % (0 B) † |"
        in md
    )
    assert "| model_streamer, big_safetensors | warm_unverified ⚠ | loader_return |" in md
    assert "| tensorizer, big_tensors | warm | all_touched | 0.300 s" in md
    assert "† This loader's reads bypassed the page cache (O_DIRECT)" in md
    assert (
        "3 warm run(s) of model_streamer are warm_unverified, never warm: these loaders read with O_DIRECT"
        in md
    )
    assert "and the device delivered the file's bytes during the load; on this workbench" in md
    # computed comparisons at the same stage and state
    assert (
        "- cold, all_touched: tensorizer took 0.6× load_file here (1.100 s against 2.000 s, medians; " in md
    )
    # the block: version, knobs and their source, not_run reasons escaped, tensorizer's file, proof
    assert "**Run:ai Model Streamer** (`model_streamer`): installed 0.17.1." in md
    assert "| concurrency | 4 | inventory | `RUNAI_STREAMER_CONCURRENCY` |" in md
    assert "| chunk_bytesize | 2097152 | default | `RUNAI_STREAMER_CHUNK_BYTESIZE` |" in md
    assert (
        "| num_readers | dynamic: 8 for a local file, at most one per tensor | default | call argument |"
        in md
    )
    assert "(`fastsafetensors`): not run: pip could not install it: ERROR: no \\| wheel &lt;here&gt;." in md
    assert "(`instanttensor`): not run: needs CUDA: torch.cuda.is_available() is False." in md
    assert "GPU: it needs a GPU, and its GPU path was not run on real hardware here." in md
    assert "`big_tensors` 256.25 MiB (/wb/load/big.tensors)" in md
    streamer = next(lo for lo in x["loaders"]["loaders"] if lo["name"] == "model_streamer")
    assert "major faults: not applicable" in streamer["proof"][0]
    assert any("residency after the call: meaningless here" in p for p in streamer["proof"])
    assert any("it did not in 3/3 warm samples" in p for p in streamer["proof"])
    tz = next(lo for lo in x["loaders"]["loaders"] if lo["name"] == "tensorizer")
    assert "residency after the call: meaningful (its reads go through the page cache)" in tz["proof"]


def test_a_section_without_loaders_renders_no_loader_block(tmp_path):
    x, md = render(make_section(), tmp_path)
    assert x["loaders"] is None and "Production loaders" not in md and "†" not in md


def test_a_proof_part_that_failed_says_in_how_many_samples():
    mib = 1 << 20
    failed = {"status": "fail", "device_read_bytes": 0, "touched_bytes": mib}
    parts = [failed, failed, {"status": "pass", "device_read_bytes": mib, "touched_bytes": mib}]
    text = load_residency.part_text("device_reads", parts)
    assert text == "device reads ✗ failed in 2 of 3, min 0 B for 1.00 MiB touched", text
    assert (
        load_residency.part_text("device_reads", parts[2:])
        == "device reads ✓ 1/1, min 1.00 MiB for 1.00 MiB touched"
    )
