"""Kernels that several moves' examples start from (each move module keeps
its own before/after pairs; these are the befores they share)."""

# FORMAT.md's softmax at 4 x 8 after the five joins: one row loop.
FUSED_SOFTMAX = """kernel softmax(x) -> y

x f32 [4, 8] heap
y f32 [4, 8] heap
m f32 [4] heap
e f32 [4, 8] heap
s f32 [4] heap

4 m[{0}] = -inf
| 8 m[{0}] max= x[{0},{1}]
| 8 e[{0},{1}] = exp(x[{0},{1}] - m[{0}])
| s[{0}] = 0
| 8 s[{0}] += e[{0},{1}]
| 8 y[{0},{1}] = e[{0},{1}] / s[{0}]
"""

# The paper's Figure 6 after join_scopes: t[i] is produced and consumed in iteration i.
FUSED_PAIR = """kernel k(x) -> y

x f32 [4] heap
y f32 [4] heap
t f32 [4] heap

4 t[{0}] = exp(x[{0}])
| y[{0}] = t[{0}] + 1
"""

# matmul with its k scope in blocks of 4 (split_scope), each row and tile of columns inside a block.
MATMUL_IN_K_BLOCKS = """kernel mm(a, b) -> c

a f32 [4, 8] heap
b f32 [8, 16] heap
c f32 [4, 16] heap

4 16 c[{0},{1}] = 0
2 4 4 16 c[{1},{3}] += a[{1},{0}*4+{2}] * b[{0}*4+{2},{3}]
"""

# The same with each block's tile of `b` packed first (stage_reads).
MATMUL_B_PACKED = """kernel mm(a, b) -> c

a f32 [4, 8] heap
b f32 [8, 16] heap
c f32 [4, 16] heap
b_s f32 [2:1, 4, 16] heap

4 16 c[{0},{1}] = 0
2 4 16 b_s[{0},{1},{2}] = b[{0}*4+{1},{2}]
| 4 4 16 c[{1},{3}] += a[{1},{0}*4+{2}] * b_s[{0},{2},{3}]
"""
