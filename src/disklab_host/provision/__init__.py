"""Provision the lab venv: pinned torch, safetensors and numpy, from the right torch build.

``python disklab_host.pyz provision ...`` (command.main; the lab_venv role runs it with the host's own
Python). Standard library only: it runs before the venv exists and needs neither pip nor packaging nor
setuptools in that interpreter (Homebrew's Python 3.12+ and a venv made with ``--without-pip`` have none
of them). In order, one module per job:

1. ``torchindex``: the torch build (``lab_venv_torch_index``);
2. ``hostfacts``: the host's facts and the refusals before any download;
3. ``venvrecord``: what the venv was made from, and the plan: keep, extend, create or rebuild
   (``venvstate``: what the venv holds, from one probe kept in its record);
4. ``install``: ``<python> -m venv PATH`` and the venv's own pip, from the hash lock of the host's
   platform and Python (disklab_host.lock, ``lab_venv_lock``) or from the pins;
5. ``loaders``: the production loaders of ``lab_venv_loaders``, each from its own lock where there is one;
6. ``command``: the order above, the record written last, and the one JSON object printed.

``errors`` holds the two ways it stops: Refused and Failed.
"""
