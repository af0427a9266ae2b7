"""What a render keeps so that the next one skips work: the stamps and caches beside the reports.

Each is a cache only: without it, or with one that does not match, the work is done again.

- ``<host>/.rendered.json`` (:data:`STAMP_FILE`): the input stamp of the host's last render and the index
  row it produced; a host whose stamp still matches is not rendered again.
- ``<host>/.validated.sha256`` (disklab.stored.VALID_FILE): the digests of stored files found valid;
  their schema check is skipped.
- ``<reports>/.index.sha256`` (:data:`INDEX_STAMP_FILE`): the digest of what the index and fleet pages
  were last rendered from.
- Jinja's per-user cache of compiled templates (:func:`bytecode_cache`).
- Beside each plot, the digest it was drawn from (disklab.plotting.draw_once).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

import jinja2

from disklab import __version__, htmlpage, predictions, store, stored
from disklab.fsio import atomic_write_text
from disklab_host import registry

STAMP_FILE = ".rendered.json"
INDEX_STAMP_FILE = ".index.sha256"


class _BytecodeCache(jinja2.FileSystemBytecodeCache):
    """Jinja's own per-user cache of compiled templates (a 0700 directory under the temp dir, each entry
    keyed by its template's source checksum and Jinja's version, written by rename). Compiling the
    templates took about 0.7 s of every render. A cache that cannot be written costs only that time."""

    def dump_bytecode(self, bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def bytecode_cache() -> jinja2.BytecodeCache | None:
    try:
        return _BytecodeCache()
    except (OSError, RuntimeError):  # no usable temp dir, or one not owned by this user: compile each time
        return None


def renderer_stamp() -> str:
    """A digest of everything that shapes a report besides the stored files: version and templates.

    Any change to a template, a section module, the host package's modules the
    controller renders with (the registry's section order, common/'s units and
    formats), disklab's version or markdown-it-py's (the HTML pages) makes every
    host report stale, so `disklab report` renders it again.
    """
    pkg = Path(__file__).parent
    host = Path(registry.__file__).parent
    digest = hashlib.sha256(f"{__version__}\0markdown-it-py {htmlpage.version()}".encode())
    own = [*pkg.glob("*.py"), *pkg.glob("sections/*.py"), *pkg.glob("templates/**/*.j2")]
    shared = [host / "registry.py", *host.glob("common/*.py")]
    for base, paths in ((pkg.parent, sorted(own)), (host.parent, sorted(shared))):
        for path in paths:
            digest.update(path.relative_to(base).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def input_stamp(host_dir: Path, renderer: str) -> str:
    """A digest of a host's directory name (the index links to it), its stored runs, audits and failures
    (name, size, mtime), the fleet's predictions file (its bytes: disklab.predictions.stamp) and the
    renderer."""
    digest = hashlib.sha256(renderer.encode() + b"\0" + host_dir.name.encode())
    digest.update(predictions.stamp(host_dir.parent).encode() + b"\n")
    for kind in ("runs", "audits", "failures"):
        for path in store.files(host_dir, kind):
            st = path.stat()
            digest.update(f"{kind}/{path.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def cached_row(host_dir: Path, stamp: str) -> dict | None:
    """The index row of a host whose report is up to date (its stamp is ``stamp``), else None."""
    stamp_path = host_dir / STAMP_FILE
    if not (stamp_path.is_file() and (host_dir / "report.md").is_file()):
        return None
    try:
        cached = stored.read(stamp_path, "render_stamp")
    except stored.StoredFileError:
        return None  # an unreadable stamp only means: render again
    return cached["index_row"] if cached.get("stamp") == stamp else None


def remember_row(host_dir: Path, stamp: str, row: dict) -> None:
    """Write the host's stamp and index row (after its pages: a crash before it renders again)."""
    stored.write(host_dir / STAMP_FILE, "render_stamp", {"stamp": stamp, "index_row": row}, overwrite=True)


def index_key(renderer: str, rows: list[dict], plots: dict, together: dict | None = None) -> str:
    """The digest of what the index and fleet pages are rendered from: the renderer, the rows, the plots,
    and the newest together run's summary (disklab.togetherpage)."""
    inputs = [renderer, rows, plots] + ([together] if together else [])
    inputs = json.dumps(inputs, sort_keys=True, default=str)
    return hashlib.sha256(inputs.encode()).hexdigest()


def index_current(reports: Path, key: str, pages: tuple[str, ...]) -> bool:
    """True when ``.index.sha256`` holds ``key`` and every one of ``pages`` is there."""
    with contextlib.suppress(OSError):
        return (reports / INDEX_STAMP_FILE).read_text().strip() == key and all(
            (reports / p).is_file() for p in pages
        )
    return False


def forget_index(reports: Path) -> None:
    """Remove the index stamp before its pages change: until the new digest is written, they are stale."""
    with contextlib.suppress(OSError):
        (reports / INDEX_STAMP_FILE).unlink()


def remember_index(reports: Path, key: str) -> None:
    """After the pages, which are durable then; the stamp, a cache, is written without fsync."""
    atomic_write_text(reports / INDEX_STAMP_FILE, key + "\n", durable=False)
