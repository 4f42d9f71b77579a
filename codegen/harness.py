"""The harness: the `main` that the runner drives.

    BINARY IN OUT REPEATS WARMUP SEED

reads the kernel's inputs from file IN (kernel-line order, each the raw
native-endian array of its dtype at its full shape, C order, concatenated),
fills outputs and heap temporaries with the interpreter's poison (NaN, the
least integer), runs the kernel once and writes the outputs to file OUT
(kernel-line order, same encoding). Then it runs WARMUP untimed and REPEATS
timed runs, refilling the inputs before each (untimed) with fresh data from a
xorshift64* generator seeded by SEED (floats uniform in [-1, 1), integers in
[-8, 8]), prints `time SECONDS` per timed run (CLOCK_MONOTONIC) and exits 0.
Buffers are allocated 64-byte aligned, once, outside the timing. Bad
arguments exit 2, unreadable or short files exit 1, each with a message on
stderr.

For a GPU (`device=True`, the CUDA/HIP backend) the source defines
`dojo_alloc` itself, as memory that the host and the GPU share, and
`dojo_prefetch(p, bytes)`, which the harness calls on every buffer after
refilling the inputs, untimed, so that a timed run does not pay to move them.
"""

from __future__ import annotations

from dojo_ir.tree import DTYPE_BYTES, Buffer, Program

from .cexpr import POISON, buffer_var, c_type, storage_size

_ALLOC = r"""static void *dojo_alloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}"""

_COMMON = r"""static void dojo_read(FILE *f, void *p, size_t bytes, const char *name)
{
    if (fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "the input file ends before input %s\n", name);
        exit(1);
    }
}

static void dojo_write(FILE *f, const void *p, size_t bytes)
{
    if (fwrite(p, 1, bytes, f) != bytes) {
        perror("writing the output file");
        exit(1);
    }
}

static FILE *dojo_open(const char *path, const char *mode)
{
    FILE *f = fopen(path, mode);
    if (!f) {
        perror(path);
        exit(1);
    }
    return f;
}

/* xorshift64* */
static uint64_t dojo_next(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static double dojo_seconds(struct timespec t0, struct timespec t1)
{
    return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
}"""

# One random element of each dtype from a 64-bit draw `r`; the floats are
# exact multiples of 2^-23 (2^-52) in [-1, 1).
_RANDOM = {
    "f32": "(float)(r >> 40) * 0x1p-23f - 1.0f",
    "f64": "(double)(r >> 11) * 0x1p-52 - 1.0",
    "i32": "(int32_t)(r % 17) - 8",
    "i64": "(int64_t)(r % 17) - 8",
}


def _dtype_helpers(dtype: str) -> str:
    t = c_type(dtype)
    return (f"static void dojo_fill_{dtype}({t} *p, size_t n, uint64_t *state)\n"
            "{\n"
            "    for (size_t k = 0; k < n; ++k) {\n"
            "        uint64_t r = dojo_next(state);\n"
            f"        p[k] = {_RANDOM[dtype]};\n"
            "    }\n"
            "}\n\n"
            f"static void dojo_poison_{dtype}({t} *p, size_t n)\n"
            "{\n"
            "    for (size_t k = 0; k < n; ++k)\n"
            f"        p[k] = {POISON[dtype]};\n"
            "}")


def harness(program: Program, params: list[Buffer], device: bool = False) -> str:
    """The helpers and `main` for a kernel taking the buffers `params`."""
    inputs = [program.buffer_of[name] for name in program.inputs]
    outputs = [program.buffer_of[name] for name in program.outputs]
    dtypes = sorted({b.dtype for b in params})
    args = ", ".join(buffer_var(b.name) for b in params)

    def size(b: Buffer) -> str:
        return f"(size_t){storage_size(b)}"

    main = [
        "int main(int argc, char **argv)",
        "{",
        "    if (argc != 6) {",
        '        fprintf(stderr, "usage: %s IN OUT REPEATS WARMUP SEED\\n", argv[0]);',
        "        return 2;",
        "    }",
        "    long repeats = atol(argv[3]), warmup = atol(argv[4]);",
        "    uint64_t state = strtoull(argv[5], NULL, 10) * 0x9E3779B97F4A7C15ULL + 1;",
        "    if (repeats < 0 || warmup < 0) {",
        '        fprintf(stderr, "REPEATS and WARMUP must not be negative\\n");',
        "        return 2;",
        "    }",
    ]
    for b in params:
        t = c_type(b.dtype)
        # the cast makes the text C++ too, which converts no `void *` implicitly
        main.append(f"    {t} *{buffer_var(b.name)} = ({t} *)dojo_alloc({size(b)} * {DTYPE_BYTES[b.dtype]});")
    main.append('    FILE *in = dojo_open(argv[1], "rb");')
    for name, b in zip(program.inputs, inputs, strict=True):
        main.append(f'    dojo_read(in, {buffer_var(b.name)}, {size(b)} * {DTYPE_BYTES[b.dtype]}, "{name}");')
    main += [
        "    if (fgetc(in) != EOF) {",
        '        fprintf(stderr, "the input file is longer than the inputs\\n");',
        "        return 1;",
        "    }",
        "    fclose(in);",
    ]
    for b in params:
        if b not in inputs:
            main.append(f"    dojo_poison_{b.dtype}({buffer_var(b.name)}, {size(b)});")
    main.append(f"    kernel({args});")
    main.append('    FILE *out = dojo_open(argv[2], "wb");')
    for b in outputs:
        main.append(f"    dojo_write(out, {buffer_var(b.name)}, {size(b)} * {DTYPE_BYTES[b.dtype]});")
    main += [
        "    if (fclose(out) != 0) {",
        '        perror("closing the output file");',
        "        return 1;",
        "    }",
        "    for (long r = 0; r < warmup + repeats; ++r) {",
    ]
    for b in dict.fromkeys(inputs):
        main.append(f"        dojo_fill_{b.dtype}({buffer_var(b.name)}, {size(b)}, &state);")
    if device:
        for b in params:
            main.append(f"        dojo_prefetch({buffer_var(b.name)}, {size(b)} * {DTYPE_BYTES[b.dtype]});")
    main += [
        "        struct timespec t0, t1;",
        "        clock_gettime(CLOCK_MONOTONIC, &t0);",
        f"        kernel({args});",
        "        clock_gettime(CLOCK_MONOTONIC, &t1);",
        "        if (r >= warmup)",
        '            printf("time %.9f\\n", dojo_seconds(t0, t1));',
        "    }",
        "    return 0;",
        "}",
    ]
    helpers = [_dtype_helpers(d) for d in dtypes]
    return "\n\n".join([*([] if device else [_ALLOC]), _COMMON, *helpers, "\n".join(main)])
