"""Crash states on real filesystems: a block-level write recorder, crash images, a real fsync error."""
