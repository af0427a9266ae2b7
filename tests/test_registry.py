"""One registry of steps and sizes: everything that lists them agrees with it, and a new step fits in."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from disklab import report
from disklab_host import codeinfo, lab, preflight, registry
from disklab_host.registry import Size, Step

ROLE = REPO / "roles" / "lab_run"
HOST = REPO / "src" / "disklab_host"


def role_disagreements(steps=registry.STEPS, role: Path = ROLE) -> list[str]:
    """Where lab_run's defaults and argument specs (under ``role``) differ from the registry, read as Ansible
    reads them (empty when they agree). tests/test_stepfiles.py checks the text `make steps` writes."""
    names = [s.name for s in steps]
    sizes = {z.name: z for s in steps for z in s.sizes}
    problems = []
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    entries = list(specs.values())
    if any(e["options"] is not entries[0]["options"] for e in entries):
        problems.append("the entry points do not share one option list (the YAML anchor)")
    options = entries[0]["options"]
    if options["lab_run_steps"]["choices"] != names:
        problems.append(
            f"argument_specs lab_run_steps choices {options['lab_run_steps']['choices']} != {names}"
        )
    if options["lab_run_profile"]["choices"] != list(registry.PROFILES):
        problems.append("argument_specs lab_run_profile choices differ from registry.PROFILES")
    spec_sizes = {k[8:] for k, v in options.items() if v.get("description", "").startswith("Size (null")}
    for name in sorted(set(sizes) ^ spec_sizes):
        problems.append(f"lab_run_{name}: in {'the registry' if name in sizes else 'argument_specs'} only")
    for name, size in sizes.items():
        want = f"Size (null keeps the profile's): {size.describe()}"
        got = options.get(f"lab_run_{name}", {})
        if got and (got.get("type") != "int" or got.get("description") != want):
            problems.append(f"argument_specs lab_run_{name} should be type int, description {want!r}")
    text = (role / "defaults" / "main.yml").read_text()
    defaults = yaml.safe_load(text)
    if defaults["lab_run_steps"] != names:
        problems.append(f"defaults lab_run_steps {defaults['lab_run_steps']} != {names}")
    not_sizes = {k for k, v in options.items() if not v.get("description", "").startswith("Size (null")}
    default_sizes = {k[8:] for k, v in defaults.items() if v is None and k not in not_sizes}
    for name in sorted(set(sizes) ^ default_sizes):
        problems.append(
            f"lab_run_{name}: in {'the registry' if name in sizes else 'defaults'} only (null default)"
        )
    for name, size in sizes.items():
        if f"# {size.describe()}\nlab_run_{name}: null\n" not in text:
            problems.append(f"defaults: lab_run_{name} should follow the comment '# {size.describe()}'")
    return problems


def test_the_lab_run_role_agrees_with_the_registry():
    assert role_disagreements() == []


def test_profiles_and_sections_come_from_the_registry():
    schema = json.loads((REPO / "src/disklab/schema/results.schema.json").read_text())
    assert schema["properties"]["profile"]["enum"] == list(registry.PROFILES)
    assert list(registry.STEP_NAMES) == report.SECTION_ORDER
    assert lab.registry is registry and preflight.registry is registry


def test_every_profile_value_follows_its_own_rules():
    for profile in registry.PROFILES:
        for name, value in registry.profile_sizes(profile).items():
            assert registry.SIZES[name].check(value) == value


def test_size_rules_are_enforced_with_the_setting_named():
    with pytest.raises(
        ValueError, match=r"lab_run_crash_state_mib must be an integer >= 4 and a multiple of 4, got 6"
    ):
        registry.resolve("quick", {"crash_state_mib": 6})
    with pytest.raises(ValueError, match="lab_run_fsync_blocks must be an integer > 0, got 0"):
        registry.resolve("quick", {"fsync_blocks": 0})
    assert registry.resolve("quick", {"load_small_full_size": 0})["load_small_full_size"] == 0
    with pytest.raises(ValueError, match="lab_run_nope is not a known size setting"):
        registry.resolve("quick", {"nope": 1})
    assert registry.resolve("quick", {"root": "/x"}, strict=False) == registry.profile_sizes("quick")
    with pytest.raises(ValueError, match=r"lab_run_load_big_mib must be an integer >= 18, got 17"):
        registry.resolve("quick", {"load_big_mib": 17})


@pytest.mark.parametrize("strict", [True, False])
def test_a_retired_setting_is_refused_naming_the_new_one(strict):
    """The role sends every lab_run_* set, and unknown names are passed over: a retired one is not."""
    with pytest.raises(ValueError) as exc:
        registry.resolve("quick", {"load_big_tensors": 8}, strict=strict)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("lab_run_load_big_tensors is no longer a setting: set lab_run_load_big_mib")
    assert "quick 256, full 2048" in msg
    assert "load_big_tensors" not in registry.SIZES and set(registry.RETIRED).isdisjoint(registry.SIZES)


def test_every_step_module_exists_with_a_run_function():
    for step in registry.STEPS:
        path = HOST / "steps" / f"{step.name}.py"
        tree = ast.parse(path.read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body), step.name
        assert set(step.platforms) <= set(registry.PLATFORMS)
        for sub in step.uses:
            assert (HOST / sub / "__init__.py").is_file(), (step.name, sub)


def test_the_roots_defaults_agree_and_forks_are_set_once():
    roots = {
        role: yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())[f"{role}_root"]
        for role in ("lab_run", "lab_venv", "host_audit")
    }
    assert len(set(roots.values())) == 1, roots
    hits = [
        p
        for p in (*REPO.glob("src/**/*.py"), *REPO.glob("playbooks/**/*.yml"), *REPO.glob("roles/**/*.yml"))
        if re.search(r"\bforks\b\s*[=:]\s*\d", p.read_text())
    ]
    assert hits == [] and "forks = 32" in (REPO / "ansible.cfg").read_text()


def test_roles_reach_nothing_outside_their_folder():
    for path in REPO.glob("roles/**/*.yml"):
        assert "playbook_dir }}/.." not in path.read_text().replace("playbook_dir ~ '/../reports", ""), path


def _imports(path: Path, package: str) -> set[str]:
    """disklab_host modules imported by ``path`` (relative imports resolved against ``package``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("disklab_host"):
                for alias in node.names:
                    cand = f"{mod}.{alias.name}"
                    out.add(cand if (HOST.parent / (cand.replace(".", "/") + ".py")).exists() else mod)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("disklab_host"))
    return out


def _edits_sys_path(path: Path) -> bool:
    text = path.read_text()
    return "sys.path.insert" in text or "sys.path.append" in text


@pytest.mark.heavy
def test_no_import_circle_and_no_sys_path_edits_in_the_package():
    graph = {}
    for path in HOST.rglob("*.py"):
        rel = path.relative_to(HOST.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {m.removesuffix(".__init__") for m in _imports(path, package)} - {name}
        assert not _edits_sys_path(path), path
    for path in [*REPO.glob("src/disklab/**/*.py"), *REPO.glob("bench/*.py")]:
        assert not _edits_sys_path(path), path
    seen, stack = set(), []

    def visit(node):
        if node in stack:
            raise AssertionError(f"import circle: {' -> '.join(stack[stack.index(node) :] + [node])}")
        if node in seen or node not in graph:
            return
        stack.append(node)
        for nxt in sorted(graph[node]):
            visit(nxt)
        stack.pop()
        seen.add(node)

    for node in sorted(graph):
        visit(node)


def test_a_new_step_runs_through_preflight_and_the_runner(tmp_path, monkeypatch):
    """The dummy step: a module with run(), one registry entry with one size; nothing else in Python.
    tests/test_stepfiles.py adds it by the files docs/contributing.md lists."""
    (tmp_path / "dummy_step.py").write_text(
        "def run(cfg, workdir):\n"
        "    (workdir / 'out.bin').write_bytes(b'x' * cfg['sizes']['dummy_bytes'])\n"
        "    return {'status': 'ok', 'written_bytes': (workdir / 'out.bin').stat().st_size}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    dummy = Step(
        name="dummy",
        title="writes a few bytes",
        sizes=(Size("dummy_bytes", 10, 20, "bytes", "bytes the dummy step writes"),),
        needs_torch=False,
        platforms=registry.PLATFORMS,
        needed_bytes=lambda s: s["dummy_bytes"],
        module="dummy_step",
    )
    steps = (*registry.STEPS, dummy)
    monkeypatch.setattr(registry, "STEPS", steps)
    monkeypatch.setattr(registry, "BY_NAME", {s.name: s for s in steps})
    monkeypatch.setattr(registry, "STEP_NAMES", tuple(s.name for s in steps))
    monkeypatch.setattr(registry, "SIZES", {z.name: z for s in steps for z in s.sizes})
    wb = tmp_path / "wb"
    cfg = {"run_id": "20261201T000000Z", "host": "h", "profile": "quick", "workbench": str(wb),
           "workbench_create": True, "steps": ["dummy"], "settings": {"dummy_bytes": 12}}  # fmt: skip
    verdict = preflight.preflight(cfg)
    assert verdict["sizes"]["dummy_bytes"] == 12 and verdict["per_step_bytes"] == {"dummy": 12}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "host.json").write_text("{}")
    assert lab.main(["--config", str(tmp_path / "config.json"), "--facts", str(tmp_path / "host.json"),
                     "--out", str(tmp_path / "results.json")]) == 0  # fmt: skip
    doc = json.loads((tmp_path / "results.json").read_text())
    assert (
        doc["experiments"]["dummy"]["status"] == "ok" and doc["experiments"]["dummy"]["written_bytes"] == 12
    )
    assert doc["lab_code"]["steps"]["dummy"] == codeinfo.digest(codeinfo.step_modules(dummy))
    with pytest.raises(ValueError, match="lab_run_dummy_bytes must be an integer > 0"):
        registry.resolve("quick", {"dummy_bytes": 0})
    # until the role lists the new size and step, the agreement test names what is missing
    problems = role_disagreements(steps)
    assert any("lab_run_dummy_bytes: in the registry only" in p for p in problems)
    assert any("lab_run_steps" in p for p in problems)
