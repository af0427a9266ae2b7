"""The layers through a SIGKILL: a real naive torch.save in a child, killed after it saved, then fsynced."""

from __future__ import annotations

import pytest

from disklab_host.cache import pagecache as cache
from disklab_host.checkpoint import layers


@pytest.mark.skipif(cache.cachestat_unavailable_reason() is not None, reason="no cachestat(2) here")
@pytest.mark.heavy
def test_dirty_pages_survive_the_kill_and_leave_at_the_fsync(workbench):
    got = layers.kill_after_naive_save(workbench, 8)
    assert got["status"] == "ok" and got["exit_signal"] == 9 and got["cachestat"] == "ok"
    saved, killed, synced = got["rows"]
    assert [r["point"] for r in got["rows"]] == ["after_save", "after_kill", "after_fsync"]
    assert saved["st_size_bytes"] == killed["st_size_bytes"] == got["size_bytes"] > 8 << 20
    pages = (got["size_bytes"] + cache.page_size() - 1) // cache.page_size()
    for row in (saved, killed):  # no sync yet: every page is dirty or on its way
        assert row["pages"]["dirty_pages"] + row["pages"]["writeback_pages"] > 0
        assert row["pages"]["cached_pages"] == pages
    assert synced["pages"]["dirty_pages"] == synced["pages"]["writeback_pages"] == 0
    assert list(workbench.iterdir()) == []  # the file is deleted afterwards


@pytest.mark.heavy
def test_state_size_is_capped_and_rounded_to_the_saver_rule(workbench):
    got = layers.kill_after_naive_save(workbench, 6)
    assert got["state_mib"] == 4
