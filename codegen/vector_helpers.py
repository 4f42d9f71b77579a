"""The C text a vectorized program calls: its vector types and the helpers `dojo_*_f32x16`, ...

    used = used_vector_helpers(code)              # ["dojo_hadd_f32x16", "dojo_splat_f32x16"]
    source = vector_helper_source(used, 32)       # their definitions, each after those it calls
    typedefs = vector_typedefs(used_vector_types(code + source))

codegen/cvector.py writes statements that name these helpers and types; codegen/c.py collects the
names a source uses and prepends only their definitions. Every helper is one `static inline` line
on GCC/Clang vector types (two, under the preprocessor, for the masked moves), so one definition
serves every target:

- `dojo_splat_*` broadcasts a scalar; `dojo_loadn_*` and `dojo_storen_*` move the first n lanes
  of a widened vector (cvector's `_widened_piece`), by one of AVX-512's masked moves where the
  compiler targets it (`#if defined(__AVX512F__)`), else lane by lane;
- `dojo_gatherS_*` reads every S-th element, as contiguous loads picked by shuffles;
- `dojo_hadd_*`, `dojo_hmul_*`, `dojo_hmax_*`, `dojo_hmin_*` combine a vector's lanes as a tree
  into a scalar (a reassociation of the reduction, which the moves treat as reorderable);
- the elementwise functions: f32 `exp`, `log`, `tanh` and `erf` are vector polynomials
  (codegen/vmath.py: 1-3 ulp, erf under 1, numpy's special values), the others a libm call per
  lane; `max` and `min` select with masks so that NaN propagates. Those that compare are, for a
  vector wider than the target's registers, two of half as many lanes (`_halved`), which GCC
  would compare lane by lane.

`dojo_stream_*` store a vector with x86's non-temporal stores (`stream_helper_source`, fenced by
`dojo_sfence`), an ordinary store elsewhere; cvector's `streamable` says which stores may.
"""

from __future__ import annotations

import re

from dojo_ir.tree import DTYPE_BYTES, FLOAT_DTYPES

from .cexpr import REDUCTION_FUNCTIONS, REDUCTION_OPERATORS, c_type, combine, function_name
from .vmath import F32_MATH, F32_MATH_COMPARING

# AVX-512's, the widest of any target: with no target named, a vector up to this wide is one register.
WIDEST_REGISTER_BYTES = 64


def vector_type(dtype: str, lanes: int, aligned: bool = True) -> str:
    """`vf32x8`, or `vf32x8u` for the type whose alignment is one element's."""
    return f"v{dtype}x{lanes}{'' if aligned else 'u'}"


def _mask_dtype(dtype: str) -> str:
    """The integer dtype of the lanes that a comparison of `dtype` vectors gives."""
    return f"i{dtype[1:]}"


_TYPE = re.compile(r"\bv(f32|f64|i32|i64)x(\d+)(u?)\b")
_HELPER = re.compile(r"\bdojo_(splat|loadn|storen|gather\d+|exp|log|sqrt|tanh|erf|abs|max|min|hadd|hmul|hmax|hmin)"
                     r"_(f32|f64|i32|i64)x(\d+)\b")


def used_vector_helpers(source: str) -> list[str]:
    return sorted({m.group(0) for m in _HELPER.finditer(source)})


def vector_helper_source(names: list[str], register_bytes: int | None = None) -> str:
    """Definitions of the named vector helpers and of the helpers they call,
    one per line, each after those it calls, for a target whose vector
    registers hold `register_bytes` (None: `WIDEST_REGISTER_BYTES`)."""
    done: dict[str, str] = {}

    def define(name: str) -> None:
        if name in done:
            return
        done[name] = ""  # a helper never calls itself, but two may call one
        text = _vector_helper(*_HELPER.fullmatch(name).groups(), register_bytes or WIDEST_REGISTER_BYTES)
        for called in used_vector_helpers(text):
            if called != name:
                define(called)
        del done[name]
        done[name] = text

    for name in names:
        define(name)
    return "\n".join(done.values())


def _vector_helper(func: str, dtype: str, lanes_text: str, register_bytes: int) -> str:
    lanes = int(lanes_text)
    if lanes * DTYPE_BYTES[dtype] > register_bytes and (func in ("max", "min") or func in F32_MATH_COMPARING):
        return _halved(func, dtype, lanes)
    v, t = vector_type(dtype, lanes), c_type(dtype)
    name = f"dojo_{func}_{dtype}x{lanes}"
    if func == "splat":
        return f"static inline {v} {name}({t} s) {{ return ({v}){{{', '.join(['s'] * lanes)}}}; }}"
    # The first n lanes, the rest 0, and n a constant once inlined. Lane by lane, not memcpy: a
    # memcpy of part of a local vector makes GCC keep the whole array it came from in memory.
    if func == "loadn":
        return _masked(func, dtype, lanes, f"static inline {v} {name}(const {t} *p, int n) {{ {v} r = {{0}}; "
                                              "for (int k = 0; k < n; ++k) r[k] = p[k]; return r; }")
    if func.startswith("gather"):
        return _gather_helper(int(func.removeprefix("gather")), dtype, lanes)
    if func == "storen":
        return _masked(func, dtype, lanes, f"static inline void {name}({t} *p, {v} a, int n) "
                                              "{ for (int k = 0; k < n; ++k) p[k] = a[k]; }")
    if func in ("max", "min"):
        m = vector_type(_mask_dtype(dtype), lanes)
        compare = ">" if func == "max" else "<"
        # NaN propagates: a NaN in `a` is chosen, and a NaN in `b` loses every comparison
        mask = f"(a {compare} b) | (a != a)" if dtype in FLOAT_DTYPES else f"a {compare} b"
        select = f"(({m})a & m) | (({m})b & ~m)"
        return f"static inline {v} {name}({v} a, {v} b) {{ {m} m = {mask}; return ({v})({select}); }}"
    if func in HORIZONTAL:
        return _horizontal_helper(func, dtype, lanes)
    if dtype == "f32" and func in F32_MATH:
        return F32_MATH[func].format(V=v, M=vector_type("i32", lanes), N=lanes).strip()
    scalar = function_name(func, dtype)
    return (f"static inline {v} {name}({v} a) {{ {v} r; for (int k = 0; k < {lanes}; ++k) r[k] = {scalar}(a[k]); "
            "return r; }")


# AVX-512's masked moves of floats (GCC's builtins, which need no header): vector bytes -> the
# builtins' width and the macro that says the compiler may use them
_MASKED_MOVES = {64: ("512", "__AVX512F__"), 32: ("256", "__AVX512VL__"), 16: ("128", "__AVX512VL__")}


def _masked(func: str, dtype: str, lanes: int, portable: str) -> str:
    """`dojo_loadn` or `dojo_storen` as one masked move where AVX-512 has it, else `portable`,
    lane by lane: GCC moves the lanes of the latter one by one, and an AVX-512 core then writes
    and reads a pooling window's row of 14 floats as 14 scalar stores and loads (an AveragePool
    of 576 channels at 14x14 took 0.48 ms, 0.30 with masked moves)."""
    width = _MASKED_MOVES.get(lanes * DTYPE_BYTES[dtype])
    if dtype not in FLOAT_DTYPES or width is None:
        return portable
    bits, macro = width
    v, t = vector_type(dtype, lanes), c_type(dtype)
    kind, mask = f"{'ps' if dtype == 'f32' else 'pd'}{bits}", "unsigned short" if lanes == 16 else "unsigned char"
    if func == "loadn":
        masked = (f"static inline {v} dojo_loadn_{dtype}x{lanes}(const {t} *p, int n) {{ return "
                  f"__builtin_ia32_loadu{kind}_mask(p, ({v}){{0}}, ({mask})((1u << n) - 1)); }}")
    else:
        masked = (f"static inline void dojo_storen_{dtype}x{lanes}({t} *p, {v} a, int n) {{ "
                  f"__builtin_ia32_storeu{kind}_mask(p, a, ({mask})((1u << n) - 1)); }}")
    return f"#if defined({macro})\n{masked}\n#else\n{portable}\n#endif"


def _halved(func: str, dtype: str, lanes: int) -> str:
    """The helper of a vector wider than the target's registers (16 lanes of f32 on AVX2, 8 on NEON)
    as two of half as many lanes, for the helpers that compare: GCC compares such a vector lane by
    lane, with branches that random data mispredict (a 16-lane max on AVX2 took 23 times an 8-lane
    one's time per element), where it splits arithmetic into registers itself. The halves go
    through a union, which GCC keeps in registers; a shuffle of the wide vector it builds lane by lane."""
    half = lanes // 2
    v, h = vector_type(dtype, lanes), vector_type(dtype, half)
    params = ("a", "b") if func in ("max", "min") else ("a",)
    halves = ", ".join(f"u{p} = {{{p}}}" for p in params)
    calls = [f"r.h[{k}] = dojo_{func}_{dtype}x{half}({', '.join(f'u{p}.h[{k}]' for p in params)});" for k in (0, 1)]
    return (f"static inline __attribute__((always_inline)) {v} dojo_{func}_{dtype}x{lanes}"
            f"({', '.join(f'{v} {p}' for p in params)}) {{ union {{ {v} w; {h} h[2]; }} {halves}, r; "
            f"{' '.join(calls)} return r.w; }}")


_MAX_GATHER_LOADS = 4  # beyond, a strided read is built element by element


def _gather_helper(stride: int, dtype: str, lanes: int) -> str:
    """`dojo_gatherS_f32xL(p)`: p[0], p[S], ..., p[(L-1)S]. The span is loaded as contiguous
    vectors, the last one ending at the last element read (nothing past it is touched), and the
    lanes picked by shuffles, one per vector after the first: a pool's stride 2 is two loads and
    one permutation. A wider stride, whose span would take more loads, reads element by element."""
    v, u, t = vector_type(dtype, lanes), vector_type(dtype, lanes, aligned=False), c_type(dtype)
    name = f"dojo_gather{stride}_{dtype}x{lanes}"
    span = (lanes - 1) * stride + 1
    count = -(-span // lanes)
    if count > _MAX_GATHER_LOADS:
        elements = ", ".join(f"p[{k * stride}]" for k in range(lanes))
        return f"static inline {v} {name}(const {t} *p) {{ return ({v}){{{elements}}}; }}"
    starts = [k * lanes for k in range(count - 1)] + [span - lanes]
    home = [min((k * stride) // lanes, count - 1) for k in range(lanes)]  # the vector holding each lane
    body = [f"{v} r = *(const {u} *)p;"]
    for j in range(1, count):
        # the first shuffle also moves the first vector's lanes into place; later ones keep them
        picks = [lanes + k * stride - starts[j] if home[k] == j else (k * stride if j == 1 else k) if home[k] < j
                 else 0 for k in range(lanes)]
        body.append(f"r = __builtin_shufflevector(r, *(const {u} *)(p + {starts[j]}), {', '.join(map(str, picks))});")
    return f"static inline {v} {name}(const {t} *p) {{ {' '.join(body)} return r; }}"


# The reduction operator -> the helper combining a vector's lanes into one scalar.
HORIZONTAL = {"hadd": "+=", "hmul": "*=", "hmax": "max=", "hmin": "min="}
HORIZONTAL_OF = {assign: func for func, assign in HORIZONTAL.items()}


def _horizontal_helper(func: str, dtype: str, lanes: int) -> str:
    """The lanes of a vector combined as a tree: the two halves lane by lane,
    then the half of that, ... (a reassociation of the reduction)."""
    v, t = vector_type(dtype, lanes), c_type(dtype)
    assign = HORIZONTAL[func]
    name = f"dojo_{func}_{dtype}x{lanes}"
    if lanes == 2:
        return f"static inline {t} {name}({v} a) {{ return {combine(assign, 'a[0]', 'a[1]', dtype)}; }}"
    half = lanes // 2
    h = vector_type(dtype, half)
    lo = f"__builtin_shufflevector(a, a, {', '.join(str(k) for k in range(half))})"
    hi = f"__builtin_shufflevector(a, a, {', '.join(str(k) for k in range(half, lanes))})"
    if assign in REDUCTION_OPERATORS:
        both = f"l {REDUCTION_OPERATORS[assign]} h"
    else:
        both = f"dojo_{REDUCTION_FUNCTIONS[assign]}_{dtype}x{half}(l, h)"
    return (f"static inline {t} {name}({v} a) {{ {h} l = {lo}, h = {hi}; "
            f"return dojo_{func}_{dtype}x{half}({both}); }}")


def used_vector_types(source: str) -> list[tuple[str, int, bool]]:
    """(dtype, lanes, aligned) of every vector type `source` names, sorted."""
    return sorted({(m.group(1), int(m.group(2)), not m.group(3)) for m in _TYPE.finditer(source)})


def vector_typedefs(types: list[tuple[str, int, bool]]) -> str:
    lines = []
    for dtype, lanes, aligned in types:
        size = lanes * DTYPE_BYTES[dtype]
        attributes = f"vector_size({size})" + ("" if aligned else f", aligned({DTYPE_BYTES[dtype]})")
        lines.append(f"typedef {c_type(dtype)} {vector_type(dtype, lanes, aligned)} __attribute__(({attributes}));")
    return "\n".join(lines)


# -- streaming (non-temporal) stores -------------------------------------------------

# The store widths of x86 vector registers, widest first, with the intrinsic
# streaming one register and the feature macro that enables it.
_STREAMS = ((64, "__AVX512F__", "_mm512_stream_ps", "__m512"), (32, "__AVX__", "_mm256_stream_ps", "__m256"),
            (16, "__SSE2__", "_mm_stream_ps", "__m128"))
_STREAM = re.compile(r"\bdojo_stream_(f32|f64|i32|i64)x(\d+)\b")

def used_stream_helpers(source: str) -> list[str]:
    return sorted({m.group(0) for m in _STREAM.finditer(source)})


def stream_helper_source(names: list[str]) -> str:
    """`dojo_sfence` and the named `dojo_stream_*` helpers: on x86 the vector
    is stored with the widest streaming store the target has (each part
    aligned, as the whole is), elsewhere with an ordinary store."""
    if not names:
        return ""
    lines = ["#if defined(__x86_64__) || defined(__i386__)", "#include <immintrin.h>", "#endif",
             "static inline void dojo_sfence(void)", "{", "#if defined(__SSE2__)", "    _mm_sfence();", "#endif", "}"]
    for name in names:
        dtype, lanes_text = _STREAM.fullmatch(name).groups()
        lanes = int(lanes_text)
        v, t = vector_type(dtype, lanes), c_type(dtype)
        size = lanes * DTYPE_BYTES[dtype]
        lines += [f"static inline void {name}({t} *p, {v} v)", "{"]
        first = True
        for width, macro, intrinsic, register in _STREAMS:
            if width > size:
                continue
            lines.append(f"#{'if' if first else 'elif'} defined({macro})")
            first = False
            lines.append(f"    for (int k = 0; k < {size // width}; ++k)")
            lines.append(f"        {intrinsic}((float *)p + {width // 4}*k, ((const {register} *)&v)[k]);")
        lines += ["#else", f"    *({v} *)p = v;", "#endif", "}"]
    return "\n".join(lines)
