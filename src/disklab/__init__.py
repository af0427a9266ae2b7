"""disklab: an Ansible-driven, reproducible storage lab for a fleet of hosts (controller side)."""

import warnings

from disklab_host import __version__

# ansible-core 2.19 imports cryptography's DSA key classes for its ssh-agent client, and cryptography 51
# deprecates DSA with a warning on that import: a line on stderr of disklab's commands that is about neither
# the user's hosts nor disklab, and that no user can act on. Only that warning, only from Ansible's modules.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"ansible\.")

__all__ = ["__version__"]
