"""The order of a register-blocked reduction's blocks, from the host's caches (`agent.passes.register_tile`).

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

That slice is packed too, as BLIS packs both operands: copied once per block of the reduction into a
heap temporary that every thread reads (the column blocks inside are what the threads share), its rows
a block apart where the operand's lie a whole row apart (a power of two for the library's shapes, so
the rows of a register tile's broadcasts fall into one cache set). On the Xeon, matmul's least time
over 9 rounds: 11.46 -> 10.88 ms on one core (torch 9.69), 6.37 -> 6.05 ms on two (torch 5.07),
bench/results/blocking.md.
"""

from __future__ import annotations

from codegen.targets import Target


def reduction_outside_columns(slice_bytes: int, target: Target) -> bool:
    """Whether the blocks of the reduction go outside the column blocks: the slice of the broadcast
    operand that one block of the reduction reads over all the rows (`slice_bytes`) fits in half
    of a core's private cache."""
    return slice_bytes <= target.caches.private // 2

