"""The order of a register-blocked reduction's blocks, from the host's caches (`agent.passes._block`).

A blocked reduction `[J/W] [K/KB] [I/R] KB R:u W:u L:v` has three loops of blocks: column blocks (Jo,
one packed panel of the streamed operand each), blocks of the reduction (Ko) and row blocks (Io, one
register tile each). Within a column block and a block of the reduction, the row blocks read a slice
of the broadcast operand, every row by the block's steps. Goto's and BLIS's rule is that each operand
is read from the cache level that holds the block it is reused from: the panel from the first levels,
the slice from the private cache. With the column blocks outermost the slice is read again by every
column block and, once all the slices of the operand outgrow the private cache, comes from the shared
cache or memory each time; with the blocks of the reduction outside the column blocks, one slice is
reused by every column block from the private cache, and only the output's tile is read and written
once more per block of the reduction. So the blocks of the reduction go outside when the slice fits
the half of the private cache that `reduction_block` leaves beside the panel; measured on the Xeon
(2 MiB L2, matmul 768x1024x1024, one core, bench/results/blocking.md).

With several cores, the column blocks are what they share (`tile_shape`'s `cores`); one loop of each
core's share of them outermost keeps one parallel region, where the column blocks inside the
reduction's blocks would start and join the threads at every block of the reduction.
"""

from __future__ import annotations

from codegen.targets import Target


def reduction_outside_columns(slice_bytes: int, target: Target) -> bool:
    """Whether the blocks of the reduction go outside the column blocks: the slice of the broadcast
    operand that one block of the reduction reads over all the rows (`slice_bytes`) fits in half
    of a core's private cache."""
    return slice_bytes <= target.caches.private // 2


def cores_share(column_blocks: int, cores: int) -> int | None:
    """The column blocks in each core's share, so that the shares form a loop of `cores`
    iterations outside the blocks of the reduction; None when they do not share out evenly or a
    share would be a single block (then the column blocks themselves are the cores' loop)."""
    if cores < 2 or column_blocks % cores or column_blocks // cores < 2:
        return None
    return column_blocks // cores
