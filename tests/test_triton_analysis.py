"""The shared Triton analysis (frontends/python/triton/) the GPU7xx rules build on."""

from __future__ import annotations

import ast

import pytest

from gpulint.frontends.python import parse_python
from gpulint.frontends.python import triton as tt
from gpulint.frontends.python.file import PythonFile


def parse(text: str, name: str = "k.py") -> PythonFile:
    return PythonFile(name, text, parse_python(text))


@pytest.mark.parametrize(
    "header, decorator",
    [
        ("import triton", "@triton.jit"),
        ("import triton as tr", "@tr.jit"),
        ("from triton import jit", "@jit"),
        ("import triton", "@triton.jit(do_not_specialize=['T'])"),
        ("from triton import jit", "@jit(debug=True)"),
    ],
)
def test_kernels_found_through_any_import_form(header, decorator):
    f = parse(
        f"{header}\nimport triton.language as tl\n\n{decorator}\ndef k(x, B: tl.constexpr):\n    pass\n"
    )
    (kernel,) = tt.kernels(f)
    assert kernel.name == "k"
    assert list(kernel.constexprs) == ["B"]


def test_plain_functions_and_other_jits_are_not_kernels():
    f = parse(
        "import numba\nimport torch\n@numba.jit\ndef a(x): pass\n@torch.jit.script\ndef b(x): pass\n"
    )
    assert tt.kernels(f) == []


def test_constexpr_defaults_and_heuristics_flags():
    f = parse(
        "import triton\nimport triton.language as tl\n"
        "@triton.heuristics({'EVEN_K': lambda args: args['K'] % args['BLOCK_K'] == 0})\n"
        "@triton.jit\ndef k(x, K, BLOCK_K: tl.constexpr = 32, *, ACT: tl.constexpr = None):\n    pass\n"
    )
    (kernel,) = tt.kernels(f)
    assert set(kernel.constexprs) == {"BLOCK_K", "ACT", "EVEN_K"}
    assert isinstance(kernel.constexprs["BLOCK_K"], ast.Constant)


CONFIGS = """
import triton
import triton.language as tl

NUM_WARPS = [4, 8]
BASE = [triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_stages=2, num_warps=4)]

@triton.autotune(
    configs=BASE + [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=w)
        for bm in [64, 128] for w in NUM_WARPS if bm * w <= 512
    ],
    key=["M"],{prune}
)
@triton.jit
def k(a, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    tl.dot(a, a)
"""


def test_autotune_configs_are_expanded():
    f = parse(CONFIGS.replace("{prune}", ""))
    (kernel,) = tt.kernels(f)
    configs = tt.autotune_configs(f, kernel.autotune)
    assert [(c.kwargs["BLOCK_M"], c.num_warps, c.num_stages, c.stages_given) for c in configs] == [
        (64, 4, 2, True),
        (64, 4, 3, False),  # Triton's default num_stages
        (64, 8, 3, False),
        (128, 4, 3, False),  # 128 * 8 > 512 filtered out by the comprehension's `if`
    ]
    assert not tt.prunes_configs(kernel.autotune)


def test_prune_configs_by_is_seen():
    f = parse(CONFIGS.replace("{prune}", '\n    prune_configs_by={"early_config_prune": prune},'))
    (kernel,) = tt.kernels(f)
    assert tt.prunes_configs(kernel.autotune)


@pytest.mark.parametrize(
    "configs",
    ["get_configs()", "[triton.Config({'B': b}) for b in SIZES]", "CONFIGS if FAST else SLOW"],
)
def test_unknown_config_lists_are_none(configs):
    f = parse(
        f"import triton\nimport triton.language as tl\n@triton.autotune(configs={configs}, key=[])\n"
        "@triton.jit\ndef k(x):\n    pass\n"
    )
    (kernel,) = tt.kernels(f)
    assert tt.autotune_configs(f, kernel.autotune) is None


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("BLOCK_M", "M"),
        ("BLOCK_SIZE_N", "N"),
        ("BLOCK_K_SIZE", "K"),
        ("BM", "M"),
        ("TILE_N", "N"),
        ("BLOCK_DMODEL", None),
        ("BT", None),
        ("GROUP_SIZE_M", None),
    ],
)
def test_block_roles(name, role):
    assert tt.block_role(name) == role


def test_element_bytes():
    def kernel_bytes(body: str, extra: str = "") -> int | None:
        f = parse(
            f"import triton\nimport triton.language as tl\n{extra}\n@triton.jit\ndef k(a):\n{body}\n"
        )
        return tt.element_bytes(f, tt.kernels(f)[0])[0]

    assert kernel_bytes("    x = tl.load(a)") == 2
    assert kernel_bytes("    x = tl.load(a).to(tl.float8e4nv)") == 1
    assert kernel_bytes("    x = tl.load(a)", extra="A = torch.int8") == 1
    assert kernel_bytes("    b = (tl.load(a) >> s) & 0xF") is None
    assert kernel_bytes("    x = tl.load(a)", extra="# int4 weights") is None


def _tile_bits(body: str, expr: str) -> int:
    f = parse(
        "import triton\nimport triton.language as tl\n@triton.jit\n"
        f"def k(x_ptr, n, stride, BLOCK: tl.constexpr, NC: tl.constexpr, D: tl.constexpr):\n{body}\n"
        f"    probe = {expr}\n"
    )
    kernel = tt.kernels(f)[0]
    probe = next(
        n for n in ast.walk(kernel.node) if isinstance(n, ast.Assign) and n.targets[0].id == "probe"
    )
    return tt.flow(f, kernel).of(probe.value).bits & tt.TILE


@pytest.mark.parametrize(
    ("body", "expr", "tiled"),
    [
        (
            "    pid = tl.program_id(0)\n    offs = pid * BLOCK + tl.arange(0, BLOCK)",
            "x_ptr + offs",
            True,
        ),
        (
            "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
            "x_ptr + offs[:, None] * stride",
            True,
        ),
        ("    offs = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)) % n", "x_ptr + offs", False),
        (
            "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    offs = tl.where(offs < n, offs, 0)",
            "x_ptr + offs",
            False,
        ),
        ("    row = tl.program_id(0)", "x_ptr + row * stride + tl.arange(0, D)", False),
        ("    i = tl.program_id(0) % NC", "x_ptr + i * BLOCK + tl.arange(0, BLOCK)", False),
        ("    pid = tl.program_id(0)", "x_ptr + pid * BLOCK + tl.arange(0, 2 * BLOCK)", False),
        (
            "    pid = tl.program_id(0)",
            "x_ptr + (pid + 1) * stride * BLOCK + tl.arange(0, BLOCK)",
            False,
        ),
    ],
)
def test_offsets_tiled_by_program_id(body, expr, tiled):
    assert bool(_tile_bits(body, expr)) is tiled


def test_pipeline_buffers_never_below_one():
    from gpulint.hardware import table

    assert tt.pipeline_buffers(table().archs["sm_121"], 1, 128) == 1
    assert tt.pipeline_buffers(table().archs["sm_90"], 1, 128) == 1


def _kernel(src: str):
    f = parse("import triton\nimport triton.language as tl\n" + src)
    return f, tt.kernels(f)[0]


def test_loop_tiles_follow_the_range_bound():
    base = (
        "@triton.jit\ndef k(x, n, B: tl.constexpr, D: tl.constexpr):\n"
        "    for s in range(0, {stop}, B):\n        probe = x + s + tl.arange(0, B)\n"
    )
    for stop, tiled in [("n", True), ("D", False), ("n // B * B", False), ("helper(n)", False)]:
        f, kernel = _kernel(base.format(stop=stop))
        probe = next(
            n
            for n in ast.walk(kernel.node)
            if isinstance(n, ast.Assign) and n.targets[0].id == "probe"
        )
        assert bool(tt.flow(f, kernel).of(probe.value).tiles) is tiled, stop


def test_pointer_advanced_per_iteration_is_a_loop_tile():
    f, kernel = _kernel(
        "@triton.jit\ndef k(a, K, s, BK: tl.constexpr):\n    p = a + tl.arange(0, BK) * s\n"
        "    for i in range(tl.cdiv(K, BK)):\n        v = tl.load(p)\n        p += BK * s\n"
    )
    load = next(
        n for n in ast.walk(kernel.node) if isinstance(n, ast.Call) and tt.tl_name(f, n) == "load"
    )
    assert tt.flow(f, kernel).of(load.args[0]).tiles == {("BK", tt.LOOP)}


def test_divisibility_flags_and_their_polarity():
    f, kernel = _kernel(
        "@triton.heuristics({'EVEN_K': lambda a: a['K'] % a['BK'] == 0, 'CAUSAL': lambda a: True})\n"
        "@triton.jit\ndef k(x, K, BK: tl.constexpr, EVEN_K: tl.constexpr, CAUSAL: tl.constexpr,\n"
        "      NEED_MASK: tl.constexpr):\n    pass\n"
        "def run(x, K):\n    NEED_MASK = K % 64 != 0\n    k[(1,)](x, K, BK=64, NEED_MASK=NEED_MASK)\n"
    )
    assert tt.divisibility_flags(f, kernel) == {"EVEN_K": True, "NEED_MASK": False}


def test_whole_rows_are_not_tiles_of_a_larger_extent():
    f, kernel = _kernel(
        "@triton.jit\ndef k(x, n, D: tl.constexpr, BLOCK: tl.constexpr):\n"
        "    cols = tl.arange(0, D)\n    m = tl.arange(0, D) < D\n"
        "    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    tl.store(x + o, 0, mask=o < n)\n"
    )
    assert tt.tile_sizes(f, kernel) == {"BLOCK"}  # bounded by a mask against n; D only by itself


def test_flags_passed_after_a_starred_argument_fill_the_last_parameters():
    f, kernel = _kernel(
        "@triton.jit\ndef k(x, s0, s1, m, BLOCK: tl.constexpr, M_MASK: tl.constexpr):\n    pass\n"
        "def run(x, m):\n    k[(1,)](x, *x.stride(), m, 128, m % 128 != 0)\n"
    )
    assert tt.divisibility_flags(f, kernel) == {"M_MASK": False}


def test_constexpr_arithmetic_of_a_tile_is_a_tile():
    known = frozenset({"BLOCK_N", "BLOCK"})
    assert tt.is_tile("BLOCK_N", known)
    assert tt.is_tile("BLOCK_N // 8", known) and tt.is_tile("BLOCK * 2", known)
    assert tt.is_tile("2 * BLOCK", known)
    assert not tt.is_tile("D // 2", known)  # not a tile to begin with
    assert not tt.is_tile("BLOCK // n", known)  # a run-time factor
    assert not tt.is_tile("BLOCK + 1", known) and not tt.is_tile("2 // BLOCK", known)


def test_a_tile_split_or_scaled_by_another_constexpr_is_a_tile():
    known = frozenset({"BLOCK"})
    constexprs = frozenset({"BLOCK", "GROUP"})
    assert tt.is_tile("BLOCK // GROUP", known, constexprs)
    assert tt.is_tile("BLOCK * GROUP", known, constexprs)
    assert tt.is_tile("GROUP * BLOCK", known, constexprs)
    assert not tt.is_tile("BLOCK // GROUP", known)  # GROUP not known to be a constexpr
    assert not tt.is_tile("BLOCK // BLOCK", known, constexprs)
    assert not tt.is_tile("D // GROUP", known, constexprs)  # D is no tile


def test_a_start_scaled_by_a_constexpr_steps_by_the_scaled_size():
    file = parse(
        "import triton\nimport triton.language as tl\n"
        "@triton.jit\n"
        "def k(x, n, BLOCK: tl.constexpr, G: tl.constexpr):\n"
        "    pid = tl.program_id(0)\n"
        "    a = pid * BLOCK // G + tl.arange(0, BLOCK // G)\n"
        "    b = pid * BLOCK * G + tl.arange(0, BLOCK * G)\n"
        "    c = pid * BLOCK * n + tl.arange(0, BLOCK)\n"
    )
    (kernel,) = tt.kernels(file)
    flow = tt.flow(file, kernel)
    body = {s.targets[0].id: s.value for s in kernel.node.body if isinstance(s, ast.Assign)}
    assert flow.of(body["a"]).tiles == {("BLOCK // G", tt.PROGRAM)}
    assert flow.of(body["b"]).tiles == {("BLOCK * G", tt.PROGRAM)}
    assert ("BLOCK * n", tt.PROGRAM) not in flow.of(body["c"]).tiles  # a run-time factor


def test_a_kernel_states_divisibility_in_its_text_or_hints():
    head = "@triton.jit\ndef k(x_ptr, n, B: tl.constexpr):\n"
    cases = [
        ('    """n must be divisible by B."""\n    pass\n', True, False),
        ("    # assumes n is a multiple of B\n    pass\n", True, False),
        ('    """Adds."""\n    pass\n', False, False),
        ("    o = tl.multiple_of(tl.program_id(0) * B, B)\n", False, True),
        ("    o = tl.program_id(0) * B\n", False, False),
    ]
    for body, documented, hinted in cases:
        f, kernel = _kernel(head + body)
        assert tt.documents_divisibility(f, kernel) is documented, body
        assert tt.hints_alignment(f, kernel) is hinted, body


def test_a_start_scaled_by_a_literal_steps_by_the_scaled_size():
    file = parse(
        "import triton\nimport triton.language as tl\n"
        "@triton.jit\n"
        "def k(x, BLOCK: tl.constexpr):\n"
        "    pid = tl.program_id(0)\n"
        "    a = pid * BLOCK // 2 + tl.arange(0, BLOCK // 2)\n"
        "    b = pid * BLOCK * 2 + tl.arange(0, BLOCK * 2)\n"
        "    c = pid * BLOCK // n + tl.arange(0, BLOCK // 2)\n"
    )
    (kernel,) = tt.kernels(file)
    flow = tt.flow(file, kernel)
    body = {s.targets[0].id: s.value for s in kernel.node.body if isinstance(s, ast.Assign)}
    assert flow.of(body["a"]).tiles == {("BLOCK // 2", tt.PROGRAM)}
    assert flow.of(body["b"]).tiles == {("BLOCK * 2", tt.PROGRAM)}
    assert not flow.of(body["c"]).tiles  # divided by a run-time value: no step known


def test_wide_names_follow_casts_annotations_and_assignments():
    f, kernel = _kernel(
        "@triton.jit\ndef k(x_ptr, s: tl.int64, t, u, BLOCK: tl.constexpr):\n"
        "    pid = tl.program_id(0).to(tl.int64)\n"
        "    row = pid // 2\n"
        "    t = tl.cast(t, tl.int64)\n"
        "    other = tl.program_id(1)\n"
        "    u2 = u * 2\n"
    )
    assert tt.wide_names(f, kernel) == {"s", "pid", "row", "t"}
    assert tt.widens_anywhere(f, kernel)
    f, kernel = _kernel(
        "@triton.jit\ndef k(x_ptr, s):\n    tl.store(x_ptr + (s * 2).to(tl.int64), 0)\n"
    )
    assert not tt.wide_names(f, kernel) and tt.widens_anywhere(f, kernel)  # an inline cast
    f, kernel = _kernel("@triton.jit\ndef k(x_ptr, s):\n    x = tl.load(x_ptr + s.to(tl.int32))\n")
    assert not tt.widens_anywhere(f, kernel)


def test_index_products_feed_tile_pointers_and_say_whether_alone():
    f, kernel = _kernel(
        "@triton.jit\n"
        "def k(x_ptr, y_ptr, s_ptr, o_ptr, stride, stride_z, stride_h, n, BLOCK: tl.constexpr):\n"
        "    row = tl.program_id(0)\n"
        "    z = tl.program_id(1)\n"
        "    cols = tl.arange(0, BLOCK)\n"
        "    start = row * stride\n"
        "    x = tl.load(x_ptr + start + cols)\n"  # one product, a tile: alone
        "    s = tl.load(s_ptr + row * n)\n"  # one element per row: no tile
        "    y = tl.load(y_ptr + z * stride_z + row * stride_h + cols)\n"  # two terms
        "    offs_m = tl.arange(0, BLOCK)\n"
        "    tl.store(o_ptr + z * n + offs_m[:, None] * stride, x)\n"  # beside a row tile
        "    unused = row * n\n"  # feeds no pointer
        "    for i in range(n):\n"
        "        tl.store(o_ptr + i * stride + cols, x)\n"  # a loop counter
    )
    got = {(p.text, p.alone, p.wide) for p in tt.index_products(f, kernel)}
    assert got == {
        ("row * stride", True, False),
        ("z * stride_z", False, False),
        ("row * stride_h", False, False),
        ("z * n", False, False),
    }
