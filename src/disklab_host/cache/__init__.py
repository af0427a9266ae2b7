"""Page-cache control: residency from mincore, eviction by a named method, the macOS cold copy."""
