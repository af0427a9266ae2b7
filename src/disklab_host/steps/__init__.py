"""The lab's experiments: one module per step, each with ``run(cfg, workdir) -> dict``."""
