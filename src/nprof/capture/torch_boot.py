"""The child process of `nprof capture -- python script.py`: run the script under torch.profiler.

Usage (internal): ``python -m nprof.capture.torch_boot TRACE STATUS DEVICE POLICY (SCRIPT | -m MODULE) [ARGS...]``
with DEVICE cpu, cuda or auto and POLICY the ``--device-profile`` value (all, none, nth:N, default).
Under torchrun (``RANK`` set), ``{rank}`` in TRACE and STATUS becomes the rank (their directory is created)
and the status also records ``rank`` and ``world_size``. SIGTERM (torchrun stopping the other ranks when
one fails) ends the script like ``sys.exit(143)``, so the trace of what ran is still written.
It sets ``sys.argv`` and ``sys.path[0]`` as ``python script.py`` would, runs the
script with runpy inside a `TorchSession`, and always, even when the script
fails, writes the Chrome trace to TRACE and a JSON status to STATUS
(``exit_code``, ``device`` used, ``error``), then exits with the script's exit status (an
uncaught exception prints its traceback and gives 1, like Python). A device
problem (CUDA asked for but absent) writes ``error`` and exits 2 without running.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import traceback

import orjson


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


def _write_status(path: str, status: dict[str, object]) -> None:
    with open(path, "wb") as fh:
        fh.write(orjson.dumps(status))


def main(argv: list[str]) -> int:
    trace, status_path, device, policy, target = argv[0], argv[1], argv[2], argv[3], argv[4:]
    rank = os.environ.get("RANK", "0")  # torchrun starts one bootstrap per rank: each gets its own files
    trace, status_path = trace.replace("{rank}", rank), status_path.replace("{rank}", rank)
    os.makedirs(os.path.dirname(os.path.abspath(trace)), exist_ok=True)
    job = {"rank": int(rank), "world_size": int(os.environ.get("WORLD_SIZE", "1"))} if "RANK" in os.environ else {}
    from nprof.capture.torch_session import TorchSession
    from nprof.errors import NprofError

    try:
        session = TorchSession(None if device == "auto" else device, policy)
    except NprofError as err:
        _write_status(status_path, {"exit_code": 2, "error": str(err)})
        return 2
    if target[0] == "-m":
        module, args = target[1], target[2:]
        sys.argv = [module, *args]
        sys.path.insert(0, os.getcwd())
    else:
        script, args = target[0], target[1:]
        sys.argv = [script, *args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    code = 0
    # torchrun stops the other ranks with SIGTERM when one fails: exit through `finally` so they keep their trace
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    session.start()
    try:
        if target[0] == "-m":
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            session.stop(trace)
        except Exception as exc:  # the script's own status matters more; report the export problem
            _write_status(status_path, {"exit_code": code, "error": f"could not export the trace ({exc})"})
            return code or 1
    _write_status(status_path, {"exit_code": code, "device": session.device, **job})
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
