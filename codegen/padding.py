"""The padding of temporaries' rows that widened vectors read, set to zero before it is read.

    x_s f32 [64, 3, 16] stack      (8 elements per row written, `pad_dim` to 16)
    3 6:v acc[{1}] += x_s[{0},{1},{2}+{1}] * w[...]      (6 lanes computed as 8)
      ->  float b_x_s[3072] __attribute__((aligned(64)));
          for (long dojo_r = 0; dojo_r < 192; ++dojo_r)
              for (long dojo_k = 8; dojo_k < 16; ++dojo_k) b_x_s[dojo_r * 16 + dojo_k] = 0;

A `:v` scope of 6 lanes is one vector of 8 (`cvector.widened_tail`), and its read of a row that
holds all 8 lanes at every iteration is a whole load: its 2 extra lanes reach past the last element
any operation writes (`last_index_reach`) into the row's padding. Their values never reach a
stored lane, but the cores compute with them, and memory nothing wrote holds whatever was there
before: a stack's integers and pointers, read as floats, are subnormal. Intel's cores take a
microcode assist of a hundred cycles or more for each multiply-add with a subnormal operand
(AMD's Zen cores do not), so conv2's heuristic schedule, whose 6-lane tail reads a padded staged
row, ran 5.5 times slower on a Sapphire Rapids than with zeros there. The padding is zeroed where
the buffer is declared (a stack buffer) or when the kernel starts (a heap temporary): the few
elements past each row's end, not the buffer.
"""

from __future__ import annotations

from dojo_ir.affine import affine
from dojo_ir.tree import DTYPE_BYTES, Buffer, Program, walk_op_paths

from .cexpr import buffer_var, storage_size
from .cvector import lane_use, largest_value, last_index_reach, widened_tail


def read_padding(program: Program) -> dict[str, int]:
    """For each temporary whose rows' padding a widened vector reads: the first element of that
    padding in its last dimension (one past the largest index any access reaches)."""
    interface = {program.buffer_of[name].name for name in (*program.inputs, *program.outputs)}
    reach = last_index_reach(program)
    first: dict[str, int] = {}
    for _, op, chain in walk_op_paths(program.body):
        lane = len(chain) - 1
        if lane < 0 or chain[lane].kind != "v" or not op.target.index or lane_use(op.target, lane) != "contiguous":
            continue
        accesses = (op.target, *op.reads)
        tail = widened_tail(chain[lane].size, max(DTYPE_BYTES[program.buffer_of[a.array].dtype] for a in accesses))
        if tail is None or any(lane_use(a, lane) == "strided" for a in op.reads):
            continue
        # a reduction's padded target is read as a whole vector too
        for access in accesses if op.reduction is not None else op.reads:
            buffer = program.buffer_of[access.array]
            if buffer.name in interface or not access.index or lane_use(access, lane) != "contiguous":
                continue
            furthest = largest_value(affine(access.index[-1]), chain, skip=lane) + sum(tail) - 1
            if reach[buffer.name] < furthest < buffer.storage_shape[-1]:
                first[buffer.name] = reach[buffer.name] + 1
    return first


def zero_padding(buffer: Buffer, first: int) -> list[str]:
    """C lines that set elements `first` onwards of every row of `buffer` to zero."""
    row = buffer.storage_shape[-1]
    rows = storage_size(buffer) // row
    return [f"for (long dojo_r = 0; dojo_r < {rows}; ++dojo_r)",
            f"    for (long dojo_k = {first}; dojo_k < {row}; ++dojo_k) "
            f"{buffer_var(buffer.name)}[dojo_r * {row} + dojo_k] = 0;"]
