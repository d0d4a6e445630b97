"""nprof demo: the virtual NeuronCore workflow end to end, as a user types it.

Run with `bash scripts/demo.sh` (or `.venv/bin/python examples/demo.py [OUTPUT_DIR]`, default
./demo-output). Everything runs on the virtual NeuronCore; no accelerator is needed.

1. An NKI kernel (the exp kernel of examples/nki/) under `nki.benchmark`: the latency table, plus
   the program and profile files it saves.
2. The seed-000 workflow for a PyTorch model: `nprof compile` runs the MNIST MLP training script once
   with `torch.compile(backend="nprof")`, leaving its forward and backward graphs in a compile cache
   (OUTPUT_DIR/compile-cache); `nprof capture` runs the forward graph on the virtual device with the
   inputs saved at compile time; `nprof view --output-format summary-text` prints its summary.
3. The command that opens the timeline in the browser.

Each step prints the command it runs. Exit status: 0, or the failing step's.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from nprof.cli import main as nprof

ROOT = Path(__file__).resolve().parent.parent


def banner(text: str) -> None:
    print(f"\n=== {text}", flush=True)


def show(argv: list[str]) -> None:
    print("$ " + shlex.join(argv), flush=True)


def run_nprof(argv: list[str]) -> int:
    show(["nprof", *argv])
    return nprof(argv)


def forward_module(cache: Path) -> Path:
    """The compiled forward graph's directory in the cache (its manifest says kind fw)."""
    for manifest in sorted(cache.glob("nprof-*/MODULE_*/manifest.json")):
        if json.loads(manifest.read_text()).get("kind") == "fw":
            return manifest.parent
    raise SystemExit(f"demo: no forward graph found in {cache}")


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-output").resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NPROF_CACHE": str(out / "compile-cache")}

    banner("1. An NKI kernel on the virtual NeuronCore (nki.benchmark)")
    show(["python", "examples/nki/exp_kernel.py"])
    status = subprocess.call([sys.executable, str(ROOT / "examples/nki/exp_kernel.py")], cwd=out, env=env)
    if status:
        return status

    banner("2. Compile a PyTorch MLP training step for the virtual NeuronCore")
    compile_cmd = ["nprof", "compile", "--", "python", "examples/mnist_mlp/train.py", "--steps", "1"]
    show(compile_cmd)
    status = subprocess.call([sys.executable, "-m", "nprof", *compile_cmd[1:]], cwd=ROOT, env=env)
    if status:
        return status
    module = forward_module(out / "compile-cache")
    inputs = (module / "inputs.args").read_text().split() if (module / "inputs.args").exists() else []
    program, profile = module / "model.neff", out / "mlp_forward.ntff"

    banner("3. Capture the forward graph on the virtual device")
    os.chdir(module)  # inputs.args names files relative to the module directory
    print(f"$ cd {shlex.quote(str(module))}")
    print(f"$ nprof capture -n model.neff -s {shlex.quote(str(profile))} $(cat inputs.args)", flush=True)
    status = nprof(["capture", "-n", str(program), "-s", str(profile), *inputs])
    if status:
        return status

    banner("4. Summary of the profile")
    status = run_nprof(["view", "-n", str(program), "-s", str(profile), "--output-format", "summary-text"])
    if status:
        return status

    banner("5. Explore it")
    print("Open the timeline in your browser:")
    print(f"  .venv/bin/nprof view -n {shlex.quote(str(program))} -s {shlex.quote(str(profile))}")
    print(f"The exp kernel's profile: .venv/bin/nprof view -s {shlex.quote(str(out / 'profile.ntff'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
