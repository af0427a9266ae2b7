"""disklab: an Ansible-driven, reproducible storage lab for a fleet of hosts (controller side)."""

from disklab_host import __version__

__all__ = ["__version__"]
