"""disklab: an Ansible-driven, reproducible storage lab for a fleet of hosts (controller side)."""

__version__ = "0.1.0"
