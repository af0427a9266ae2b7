"""Checkpoint savers (naive, atomic, safetensors, the Break It saves) and the one verdict, classify."""
