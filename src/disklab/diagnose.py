"""Ansible's errors that stop a run before any host, said in one line that names the cause and the fix."""

from __future__ import annotations

from pathlib import Path

_VAULT_MARK = "$ANSIBLE_VAULT"


def vaulted_files(inventory: Path) -> list[Path]:
    """The group_vars and host_vars files beside the inventory that are vault-encrypted or hold a !vault."""
    base = Path(inventory).resolve().parent
    found = []
    for where in ("group_vars", "host_vars"):
        root = base / where
        if not root.is_dir():
            continue
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if text.startswith(_VAULT_MARK) or "!vault" in text:
                found.append(path)
    return found


def no_host_ran(output: str, inventory: Path, extra_files: list[str] | None = None) -> str | None:
    """One line for the Ansible error in ``output`` that stopped the play before any host, or None.

    ``extra_files``: the ``-e @FILE`` words given, whose vault-encrypted files are named too."""
    if "no vault secrets found" in output or "Decryption failed" in output:
        files = [_owner(p, Path(inventory).resolve().parent) for p in vaulted_files(inventory)]
        files += [f"-e {word}" for word in extra_files or [] if _vaulted(Path(word[1:]))]
        where = ", ".join(files) or "a vault-encrypted file of the inventory's variables or an -e @FILE"
        if "Decryption failed" in output:
            return f"{where}: the vault password given does not open it (Ansible: Decryption failed)"
        return (
            f"{where}: vault-encrypted, and no vault password was given: add --vault-password-file FILE, "
            "--vault-id ID or --ask-vault-pass"
        )
    return None


def _vaulted(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(_VAULT_MARK)).decode("ascii", "replace") == _VAULT_MARK
    except OSError:
        return False


def _owner(path: Path, base: Path) -> str:
    """``group_vars/fleet/vault.yml (the hosts of group fleet)`` for a vars file under ``base``."""
    rel = path.relative_to(base)
    kind, name = rel.parts[0], rel.parts[1].split(".")[0] if len(rel.parts) == 2 else rel.parts[1]
    whose = f"the hosts of group {name}" if kind == "group_vars" else f"host {name}"
    return f"{rel} ({whose})"
