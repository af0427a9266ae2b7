"""The power-cut simulator: record a save under strace, enumerate its crash states, classify each."""
