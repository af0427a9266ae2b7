"""Standard-library helpers shared by the host side and the controller.

Nothing here imports torch, safetensors or numpy: the preflight and the audit
import these modules with the host's own Python before the lab venv exists,
and the controller (``disklab``) imports them instead of keeping copies.
"""
