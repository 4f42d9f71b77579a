"""The vector erf of the C backend (codegen/vmath.py): its accuracy over a dense sweep of float32 and
its speed against the scalar loop that calls libm's erff, on every C target that runs here.

    python bench/erf.py                       # native, then the foreign targets under qemu-user
    python bench/erf.py --targets native --stride 16

Accuracy: every `--stride`-th float32 bit pattern (both signs, so subnormals, the tails, +-0, +-inf and
NaNs among them), plus every float from 3.9 to 4 and the neighbours of 0.921875 and 2 (where the
polynomials change), against libm's double erf: the largest error in ulps of the exact value's binade,
and how many results differ from the correctly rounded float (the double erf rounded once). The same
for glibc's erff, the peer. It also checks what must hold exactly: erf(-x) = -erf(x) bit for bit,
+-1 wherever the correctly rounded value is, +-0 and NaN kept.

Speed: the code the C backend generates for `y = erf(x)` over 4096 floats (in the first-level cache),
as a `256 16:v` nest against a plain loop of 4096 (which calls erff), each run by the harness with
`--repeats` timed runs per process (inputs uniform in [-1, 1), the harness's, and those times 4),
`--rounds` processes of each, alternating; the medians in ns per element and the median of the
per-round ratios. The vector code computes every polynomial for every lane, so its time does not
depend on the inputs; glibc's erff does. Foreign targets run under qemu-user, so their times say
nothing and are not taken; their sweep takes a coarser `--foreign-stride`.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import tempfile
from pathlib import Path

from codegen import generate, get_target
from codegen.build import build
from codegen.targets import Target
from codegen.vector_helpers import used_vector_types, vector_helper_source, vector_typedefs
from dojo_ir import load

DRIVER = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

%(helpers)s

static float from_bits(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static uint32_t bits_of(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }

/* |got - exact| in units of the last place of the exact value's binade (2^-149 at least) */
static double ulps(float got, double exact)
{
    if (isnan(exact)) return isnan(got) ? 0 : INFINITY;
    if (isinf(exact)) return got == exact ? 0 : INFINITY;
    int e;
    frexp(exact, &e);
    return fabs((double)got - exact) / ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
}

typedef struct { double worst; float at; long differ, count, broken; } tally;

static void check(tally *t, float x, float got)
{
    double exact = erf((double)x);
    float rounded = (float)exact;
    double u = ulps(got, exact);
    if (u > t->worst) { t->worst = u; t->at = x; }
    t->differ += !(got == rounded || (isnan(got) && isnan(rounded)));
    t->count += 1;
    /* what must hold exactly: the saturated tails, zeros, NaN */
    if ((fabsf(rounded) == 1.0f && got != rounded) || (x == 0 && bits_of(got) != bits_of(x))
        || (isnan(x) != isnan(got)))
        t->broken += 1;
}

static void sweep_block(tally *vec, tally *lib, const float *x, long *odd_broken)
{
    vf32x16 v, w;
    memcpy(&v, x, sizeof v);
    w = dojo_erf_f32x16(v);
    vf32x16 n = -v, m = dojo_erf_f32x16(n);
    for (int k = 0; k < 16; ++k) {
        check(vec, x[k], w[k]);
        check(lib, x[k], erff(x[k]));
        if (bits_of(m[k]) != (bits_of(w[k]) ^ 0x80000000u) && !isnan(x[k])) *odd_broken += 1;
    }
}

int main(int argc, char **argv)
{
    long stride = atol(argv[1]);
    tally vec = {0}, lib = {0};
    long odd_broken = 0;
    float block[16];
    int filled = 0;
#define PUSH(value) do { block[filled++] = (value); \
        if (filled == 16) { sweep_block(&vec, &lib, block, &odd_broken); filled = 0; } } while (0)
    for (uint64_t b = 0; b < (1ull << 32); b += stride) PUSH(from_bits((uint32_t)b));
    for (uint32_t b = bits_of(3.9f); b <= bits_of(4.0f); ++b) PUSH(from_bits(b));
    float edges[] = {0.921875f, 2.0f};
    for (int e = 0; e < 2; ++e)
        for (int d = -64; d <= 64; ++d) PUSH(from_bits(bits_of(edges[e]) + d));
    float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f, 1.17549435e-38f, 3.4e38f};
    for (int s = 0; s < 9; ++s) PUSH(special[s]);
    while (filled) PUSH(0.0f);
    printf("vector %%.4f %%.9g %%ld %%ld %%ld %%ld\n", vec.worst, vec.at, vec.differ, vec.count, vec.broken,
           odd_broken);
    printf("libm %%.4f %%.9g %%ld %%ld %%ld\n", lib.worst, lib.at, lib.differ, lib.count, lib.broken);
    return 0;
}
"""


def driver_source() -> str:
    helpers = vector_helper_source(["dojo_erf_f32x16"])
    return DRIVER % {"helpers": vector_typedefs(used_vector_types(helpers)) + "\n" + helpers}


def sweep(target: Target, stride: int, work: Path) -> list[str]:
    source, binary = work / "erf_sweep.c", work / f"erf_sweep_{target.name}"
    source.write_text(driver_source())
    subprocess.run([*target.compiler, str(source), "-o", str(binary), *target.flags, "-Wno-psabi"], check=True)
    return subprocess.run([*target.launcher, str(binary), str(stride)], check=True, capture_output=True,
                          text=True).stdout.splitlines()


ELEMENTS = 4096
# The harness draws inputs uniform in [-1, 1); times 4 they reach every polynomial and the saturated tail.
SCALES = (1, 4)
KERNELS = {
    "vector": f"{ELEMENTS // 16} 16:v y[{{0}}*16+{{1}}] = erf(x[{{0}}*16+{{1}}]{{scaled}})",
    "scalar": f"{ELEMENTS} y[{{0}}] = erf(x[{{0}}]{{scaled}})",
}


def speed(target: Target, scale: int, rounds: int, repeats: int, work: Path) -> list[tuple[float, float]]:
    """(vector, scalar) ns per element, the median of each process's timed runs, per round."""
    binaries = {}
    for kind, line in KERNELS.items():
        body = line.replace("{scaled}", f" * {scale}" if scale != 1 else "")
        program = load(f"kernel k(x) -> y\n\nx f32 [{ELEMENTS}] heap\ny f32 [{ELEMENTS}] heap\n\n{body}\n")
        source = generate(program, target)
        assert ("dojo_erf_f32x16(" in source) == (kind == "vector")
        binaries[kind] = build(source, target, work).path
    given, taken = work / "x.in", work / "y.out"
    given.write_bytes(bytes(4 * ELEMENTS))
    times = []
    for _ in range(rounds):
        per_round = []
        for kind in KERNELS:
            out = subprocess.run([str(binaries[kind]), str(given), str(taken), str(repeats), "10", "7"], check=True,
                                 capture_output=True, text=True).stdout.split()
            per_round.append(median([float(s) for s in out[1::2]]) / ELEMENTS * 1e9)
        times.append((per_round[0], per_round[1]))
    return times


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def report(results: dict[str, tuple[int, list[str]]],
           timings: dict[tuple[str, int], list[tuple[float, float]]]) -> str:
    lines = ["# The vector erf (codegen/vmath.py) against glibc's erff", "",
             f"Written by `python bench/erf.py` on {platform.processor() or platform.machine()} "
             f"({subprocess.run(['ldd', '--version'], capture_output=True, text=True).stdout.splitlines()[0]}), "
             "a machine of 2 cores shared with other work while it ran.", "",
             "## Accuracy", "",
             "Against libm's double erf. Max error: in ulps of the exact value's binade. Not correctly rounded: "
             "the results that differ from the double erf rounded once to float32. Broken: results that are not "
             "exactly +-1 where the correctly rounded value is, zeros whose sign is lost, NaN not kept; odd: "
             "erf(-x) differing from -erf(x) in any bit.", "",
             "| target | sweep | points | erf | max error (ulp) | at x | not correctly rounded | broken | odd |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, (stride, out) in results.items():
        fields = {line.split()[0]: line.split()[1:] for line in out}
        for which in ("vector", "libm"):
            worst, at, differ, count, broken, *odd = fields[which]
            lines.append(f"| {name} | every {stride}th float32 + tails | {int(count):,} | "
                         f"{'vector' if which == 'vector' else 'glibc erff'} | {float(worst):.3f} | {at} | "
                         f"{int(differ) / int(count):.3%} | {broken} | {odd[0] if odd else '-'} |")
    lines += ["", "## Speed", "",
              f"The generated code for y = erf(x) over {ELEMENTS} floats (first-level cache): a `16:v` nest "
              "against the plain loop calling erff, each the median of its process's timed runs, one process of "
              "each per round. Medians over the rounds; the speed-up is the median of the per-round ratios.", "",
              "| target | inputs | rounds | vector (ns/element) | erff loop (ns/element) | speed-up |",
              "|---|---|---|---|---|---|"]
    for (name, scale), rounds in timings.items():
        ratios = [s / v for v, s in rounds]
        lines.append(f"| {name} | [-{scale}, {scale}) | {len(rounds)} | {median([v for v, _ in rounds]):.3f} | "
                     f"{median([s for _, s in rounds]):.3f} | {median(ratios):.1f}x |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", nargs="+", default=["native", "x86-avx2", "arm-neon", "riscv-rvv"])
    parser.add_argument("--stride", type=int, default=16)
    parser.add_argument("--foreign-stride", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "erf.md")
    args = parser.parse_args()
    results, timings = {}, {}
    with tempfile.TemporaryDirectory() as work:
        for name in args.targets:
            target = get_target(name)
            if not target.runnable():
                print(f"{name}: cannot run here, skipped")
                continue
            stride = args.foreign_stride if target.launcher else args.stride
            results[name] = (stride, sweep(target, stride, Path(work)))
            print(name, *results[name][1], sep="\n  ")
            for scale in SCALES if not target.launcher else ():
                timings[name, scale] = speed(target, scale, args.rounds, args.repeats, Path(work))
    args.out.write_text(report(results, timings))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
