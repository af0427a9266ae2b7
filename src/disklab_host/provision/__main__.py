"""``python -m disklab_host.provision [ARGS]``: the provision command (command.main), as it always ran."""

from __future__ import annotations

import os
import sys

from .command import main

os.umask(0o022)
sys.exit(main())
