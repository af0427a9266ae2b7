"""Each framework's own save and load, called as its users call them, on the model of :mod:`.model`.

``save_one(name, state, directory, state_mib)`` saves in this process (every saver but ``dcp``, whose
ranks are processes of torch's launcher: :mod:`.dcp_rank`). ``load(name, directory, state_mib)`` is
what a restart runs: it returns the model's tensors as the framework loaded them, or raises with the
framework's own error. Where the framework's load unpickles more than a weights-only load would allow,
:data:`UNPICKLES` says so in one line.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from . import model

LIGHTNING_FILE = "ckpt.pt"
# The framework loads that run pickle beyond weights_only=True, in one line each (what the page says).
UNPICKLES = {
    "dcp": "dcp.load reads .metadata with pickle.load, not torch.load(weights_only=True): load only "
    "checkpoints you trust",
    "trainer": "training_args.bin is a pickled TrainingArguments that torch.load(weights_only=True) refuses; "
    "resuming does not read it, so the judge does not either",
}


def module_of(state: dict):
    """An nn.Module whose parameters are ``state``'s tensors under the same dotted names."""
    import torch

    root = torch.nn.Module()
    for name, tensor in state.items():
        *path, leaf = name.split(".")
        mod = root
        for part in path:
            if not hasattr(mod, part):
                mod.add_module(part, torch.nn.Module())
            mod = getattr(mod, part)
        mod.register_parameter(leaf, torch.nn.Parameter(tensor.clone(), requires_grad=False))
    return root


# Quiet, offline Hugging Face libraries: nothing is downloaded, no progress bars on stderr.
HF_ENV = {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error",
          "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip


def quiet_hf() -> None:
    """Set :data:`HF_ENV` in this process, before transformers or accelerate is imported."""
    os.environ.update(HF_ENV)


def _llama(state_mib: int):
    quiet_hf()
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(**model.config(state_mib)))


def _trainer(state: dict, output_dir: Path, state_mib: int):
    """A Trainer over the model at ``state``, with its optimizer and scheduler made (nothing trains)."""
    from transformers import Trainer, TrainingArguments

    llama = _llama(state_mib)
    llama.load_state_dict(state)
    args = TrainingArguments(output_dir=str(output_dir), report_to=[], use_cpu=True, save_strategy="steps")
    trainer = Trainer(model=llama, args=args)
    trainer.create_optimizer_and_scheduler(num_training_steps=10)
    return trainer


def save_one(name: str, state: dict, directory: Path, state_mib: int) -> None:
    """Save ``state`` into ``directory`` with the framework ``name`` (not ``dcp``: see :mod:`.dcp_rank`)."""
    if name == "transformers":
        llama = _llama(state_mib)
        llama.load_state_dict(state)
        llama.save_pretrained(directory)
    elif name == "trainer":
        trainer = _trainer(state, Path(directory).parent, state_mib)
        trainer.state.global_step = int(Path(directory).name.removeprefix("checkpoint-"))
        trainer._save_checkpoint(trainer.model, trial=None)  # the Trainer's own save of checkpoint-N
    elif name == "accelerate":
        quiet_hf()
        from accelerate import Accelerator

        accelerator = Accelerator(cpu=True)
        accelerator.prepare(module_of(state))
        accelerator.save_state(str(directory))
    elif name == "lightning":
        from lightning.fabric import Fabric

        fabric = Fabric(accelerator="cpu", devices=1)
        Path(directory).mkdir(parents=True, exist_ok=True)
        fabric.save(Path(directory) / LIGHTNING_FILE, {"model": module_of(state)})
    else:
        raise ValueError(f"save_one: no one-process save for {name!r}")


def load(name: str, directory: Path, state_mib: int) -> dict:
    """The model's tensors as the framework ``name`` loads them from ``directory``; raises where it fails."""
    import torch

    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no directory {directory.name}")
    if name == "dcp":
        import torch.distributed.checkpoint as dcp

        want = {k: torch.empty(s) for k, s in model.shapes(state_mib).items()}
        # it logs a traceback on the root logger where a rank finds no metadata; the judge says it in one line
        logging.disable(logging.WARNING)
        try:
            with warnings.catch_warnings():  # "torch.distributed is disabled ...": one process, as asked
                warnings.simplefilter("ignore")
                dcp.load(want, checkpoint_id=str(directory), no_dist=True)
        finally:
            logging.disable(logging.NOTSET)
        return want
    if name == "transformers":
        quiet_hf()
        from transformers import LlamaForCausalLM

        return dict(LlamaForCausalLM.from_pretrained(directory).state_dict())
    if name == "trainer":  # what resuming from checkpoint-N reads: its state, RNG, optimizer, then weights
        quiet_hf()
        import json

        from transformers import LlamaForCausalLM
        from transformers.trainer_pt_utils import safe_globals

        json.loads((directory / "trainer_state.json").read_text())
        with safe_globals():
            torch.load(directory / "rng_state.pth", weights_only=True)
        for part in ("optimizer.pt", "scheduler.pt"):
            torch.load(directory / part, weights_only=True)
        return dict(LlamaForCausalLM.from_pretrained(directory).state_dict())
    if name == "accelerate":
        quiet_hf()
        from accelerate import Accelerator

        accelerator = Accelerator(cpu=True)
        blank = {k: torch.zeros(s) for k, s in model.shapes(state_mib).items()}
        mod = accelerator.prepare(module_of(blank))
        accelerator.load_state(str(directory))
        return dict(mod.state_dict())
    if name == "lightning":
        from lightning.fabric import Fabric

        fabric = Fabric(accelerator="cpu", devices=1)
        blank = {k: torch.zeros(s) for k, s in model.shapes(state_mib).items()}
        mod = module_of(blank)
        fabric.load(directory / LIGHTNING_FILE, {"model": mod})
        return dict(mod.state_dict())
    raise ValueError(f"load: unknown saver {name!r}")
