"""The framework savers disklab can judge: their names, exact pins and what each writes.

Standard library only: the controller and preflight read the table before any venv exists. A saver is
named in ``lab_run_savers`` or ``disklab powercut --saver NAME[:RANKS]``; ``dcp`` takes a rank count
(2 or 4: torch's own launcher starts that many processes on one host with the gloo backend).
"""

from __future__ import annotations

from dataclasses import dataclass

SETTING = "lab_run_savers"
# Beside the lab venv's own record: each saver's install and import outcome (provision.savers writes it, the
# savers step reads its reasons).
INSTALL_RECORD = "disklab-savers.json"


@dataclass(frozen=True)
class Saver:
    """One framework saver. ``pins``: what pip installs beside the lab venv's own (empty: torch itself);
    ``imports``: the modules it needs; ``call``: the framework call that saves, as the user writes it;
    ``ranks``: the rank counts it takes (None: one process)."""

    name: str
    title: str
    pins: tuple[str, ...]
    imports: tuple[str, ...]
    call: str
    ranks: tuple[int, ...] | None = None
    default_ranks: int | None = None
    # The directories of the earlier and the new save in each case (savers.powercut.CASES), where the
    # framework names them itself (the Trainer's checkpoint-N); None: old/ and new/, and ckpt/ for both.
    dirs: dict[str, tuple[str, str]] | None = None


# The exact pins (the newest on PyPI when this table was written, 2026-12); torch is the lab venv's own.
TRANSFORMERS, ACCELERATE, LIGHTNING = "transformers==5.25.0", "accelerate==1.16.0", "lightning==2.6.6"

SAVERS = (
    Saver("dcp", "torch.distributed.checkpoint", (), ("torch.distributed.checkpoint",),
          "dcp.save(state_dict, checkpoint_id=DIR)", ranks=(2, 4), default_ranks=2),
    Saver("transformers", "Hugging Face transformers", (TRANSFORMERS,), ("transformers",),
          "model.save_pretrained(DIR)"),
    Saver("trainer", "Hugging Face Trainer checkpoint", (TRANSFORMERS, ACCELERATE),
          ("transformers", "accelerate"), "trainer._save_checkpoint(model, trial=None)",
          dirs={"fresh": ("checkpoint-1", "checkpoint-2"), "reuse": ("checkpoint-2", "checkpoint-2")}),
    Saver("accelerate", "Hugging Face accelerate", (ACCELERATE,), ("accelerate",),
          "accelerator.save_state(DIR)"),
    Saver("lightning", "Lightning Fabric", (LIGHTNING,), ("lightning",),
          "fabric.save(DIR/ckpt.pt, state)"),
)  # fmt: skip
BY_NAME = {s.name: s for s in SAVERS}
NAMES = tuple(BY_NAME)


@dataclass(frozen=True)
class Spec:
    """A saver and its rank count (None for one process)."""

    saver: Saver
    ranks: int | None

    @property
    def label(self) -> str:
        return self.saver.name if self.ranks is None else f"{self.saver.name}:{self.ranks}"


def parse(text: str, setting: str = SETTING) -> Spec:
    """``NAME`` or ``NAME:RANKS`` -> Spec; ValueError naming ``setting`` and the known savers."""
    name, _, ranks = str(text).partition(":")
    saver = BY_NAME.get(name)
    if saver is None:
        raise ValueError(f"{setting}: unknown saver {name!r}; known: {', '.join(NAMES)}")
    if saver.ranks is None:
        if ranks:
            raise ValueError(f"{setting}: {name} runs in one process and takes no rank count, got {text!r}")
        return Spec(saver, None)
    if not ranks:
        return Spec(saver, saver.default_ranks)
    if not ranks.isdigit() or int(ranks) not in saver.ranks:
        allowed = " or ".join(str(r) for r in saver.ranks)
        raise ValueError(f"{setting}: {name} takes {allowed} ranks ({name}:N), got {text!r}")
    return Spec(saver, int(ranks))


def parse_all(items, setting: str = SETTING) -> list[Spec]:
    """Each saver of ``items`` parsed (:func:`parse`), duplicates dropped. ``items`` is a list of names, or
    one string of names split by commas, with or without brackets: ``-e 'lab_run_savers=[dcp,transformers]'``
    reaches the host as that string, and Ansible's ``type: list`` splits it at the commas, brackets kept.
    ValueError naming ``setting`` for anything else."""
    if isinstance(items, str):
        items = items.split(",") if items.strip() else []
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ValueError(f"{setting} must be a list of saver names, got {items!r}")
    names = [n.strip().strip("[]").strip().strip("'\"") for i in items for n in i.split(",")]
    specs = [parse(n, setting) for n in names if n]
    return list({s.label: s for s in specs}.values())


def check_settings(settings: dict) -> list[Spec]:
    """The savers of ``settings`` (lab_run_* with the prefix left off); ValueError naming lab_run_savers."""
    return parse_all(settings.get("savers") or [], SETTING)
