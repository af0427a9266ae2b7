"""The process that runs a save function on a real filesystem, one save per request.

``python -m disklab_host.realfs.saver_child SPEC --state-mib M`` resolves SPEC
(``recipe:NAME`` or ``FILE.py:FUNC``, as the power-cut simulator does), prints
``ready``, then serves stdin: ``save STEP PATH`` saves the state dict of STEP
(saver.make_state, built once per step) to PATH and answers ``saved SECONDS``
or ``raised TEXT``. Its working directory is never on the filesystem under test.
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    from ..checkpoint import saver
    from ..powercut.simulate import SpecError, describe_exception, resolve_save

    ap = argparse.ArgumentParser(description="run a save function on request (disklab realfs)")
    ap.add_argument("spec")
    ap.add_argument("--state-mib", type=int, required=True)
    args = ap.parse_args(argv)
    try:
        save = resolve_save(args.spec)
    except SpecError as exc:
        print(f"raised {exc}", flush=True)
        return 2
    states: dict[int, dict] = {}
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, step, path = line.split(maxsplit=2)
        if cmd != "save":
            print(f"raised bad request {line.strip()!r}", flush=True)
            continue
        state = states.setdefault(int(step), saver.make_state(args.state_mib, int(step)))
        start = time.perf_counter()
        try:
            save(state, path.strip())
        except BaseException as exc:  # noqa: BLE001 -- the parent reports it; no verdict for this save
            print(f"raised {describe_exception(exc)}", flush=True)
            continue
        print(f"saved {time.perf_counter() - start:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
