"""`make demo`: the main job on its embedded default, the library's softmax.

Today the job is: take the spec from the kernel library, check it, print it
in canonical form, run it with the reference interpreter and compare the
result with numpy; then show what the checker says about a broken copy.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from dojo_ir import diagnose, interpret, load, random_inputs, to_text
from dojo_ir.library import KERNELS
from dojo_ir.tree import walk_ops

KERNEL = "softmax"
ROWS, COLS = 256, 512


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> int:
    kernel = KERNELS[KERNEL]
    print(f"The kernel library holds {len(KERNELS)} kernels (`dojo kernels` lists them).\n")

    spec = load(kernel.text())
    ops = sum(1 for _ in walk_ops(spec.body))
    print(f"{KERNEL} at the paper's shape: checked, {len(spec.buffers)} buffers, {ops} operations, no errors.\n")

    text = kernel.text(m=ROWS, n=COLS)
    program = load(text)
    print(f"{KERNEL} at {ROWS}x{COLS}, in canonical form:\n")
    print(to_text(program))

    inputs = random_inputs(program, seed=0)
    started = time.perf_counter()
    outputs = interpret(program, inputs)
    elapsed = time.perf_counter() - started
    error = float(np.max(np.abs(outputs["y"].astype(np.float64) - _softmax(inputs["x"].astype(np.float64)))))
    iterations = sum(int(np.prod([s.size for s in chain])) for _, chain in walk_ops(program.body))
    print(f"Reference interpreter: {iterations:,} iterations in {elapsed * 1000:.0f} ms; "
          f"largest difference from numpy's softmax: {error:.1e}\n")

    broken = text.replace("m[{0}] max= x[{0},{1}]", "m[{0}] max= x[{0},{1}+1]").replace("s f32", "s f16")
    print("A broken copy (an index off by one, an unknown dtype), as `dojo check` reports it:")
    for diagnostic in diagnose(broken)[1]:
        print("  " + diagnostic.format("softmax-broken.dojo"))
    return 0 if error < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
