"""Triton kernels as the GPU7xx rules see them: `@triton.jit` functions, their autotune configs,
constexpr parameters, and which offsets are tiled by a program id or a loop over blocks
(followed by dataflow, for the masking rule).

Everything is read from the module's own text; nothing is imported or executed. A value that
cannot be evaluated from literals (a config list built by a helper, a block size from a
variable) is unknown, and rules stay silent on unknowns.

One module per fact, each importing only those above it:

- `literals`: `triton.language` names, module constants, `evaluate` of literal arithmetic;
- `kernels`: `@triton.jit` functions, their decorators and constexprs, calls between kernels;
- `autotune`: the `triton.Config`s of an autotune decorator;
- `launches`: `kernel[grid](...)` sites and what the host code proves about tiles there;
- `offsets`: the dataflow of tiled offsets inside a kernel, and load/store masks;
- `tiles`: which sizes are tiles, and the shared-memory tiles of a `tl.dot` pipeline;
- `widths`: 64-bit values, and program-id products that offset a pointer in int32.

The names rules use are importable from here.
"""

from gpulint.frontends.python.triton.autotune import (
    TRITON_DEFAULT_STAGES,
    Config,
    autotune_configs,
    comprehension_bindings,
    is_config_call,
    one_config,
    prunes_configs,
)
from gpulint.frontends.python.triton.kernels import (
    Kernel,
    documents_divisibility,
    hints_alignment,
    is_autotune_decorator,
    is_jit_decorator,
    kernel_calls,
    kernel_of,
    kernels,
    unread_sizes,
)
from gpulint.frontends.python.triton.launches import (
    divisibility_flags,
    host_launches,
    launch_bindings,
    launch_divided_tiles,
    launch_padded_buffers,
    launches,
    mod_polarity,
    remote_launches,
)
from gpulint.frontends.python.triton.literals import (
    TL,
    Unknown,
    ceil_division,
    evaluate,
    is_power_of_two,
    is_triton,
    label,
    module_constants,
    tl_name,
)
from gpulint.frontends.python.triton.offsets import (
    ARANGE,
    BLOCKPTR,
    INDEX,
    LOOP,
    NOTHING,
    PADDED,
    PROGRAM,
    START,
    TILE,
    OffsetFlow,
    Offsets,
    access_mask,
    flow,
)
from gpulint.frontends.python.triton.tiles import (
    SmemEstimate,
    SmemTile,
    block_role,
    dot_operand_tiles,
    element_bytes,
    is_tile,
    pipeline_buffers,
    shared_memory_estimate,
    tile_bytes,
    tile_sizes,
)
from gpulint.frontends.python.triton.widths import (
    IndexProduct,
    index_products,
    is_wide,
    wide_names,
    widens_anywhere,
)

__all__ = [
    "ARANGE",
    "BLOCKPTR",
    "INDEX",
    "LOOP",
    "NOTHING",
    "PADDED",
    "PROGRAM",
    "START",
    "TILE",
    "TL",
    "TRITON_DEFAULT_STAGES",
    "Config",
    "IndexProduct",
    "Kernel",
    "OffsetFlow",
    "Offsets",
    "SmemEstimate",
    "SmemTile",
    "Unknown",
    "access_mask",
    "autotune_configs",
    "block_role",
    "ceil_division",
    "comprehension_bindings",
    "divisibility_flags",
    "documents_divisibility",
    "dot_operand_tiles",
    "element_bytes",
    "evaluate",
    "flow",
    "hints_alignment",
    "index_products",
    "host_launches",
    "is_autotune_decorator",
    "is_config_call",
    "is_tile",
    "is_jit_decorator",
    "is_power_of_two",
    "is_triton",
    "is_wide",
    "kernel_calls",
    "kernel_of",
    "kernels",
    "label",
    "launch_bindings",
    "launch_divided_tiles",
    "launch_padded_buffers",
    "launches",
    "mod_polarity",
    "module_constants",
    "one_config",
    "pipeline_buffers",
    "prunes_configs",
    "remote_launches",
    "shared_memory_estimate",
    "tile_bytes",
    "tile_sizes",
    "tl_name",
    "unread_sizes",
    "wide_names",
    "widens_anywhere",
]
