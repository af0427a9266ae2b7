"""Report sections of the write path: schema, build() and template, from real tiny runs.

Sections come from running the lab steps on the real filesystem. Hand-made
sections are used only for what cannot happen here: a macOS run (F_FULLFSYNC
supported, no fdatasync) and a volume that refuses F_FULLFSYNC. big_write's
macOS section is a real run of the step's Darwin path on Linux, with a test
double for fcntl whose F_FULLFSYNC is a real os.fsync.
"""

from __future__ import annotations

import copy
import errno
import importlib
import json
import os
import tempfile
from pathlib import Path

import jinja2
import pytest
from jsonschema import Draft202012Validator

from disklab import answers, markup, schemas, stored
from disklab.units import FILTERS, ibytes, ns, ratio, secs, us
from disklab_host.steps import big_write, fsync_bench, write_buffering

REPO = Path(__file__).resolve().parent.parent

NAMES = ["write_buffering", "fsync_bench", "big_write"]
SCHEMA_DIR = REPO / "src" / "disklab" / "schema" / "experiments"


def _validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    return schemas.validator(schema)


def _render(name: str, section: dict, plot_dir: Path, results: dict | None = None) -> tuple[dict, str]:
    results = results or {"host": "h1"}
    x = importlib.import_module(f"disklab.sections.{name}").build(section, results, plot_dir)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(REPO / "src" / "disklab" / "templates")),
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(FILTERS)
    env.filters.update(markup.FILTERS)  # the report's escaping (disklab.report.environment)
    text = env.get_template(f"sections/{name}.md.j2").render(section=section, view=x, results=results)
    return x, text


@pytest.fixture(scope="module")
def sections(tmp_path_factory) -> dict:
    """One real tiny run of each step, with the runner's step_wall_s added."""
    wd = tmp_path_factory.mktemp("wb")
    sizes = {"write_buffering_calls": 5000, "fsync_blocks": 20, "fsync_block_bytes": 4096, "big_write_mib": 1}
    cfg = {"sizes": sizes, "system": "Linux"}
    out = {m.__name__.rsplit(".", 1)[-1]: m.run(cfg, wd) for m in (write_buffering, fsync_bench, big_write)}
    for s in out.values():
        s["step_wall_s"] = 0.5
    return out


def _scaled(mode: dict, call: str, factor: int, command: int) -> dict:
    """A copy of a real mode's figures, ``factor`` times slower, as an fcntl mode records them."""
    m = copy.deepcopy(mode)
    m["call"] = call
    m["samples_ns"] = [v * factor for v in m["samples_ns"]]
    m["latency"] = {k: v if k == "n" else v * factor for k, v in m["latency"].items()}
    m["fcntl_command"] = command
    m["fcntl_command_source"] = (
        "fcntl.F_FULLFSYNC" if command == 51 else "85, its value in macOS <sys/fcntl.h>"
    )
    m["fallback"] = None
    m["validation"] = fsync_bench.NOT_ON_REAL_HARDWARE
    return m


@pytest.fixture
def darwin_fsync(sections) -> dict:
    """A macOS-shaped section (we cannot run macOS here): F_FULLFSYNC 20× fsync, F_BARRIERFSYNC 3×."""
    s = copy.deepcopy(sections["fsync_bench"])
    s["system"] = "Darwin"
    s["modes"]["fdatasync"] = {"status": "unsupported", "reason": "os has no fdatasync on Darwin"}
    s["modes"]["f_fullfsync"] = _scaled(s["modes"]["fsync"], "fcntl F_FULLFSYNC", 20, 51)
    s["modes"]["f_barrierfsync"] = _scaled(s["modes"]["fsync"], "fcntl F_BARRIERFSYNC", 3, 85)
    return s


@pytest.mark.parametrize("name", NAMES)
def test_real_section_validates(sections, name):
    errors = list(_validator(name).iter_errors(sections[name]))
    assert errors == []


@pytest.mark.parametrize("name", NAMES)
def test_schema_rejects_a_section_missing_its_samples(sections, name):
    broken = copy.deepcopy(sections[name])
    if name == "write_buffering":
        del broken["modes"]["buffered"]["per_call_samples_ns"]
    elif name == "fsync_bench":
        del broken["modes"]["fsync"]["samples_ns"]
    else:
        del broken["fsync_samples_s"]
    assert list(_validator(name).iter_errors(broken))


def test_schema_rejects_unsupported_mode_without_reason(sections):
    broken = copy.deepcopy(sections["fsync_bench"])
    broken["modes"]["f_fullfsync"] = {"status": "unsupported"}
    assert list(_validator("fsync_bench").iter_errors(broken))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "section",
    [
        {"status": "not_run", "reason": "workbench is read-only", "step_wall_s": 0.0},
        {"status": "failed", "error": "OSError: [Errno 28] No space left on device", "traceback": "..."},
    ],
)
def test_not_run_and_failed_validate_and_render(tmp_path, name, section):
    assert list(_validator(name).iter_errors(section)) == []
    x, text = _render(name, section, tmp_path / "plots")
    assert x["ok"] is False
    assert (section.get("reason") or section["error"]) in text
    assert not (tmp_path / "plots").exists()


def test_write_buffering_report_shows_the_host_numbers(sections, tmp_path):
    s = sections["write_buffering"]
    x, text = _render("write_buffering", s, tmp_path)
    unbuf = s["modes"]["unbuffered"]["per_call_ns"]["median"]
    buf = s["modes"]["buffered"]["per_call_ns"]["median"]
    assert x["ratio"] == pytest.approx(unbuf / buf)
    assert ns(unbuf) in text and ns(buf) in text
    # The sentence follows this run's medians: on a machine busy enough to turn
    # them around the report says so (both wordings are checked below on set figures).
    if unbuf > buf:
        assert f"costs {ratio(unbuf / buf)} a buffered f.write here" in text
        assert "syscall boundary" in text
    else:
        assert "The buffered f.write was not cheaper than os.write here" in text
    assert ibytes(s["buffer"]["observed_buffer_bytes"]) in text


@pytest.mark.parametrize(("unbuf", "buf"), [(900.0, 60.0), (60.0, 900.0)])
def test_write_buffering_report_says_which_was_cheaper(sections, tmp_path, unbuf, buf):
    s = copy.deepcopy(sections["write_buffering"])
    s["modes"]["unbuffered"]["per_call_ns"]["median"] = unbuf
    s["modes"]["buffered"]["per_call_ns"]["median"] = buf
    x, text = _render("write_buffering", s, tmp_path)
    assert x["ratio"] == pytest.approx(unbuf / buf)
    cheaper = "costs 15.0× a buffered f.write here (900 ns against 60 ns per call, medians)"
    inverted = "The buffered f.write was not cheaper than os.write here (900 ns against 60 ns per call)"
    assert (cheaper in text, inverted in text) == ((True, False) if unbuf > buf else (False, True))


def test_fsync_report_shows_ratios_percentiles_and_na(sections, tmp_path):
    s = sections["fsync_bench"]
    x, text = _render("fsync_bench", s, tmp_path / "plots")
    none = s["modes"]["none"]["latency"]["p50_us"]
    fs = s["modes"]["fsync"]["latency"]
    assert f"fsync p50 is {ratio(fs['p50_us'] / none)} a plain write here" in text
    for key in ("min_us", "p50_us", "p90_us", "p99_us", "max_us"):
        assert us(fs[key]) in text
    assert "| f_fullfsync | n/a (fcntl has no F_FULLFSYNC on Linux: it is a macOS call) |" in text
    assert [r["mode"] for r in x["rows"]] == s["mode_order"]
    assert x["plot"] == "plots/fsync_bench_latency.png"
    assert (tmp_path / "plots" / "fsync_bench_latency.png").stat().st_size > 0
    assert f"1 GiB checkpoint take about {secs((1 << 30) / 4096 * fs['p50_us'] / 1e6)}" in text


def test_fsync_report_on_tmpfs_says_fsync_is_nearly_free(tmp_path):
    # real run on /dev/shm (tmpfs): fsync has nothing to flush there
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm on this host")
    wd = Path(tempfile.mkdtemp(dir=shm))
    try:
        s = fsync_bench.run({"sizes": {"fsync_blocks": 200, "fsync_block_bytes": 4096}}, wd)
    finally:
        wd.rmdir()
    x, text = _render("fsync_bench", s, tmp_path / "plots")
    assert "may never reach stable storage" in text


def test_darwin_section_explains_f_fullfsync(darwin_fsync, tmp_path):
    assert list(_validator("fsync_bench").iter_errors(darwin_fsync)) == []
    x, text = _render("fsync_bench", darwin_fsync, tmp_path / "plots")
    assert "F_FULLFSYNC p50 is 20.0× fsync's here" in text
    assert "| fdatasync | n/a (os has no fdatasync on Darwin) |" in text
    assert "f_fullfsync p50 is" in text  # the class is judged on F_FULLFSYNC on a Mac


def test_darwin_section_says_what_fsync_means_and_which_call_is_durable(darwin_fsync, tmp_path):
    x, text = _render("fsync_bench", darwin_fsync, tmp_path / "plots")
    assert (
        "**What plain fsync means on Darwin:** fsync sends the data to the drive but stops at the "
        "drive's cache" in text
    )
    assert "only F_FULLFSYNC asks the drive to flush it to flash" in text
    assert (
        "The durable call here is `F_FULLFSYNC`; `F_BARRIERFSYNC` orders writes without making them durable."
        in text
    )
    assert x["os"]["durable_mode"] == "f_fullfsync" and x["os"]["durable_measured"] is True


def test_darwin_barrier_ratios_come_from_this_hosts_numbers(darwin_fsync, tmp_path):
    m = darwin_fsync["modes"]
    m["f_barrierfsync"]["latency"]["p50_us"] = m["fsync"]["latency"]["p50_us"] * 2.5
    plain, barrier, full = (m[k]["latency"]["p50_us"] for k in ("fsync", "f_barrierfsync", "f_fullfsync"))
    x, text = _render("fsync_bench", darwin_fsync, tmp_path / "plots")
    assert (
        f"F_BARRIERFSYNC p50 is {ratio(barrier / plain)} fsync's here, and F_FULLFSYNC's is "
        f"{ratio(full / barrier)} F_BARRIERFSYNC's" in text
    )
    assert ratio(barrier / plain) == "2.5×"
    row = next(r for r in x["rows"] if r["mode"] == "f_barrierfsync")
    assert (
        f"| f_barrierfsync | fcntl F_BARRIERFSYNC | {row['latency']['n']} | {us(row['latency']['min_us'])} |"
        in text
    )
    assert "orders a save but does not make it durable" in text


def test_modes_not_run_on_real_hardware_say_so(darwin_fsync, tmp_path):
    _, text = _render("fsync_bench", darwin_fsync, tmp_path / "plots")
    for mode in ("f_fullfsync", "f_barrierfsync"):
        assert f"\n- {mode}: not yet validated on real macOS hardware: before this run" in text


def test_linux_section_says_fsync_is_the_durable_call(sections, tmp_path):
    s = sections["fsync_bench"]
    x, text = _render("fsync_bench", s, tmp_path / "plots")
    assert "**What plain fsync means on Linux:** fsync writes the file's dirty pages to the drive" in text
    assert "sends the drive a cache flush" in text
    assert "The durable call here is `fsync`." in text
    assert "| f_barrierfsync | n/a (fcntl has no F_BARRIERFSYNC on Linux" in text
    assert "F_FULLFSYNC p50 is" not in text and "not yet validated" not in text
    plain, fdatasync = (s["modes"][k]["latency"]["p50_us"] for k in ("fsync", "fdatasync"))
    assert f"fdatasync p50 is {ratio(fdatasync / plain)} fsync's here" in text


def test_meaning_follows_the_sections_system_field(sections, tmp_path):
    s = copy.deepcopy(sections["fsync_bench"])
    s["system"] = "Darwin"  # the same numbers, judged as a Mac's: fsync is no longer the durable call
    x, text = _render("fsync_bench", s, tmp_path / "plots")
    assert "The durable call here is `F_FULLFSYNC`" in text
    assert "(f_fullfsync has no figures of its own in this run)" in text
    assert (
        "F_FULLFSYNC could not be measured on this volume" in text
        and "no sync measured here is durable" in text
    )
    s["system"] = "Plan9"
    x, text = _render("fsync_bench", s, tmp_path / "plots")
    assert "disklab does not know what fsync promises on Plan9" in text


def test_an_error_fallback_is_not_called_a_refusal(darwin_fsync, tmp_path):
    s = darwin_fsync
    s["modes"]["f_fullfsync"]["fallback"] = {
        "to": "os.fsync",
        "errno": "EIO",
        "error": "[Errno 5] Input/output error",
        "after_calls": 7,
        "kind": "error",
    }
    assert list(_validator("fsync_bench").iter_errors(s)) == []
    x, text = _render("fsync_bench", s, tmp_path / "plots")
    assert "F_FULLFSYNC failed with EIO ([Errno 5] Input/output error) after 7 calls, not one of" in text
    assert "EIO is an I/O error: the workbench's device may be failing" in text
    assert "refused" not in text
    assert "F_FULLFSYNC could not be measured on this volume" in text
    assert x["os"]["figures_mode"] == "fsync"


def test_section_from_before_f_barrierfsync_still_validates_and_renders(darwin_fsync, tmp_path):
    s = copy.deepcopy(darwin_fsync)
    del s["modes"]["f_barrierfsync"]
    s["mode_order"] = [m for m in s["mode_order"] if m != "f_barrierfsync"]
    for mode in s["modes"].values():
        for key in ("fcntl_command", "fcntl_command_source", "validation"):
            mode.pop(key, None)
    s["modes"]["f_fullfsync"]["fallback"] = {
        "to": "os.fsync",
        "errno": "ENOTTY",
        "error": "e",
        "after_calls": 0,
    }
    assert list(_validator("fsync_bench").iter_errors(s)) == []
    x, text = _render("fsync_bench", s, tmp_path / "plots")
    assert "F_FULLFSYNC was refused with ENOTTY after 0 calls" in text  # no kind: an old refusal
    assert "| f_barrierfsync |" not in text and "F_BARRIERFSYNC p50" not in text
    assert (
        "`F_BARRIERFSYNC` orders writes without making them durable (f_barrierfsync was not measured" in text
    )


@pytest.mark.parametrize(
    "breakage",
    [
        lambda s: s["modes"].update(f_magicsync=s["modes"]["fsync"]),
        lambda s: s["modes"]["f_fullfsync"].update(fallback={**FALLBACK, "kind": "maybe"}),
        lambda s: s["modes"]["f_barrierfsync"].update(fcntl_command="85"),
    ],
)
def test_schema_rejects_bad_fcntl_mode_fields(darwin_fsync, breakage):
    assert list(_validator("fsync_bench").iter_errors(darwin_fsync)) == []
    breakage(darwin_fsync)
    assert list(_validator("fsync_bench").iter_errors(darwin_fsync))


FALLBACK = {"to": "os.fsync", "errno": "ENOTTY", "error": "e", "after_calls": 0, "kind": "refusal"}


def test_fallback_is_reported(darwin_fsync, tmp_path):
    s = darwin_fsync
    s["modes"]["f_fullfsync"]["fallback"] = {
        "to": "os.fsync",
        "errno": "ENOTTY",
        "error": "[Errno 25] Inappropriate ioctl for device",
        "after_calls": 0,
        "kind": "refusal",
    }
    assert list(_validator("fsync_bench").iter_errors(s)) == []
    x, text = _render("fsync_bench", s, tmp_path / "plots")
    assert "(fell back to os.fsync: ENOTTY)" in text
    assert "refused with ENOTTY after 0 calls" in text
    assert "F_FULLFSYNC p50 is" not in text  # a fallback's numbers are fsync's, not F_FULLFSYNC's


def test_big_write_report_splits_write_and_fsync(sections, tmp_path):
    s = sections["big_write"]
    x, text = _render("big_write", s, tmp_path)
    shares = sorted(f / (w + f) for w, f in zip(s["write_samples_s"], s["fsync_samples_s"], strict=True))
    assert x["fsync_share"] == pytest.approx(shares[len(shares) // 2])
    assert len(x["repeats"]) == s["repeats"]
    assert f"took {secs(s['fsync_s']['median'])} of" in text
    assert ibytes(s["size_bytes"]) in text
    assert text.count("\n| ") >= s["repeats"] + 3


@pytest.mark.parametrize(
    ("write_s", "fsync_s", "phrase"),
    [(1.0, 0.05, "writeback had already pushed most of it out"), (0.1, 0.9, "still dirty in the page cache")],
)
def test_big_write_meaning_follows_the_split(sections, tmp_path, write_s, fsync_s, phrase):
    s = copy.deepcopy(sections["big_write"])
    s["write_samples_s"] = [write_s] * s["repeats"]
    s["fsync_samples_s"] = [fsync_s] * s["repeats"]
    s["write_s"] = {"n": s["repeats"], "median": write_s, "min": write_s, "max": write_s}
    s["fsync_s"] = {"n": s["repeats"], "median": fsync_s, "min": fsync_s, "max": fsync_s}
    _, text = _render("big_write", s, tmp_path)
    assert phrase in text


def test_report_names_the_same_refusal_errnos_as_the_step():
    from disklab.sections import fsync_bench as section

    assert {getattr(errno, name) for name in section.REFUSALS} == fsync_bench.REFUSAL_ERRNOS


# big_write's durable call


class _SyncingFcntl:
    """fcntl for macOS whose F_FULLFSYNC is a real os.fsync (we cannot run macOS here)."""

    F_FULLFSYNC = 51

    def fcntl(self, fd, cmd):
        assert cmd == self.F_FULLFSYNC
        os.fsync(fd)
        return 0


@pytest.fixture(scope="module")
def darwin_big_write(tmp_path_factory) -> dict:
    """A real run of big_write's Darwin path: plain fsync, then F_FULLFSYNC through the test double."""
    wd = tmp_path_factory.mktemp("bw_darwin")
    s = big_write.run({"sizes": {"big_write_mib": 1}, "system": "Darwin"}, wd, fcntl_mod=_SyncingFcntl())
    s["step_wall_s"] = 0.5
    return s


@pytest.fixture
def darwin_bw(darwin_big_write) -> dict:
    return copy.deepcopy(darwin_big_write)


def test_darwin_big_write_validates_and_needs_its_plain_fsync_samples(darwin_bw):
    assert list(_validator("big_write").iter_errors(darwin_bw)) == []
    for key in ("plain_fsync_samples_s", "validation", "fallback"):
        broken = copy.deepcopy(darwin_bw)
        del broken[key]
        assert list(_validator("big_write").iter_errors(broken)), key
    for key, bad in (("durable_call", "fcntl F_MAGICSYNC"), ("plain_fsync_durable", True)):
        assert list(_validator("big_write").iter_errors({**darwin_bw, key: bad})), key


def test_darwin_big_write_report_names_f_fullfsync_and_says_plain_fsync_is_not_durable(darwin_bw, tmp_path):
    s = darwin_bw
    x, text = _render("big_write", s, tmp_path)
    assert "then plain fsync, then F_FULLFSYNC;" in text
    assert (
        "**The durable call on Darwin:** `F_FULLFSYNC` (`fcntl(fd, F_FULLFSYNC)`), run after a plain fsync"
        in text
    )
    assert "plain fsync on macOS stops at the drive's cache" in text
    assert "so plain fsync's figure below is not durable" in text
    assert "| repeat | write | plain fsync (not durable) | F_FULLFSYNC | total |" in text
    p_med, f_med = s["plain_fsync_s"]["median"], s["fsync_s"]["median"]
    assert f"| plain fsync (not durable) | {secs(p_med)} |" in text
    assert f"| F_FULLFSYNC | {secs(f_med)} |" in text
    assert (
        f"Plain fsync after the 1.00 MiB write took {secs(p_med)}, and F_FULLFSYNC after it {secs(f_med)}"
        in text
    )
    assert f"plain fsync's {secs(p_med)} is not a durable figure" in text
    assert "Counting both syncs, the data became durable at" in text
    # the macOS path ran only against a test double: the report says so
    assert "\n- F_FULLFSYNC: not yet validated on real macOS hardware: before this run" in text
    assert x["durable"]["call"] == "F_FULLFSYNC" and x["durable"]["durable"] is True
    mib = s["size_bytes"] / (1 << 20)
    for r, w, p, f in zip(
        x["repeats"], s["write_samples_s"], s["plain_fsync_samples_s"], s["fsync_samples_s"], strict=True
    ):
        assert r["plain_fsync_s"] == p and r["fsync_s"] == f
        assert r["durable_mib_s"] == pytest.approx(mib / (w + p + f))  # durable once F_FULLFSYNC returns


def test_darwin_big_write_fallback_gives_no_durable_rate(darwin_bw, tmp_path):
    s = darwin_bw
    s["fallback"] = {"to": "os.fsync", "errno": "ENOTTY", "error": "e", "after_calls": 0, "kind": "refusal"}
    assert list(_validator("big_write").iter_errors(s)) == []
    x, text = _render("big_write", s, tmp_path)
    assert "F_FULLFSYNC was refused with ENOTTY after 0 calls on this volume" in text
    assert "the F_FULLFSYNC column holds os.fsync's time" in text
    assert "so this report gives no durable rate" in text
    assert "became durable" not in text and "is not a durable figure" not in text
    assert all(r["durable_mib_s"] is None for r in x["repeats"])


def test_linux_big_write_report_names_fsync_as_the_durable_call(sections, tmp_path):
    x, text = _render("big_write", sections["big_write"], tmp_path)
    assert "**The durable call on Linux:** `fsync`: fsync(2) writes the file's dirty pages" in text
    assert "| repeat | write | fsync | total | fsync share | write rate | durable rate |" in text
    assert "plain fsync" not in text and "F_FULLFSYNC" not in text and "not yet validated" not in text
    assert "Counting the fsync, the data became durable at" in text
    assert all(r["durable_mib_s"] is not None and r["plain_fsync_s"] is None for r in x["repeats"])


def _from_before_durable_call(section: dict) -> dict:
    old = copy.deepcopy(section)
    for key in ("system", "durable_call"):
        del old[key]
    return old


def _upgraded_from_3(section: dict, facts: dict | None) -> dict:
    """A results-3 run holding ``section`` as big_write (and ``facts``), as disklab.stored upgrades it."""
    doc = {"file_kind": "results", "schema_version": 3, "host": "h1", "experiments": {"big_write": section}}
    return stored.upgrade({**doc, "facts": facts} if facts else doc, "results")


def test_big_write_from_before_the_durable_call_is_upgraded_and_renders(sections, tmp_path):
    old = _from_before_durable_call(sections["big_write"])
    linux = _upgraded_from_3(old, {"host": {"system": "Linux"}})
    upgraded = linux["experiments"]["big_write"]
    assert list(_validator("big_write").iter_errors(upgraded)) == []
    assert upgraded["system"] == "Linux"  # the facts' host, where the step ran
    assert upgraded["durable_call"] == "fsync" and upgraded["durable_call_unrecorded"]
    x, text = _render("big_write", linux["experiments"]["big_write"], tmp_path, linux)
    assert "**The durable call on Linux:** `fsync`" in text
    assert "(a run from before disklab recorded the durable call, when fsync was the only sync timed)" in text
    assert "Counting the fsync, the data became durable at" in text
    bare = _upgraded_from_3(_from_before_durable_call(sections["big_write"]), None)  # no facts at all
    assert "system" not in bare["experiments"]["big_write"]
    x, text = _render("big_write", bare["experiments"]["big_write"], tmp_path)  # fsync, as before
    assert "**The durable call:** `fsync` (a run from before" in text
    assert all(r["durable_mib_s"] is not None for r in x["repeats"])


def test_big_write_from_a_mac_before_the_durable_call_is_not_called_durable(sections, tmp_path):
    mac = _upgraded_from_3(_from_before_durable_call(sections["big_write"]), {"host": {"system": "Darwin"}})
    x, text = _render("big_write", mac["experiments"]["big_write"], tmp_path, mac)
    assert (
        "**The durable call on Darwin:** none: this run timed only plain fsync (a run from before disklab "
        "recorded the durable call, when fsync was the only sync timed); plain fsync on macOS stops at the "
        "drive's cache" in text
    )
    assert "became durable" not in text and "but that is no durable rate" in text
    assert all(r["durable_mib_s"] is None for r in x["repeats"])


@pytest.mark.parametrize(("unbuf", "buf"), [(900.0, 60.0), (60.0, 900.0)])
def test_the_answer_line_says_which_was_cheaper(sections, tmp_path, unbuf, buf):
    s = copy.deepcopy(sections["write_buffering"])
    s["modes"]["unbuffered"]["per_call_ns"]["median"] = unbuf
    s["modes"]["buffered"]["per_call_ns"]["median"] = buf
    x, _ = _render("write_buffering", s, tmp_path)
    line = answers._write_buffering({"section": s, "view": x})
    if unbuf > buf:
        assert line.startswith("an unbuffered 1-byte `os.write` cost 15.0× a buffered `f.write` (900 ns")
    else:
        assert line.startswith("the buffered `f.write` was not cheaper than an unbuffered 1-byte `os.write`")
        assert "(900 ns against 60 ns per call, medians): unexpected" in line
