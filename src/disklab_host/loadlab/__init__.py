"""The load step's helpers: deterministic weights, one load per fresh process, two-worker memory."""
