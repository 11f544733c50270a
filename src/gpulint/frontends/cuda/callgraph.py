"""The call graph of a CUDA tree as one file sees it: which host function calls which (by name,
with the class a method call reaches), whether a check or a status test follows each call,
which calls run after it, which functions return early on a null pointer (a size query), read
the last error, or are device printers nothing calls, and the class hierarchy, read from the
text. `CudaProject` (project.py) joins these across translation units."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpulint.frontends import MemoKey
from gpulint.frontends.cuda.syntax import braced, function_name, on_path_after

if TYPE_CHECKING:
    from tree_sitter import Node

    from gpulint.frontends.cuda.file import CudaFile

# How many callers up a launch is followed (launcher <- helper <- op <- layer ...): bounded,
# so the project index stays a few passes over the call facts.
DEPTH = 5


@dataclass(frozen=True)
class CallSite:
    caller: str  # the calling host function (or "" at file scope)
    path: str  # where, as displayed
    line: int
    checked: bool  # a launch check follows the call in the caller, or the result is used
    owner: str = ""  # the class of the caller, when it is a method (`Layer<T>::forward`)
    # the class whose method is called, when the call names it: `layer_->forward(...)` where
    # the file sets `layer_ = new AttentionLayer<T>(...)` or declares `AttentionLayer<T>* layer_`
    # (a call of the class's own method inside another of its methods too)
    target: str = ""
    # calls after this one in the caller, when it is not checked: "name:class" joined by ","
    # (a later call of a function that reads the last error reports this call's failure too)
    later: str = ""
    # the check names after the call in the caller, when a later check is what checks it (a
    # call checked only by the project's debug-only checks is not checked in a release build)
    via: str = ""


def is_method(file: CudaFile, function: Node) -> bool:
    """A member function: defined in a class body, or out of line as `Cls::name`."""
    if file.macro_name(function) is not None:
        return False
    declarator = file.function_name_node(function)
    inner = declarator.child_by_field_name("declarator") if declarator is not None else None
    if inner is not None and inner.type in ("qualified_identifier", "field_identifier"):
        return True
    return any(a.type == "field_declaration_list" for a in file.ancestors(function))


# A statement after which the rest of its block never runs: `return`, `throw`, a call that
# does not return, an assertion of `false` (`FT_CHECK(false)`, `TORCH_CHECK(false, "...")`).
_NO_RETURN = re.compile(
    rb"^(?:return\b|throw\b|(?:std::)?(?:abort|exit|_Exit|quick_exit)\s*\(|__builtin_unreachable\b"
    rb"|\w*THROW\w*\s*\(|\w*(?i:check|assert)\w*\s*\(\s*(?:false|0)\s*[,)])"
)


_DEAD_STATEMENTS: MemoKey[dict[int, frozenset[int]]] = MemoKey("cuda.dead_statements")
_PARAMETERS: MemoKey[dict[int, list[str]]] = MemoKey("cuda.parameters")


def unreachable(file: CudaFile, call: Node, function: Node) -> bool:
    """`call` follows, in its own block or one around it, a statement that never returns (a
    call placed after `FT_CHECK(false);` is dead code: no caller of anything)."""
    blocks = file.memo.get(_DEAD_STATEMENTS, dict)
    node = call
    for a in file.ancestors(call):
        if a == function or a.type == "lambda_expression":
            return False
        if a.type == "compound_statement":
            dead = blocks.get(a.start_byte)
            if dead is None:  # once per block: its statements after a no-return one
                found, after = set(), False
                for sibling in a.named_children:
                    if sibling.type in ("labeled_statement", "case_statement"):
                        after = False  # reachable by a jump
                    if after:
                        found.add(sibling.start_byte)
                    text = file.data[sibling.start_byte : sibling.end_byte]
                    if sibling.type in ("return_statement", "throw_statement") or (
                        sibling.type == "expression_statement" and _NO_RETURN.match(text)
                    ):
                        after = True
                dead = blocks[a.start_byte] = frozenset(found)
            if node.start_byte in dead:
                return True
        node = a
    return False


_NULL = frozenset({"nullptr", "NULL", "0"})


def null_args(file: CudaFile, call: Node, function: Node) -> list[list[Any]]:
    """[positions of the arguments of `call` written as a null pointer, [position, parameter
    index] of those that pass a parameter of the caller on unchanged]."""
    args = call.child_by_field_name("arguments")
    if args is None:
        return [[], []]
    params = _parameters(file, function) if file.macro_name(function) is None else []
    nulls: list[int] = []
    passes: list[list[int]] = []
    for i, a in enumerate(x for x in args.named_children if x.type != "comment"):
        text = file.node_text(a).strip()
        if text in _NULL:
            nulls.append(i)
        elif a.type == "identifier" and text in params:
            passes.append([i, params.index(text)])
    return [nulls, passes]


_NULL_TEST = re.compile(
    rb"^\(\s*(?:!\s*(\w+)|(\w+)\s*==\s*(?:nullptr|NULL|0)|(?:nullptr|NULL|0)\s*==\s*(\w+))\s*\)$"
)


def null_exits(file: CudaFile) -> dict[str, list[int]]:
    """Host functions that return before any launch when a pointer parameter is null (a
    workspace-size query: `if (workspace == nullptr) { size = ...; return; }`): name ->
    the positions of those parameters. A call passing null there launches nothing."""
    out: dict[str, set[int]] = {}
    if b"return" not in file.data:
        return {}
    for branch in file.nodes("if_statement"):
        condition = branch.child_by_field_name("condition")
        if condition is None:
            continue
        m = _NULL_TEST.match(file.data[condition.start_byte : condition.end_byte])
        if m is None:
            continue
        then = branch.child_by_field_name("consequence")
        text = file.data[then.start_byte : then.end_byte] if then is not None else b""
        if b"return" not in text or b"<<<" in text:
            continue
        function = file.enclosing_function(branch)
        if function is None or file.is_device_function(function):
            continue
        body = file.data[function.start_byte : branch.start_byte]
        if b"<<<" in body or any(
            a.type in ("for_statement", "while_statement", "do_statement", "for_range_loop")
            for a in _ancestors_to(file, branch, function)
        ):
            continue  # a launch before it, or a loop around it: not a query's early exit
        params = _parameters(file, function)
        name = function_name(file, function)
        tested = (m.group(1) or m.group(2) or m.group(3)).decode("ascii", "replace")
        if name and tested in params:
            out.setdefault(name, set()).add(params.index(tested))
    return {n: sorted(v) for n, v in sorted(out.items())}


def method_called(file: CudaFile, call: Node) -> str | None:
    """`forward` of `layer_->forward(...)` / `layer.forward(...)`."""
    fn = call.child_by_field_name("function")
    if fn is not None and fn.type == "field_expression":
        field = fn.child_by_field_name("field")
        if field is not None and field.type == "field_identifier":
            return file.node_text(field)
    return None


def functor_key(file: CudaFile, function: Node) -> str | None:
    """`Cls::operator()` for a functor's call operator (`struct Cls { void operator()(...) }`,
    or out of line `void Cls<T>::operator()(...)`): the name its calls are matched by across
    translation units, where a bare `operator()` would match every functor's."""
    if function_name(file, function) != "operator()" or not is_method(file, function):
        return None
    owner = _class_of(file, function)
    return f"{owner}::operator()" if owner else None


_FUNCTORS: MemoKey[dict[str, str]] = MemoKey("cuda.functor_objects")


def functor_objects(file: CudaFile) -> dict[str, str]:
    """Objects the file gives one class, by name (see `functor_called`), once per file."""
    return file.memo.get(_FUNCTORS, lambda: _functor_objects(file))


def _functor_objects(file: CudaFile) -> dict[str, str]:
    # Declarations without constructor arguments only (`Cls<T> ftor;`, `Cls ftor{};`, over
    # two lines too): `Tensor gather(...)` is a function returning a class, not an object.
    objects: dict[str, str] = {}
    for m in _DECLARED_FUNCTOR.finditer(file.data):
        name, cls = m.group(2).decode("ascii", "replace"), m.group(1).decode("ascii", "replace")
        if objects.setdefault(name, cls) != cls:
            objects[name] = ""
    return objects


def functor_called(file: CudaFile, call: Node) -> str | None:
    """`Cls::operator()` for a call of an object the file gives one class (`ftor(d, out, n)`
    after `functor::Cls<tv::TorchGPU, T> ftor;`)."""
    fn = call.child_by_field_name("function")
    if fn is None or fn.type != "identifier":
        return None
    owner = functor_objects(file).get(file.node_text(fn), "")
    return f"{owner}::operator()" if owner else None


# `functor::Cls<tv::TorchGPU, scalar_t, int>\n    ftor;`, `Cls ftor{};`: a class-typed object
# declared without arguments
_DECLARED_FUNCTOR = re.compile(
    rb"\b([A-Z]\w*)(?:<[^;(){}<>]{0,120}(?:<[^;(){}<>]{0,40}>)?[^;(){}<>]{0,40}>)?\s+([a-z_]\w*)\s*(?:;|\{\s*\})"
)


_BRANCHES = frozenset(
    {"if_statement", "switch_statement", "conditional_expression", "case_statement"}
    | {"preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "lambda_expression"}
)


def runs_after(file: CudaFile, call: Node, later: Node) -> bool:
    """`later` runs whenever `call` has run, no branch (runtime or preprocessor) around it."""
    return on_path_after(file, call, later, _BRANCHES)


def last_error_readers(file: CudaFile) -> list[str]:
    """ "name:class" of the host functions that call a check (the file's or project's, or a
    last-error read): which of those read the last error is known once the project is
    merged (its `last_error_checks`). [name:class:check, ...]"""
    from gpulint.frontends.cuda.checknames import LAST_ERROR_CHECKS

    names = file.check_names | LAST_ERROR_CHECKS
    out: set[str] = set()
    for fn in file.nodes("function_definition"):
        if file.is_device_function(fn):
            continue
        text = file.data[fn.start_byte : fn.end_byte]
        found = {
            n
            for m in CALLED_BYTES.finditer(text)
            if (n := m.group(1).decode("ascii", "replace")) in names
        }
        if found:
            name = function_name(file, fn) or ""
            owner = _class_of(file, fn) if is_method(file, fn) else ""
            out.update(f"{name}:{owner}:{n}" for n in found)
    return sorted(out)


def _class_of(file: CudaFile, function: Node) -> str:
    """The class a method belongs to: `Cls` of `Cls<T>::run`, or the class around it."""
    declarator = file.function_name_node(function)
    inner = declarator.child_by_field_name("declarator") if declarator is not None else None
    if inner is not None and inner.type == "qualified_identifier":
        scope = inner.child_by_field_name("scope")
        return _type_name(file.node_text(scope))
    for a in file.ancestors(function):
        if a.type in ("class_specifier", "struct_specifier"):
            return _type_name(file.node_text(a.child_by_field_name("name")))
    return ""


def _type_name(text: str) -> str:
    """`ns::Layer<T>` -> `Layer`."""
    return text.split("<", 1)[0].strip().rsplit("::", 1)[-1].strip()


# `layer_ = new Layer<T>(...)`; `Layer<T>* layer_;`, `Layer layer(...)` (a class name is
# capitalised, as most C++ code bases write them): read from the text, which is much
# cheaper than the tree's declarations.
_NEW_OBJECT = re.compile(rb"=[ \t]*new[ \t]+(?:\w+::)*(\w+)")
_ASSIGNED = re.compile(rb"(\w+)[ \t]*$")
_DECLARED_OBJECT = re.compile(
    rb"\b([A-Z]\w*)(?:<[^;(){}\n<>]{0,80}(?:<[^;(){}\n<>]{0,40}>)?>)?[ \t]*[*&]*[ \t]*([a-z_]\w*)[ \t]*[;=({]"
)


def _object_classes(file: CudaFile) -> dict[str, str]:
    """Names of objects the file gives one class: `layer_ = new Layer<T>(...)`,
    `Layer<T>* layer_;`, `Layer<T> layer(...)` -> {"layer_": "Layer"}. A name given two
    classes maps to ""."""
    found: dict[bytes, set[bytes]] = {}
    for m in _NEW_OBJECT.finditer(file.data):
        lhs = _ASSIGNED.search(file.data, max(0, m.start() - 80), m.start())
        if lhs is not None:
            found.setdefault(lhs.group(1), set()).add(m.group(1))
    for m in _DECLARED_OBJECT.finditer(file.data):
        found.setdefault(m.group(2), set()).add(m.group(1))
    return {
        n.decode("ascii", "replace"): next(iter(c)).decode("ascii", "replace")
        if len(c) == 1
        else ""
        for n, c in found.items()
    }


def classes_of(file: CudaFile, call: Node, function: Node, objects: dict[str, str]) -> list[str]:
    """[the class of the calling method or "", the class whose method the call reaches or ""]."""
    owner = _class_of(file, function) if is_method(file, function) else ""
    fn = call.child_by_field_name("function")
    if fn is not None and fn.type == "field_expression":
        receiver = file.node_text(fn.child_by_field_name("argument")).strip()
        if receiver == "this":
            return [owner, owner]
        m = re.search(r"(\w+)$", receiver)
        if m is None:
            return [owner, ""]
        if not objects:
            objects.update(_object_classes(file) or {"": ""})
        return [owner, objects.get(m.group(1), "")]
    if fn is not None and fn.type == "identifier" and owner:
        return [owner, owner]  # a method calling one of its class (or, virtual, of one deriving)
    return [owner, ""]


def _ancestors_to(file: CudaFile, node: Node, stop: Node) -> Iterator[Node]:
    for a in file.ancestors(node):
        if a == stop:
            return
        yield a


def _parameters(file: CudaFile, function: Node) -> list[str]:
    """The parameter names of `function`, in order ("" for an unnamed one)."""
    memo = file.memo.get(_PARAMETERS, dict)
    found = memo.get(function.start_byte)
    if found is None:
        found = memo[function.start_byte] = _parameter_names(file, function)
    return found


def _parameter_names(file: CudaFile, function: Node) -> list[str]:
    declarator = file.function_name_node(function)
    params = declarator.child_by_field_name("parameters") if declarator is not None else None
    out = []
    for p in params.named_children if params is not None else ():
        if p.type == "comment":
            continue
        found = ""
        d = p.child_by_field_name("declarator")
        while d is not None:
            if d.type == "identifier":
                found = file.node_text(d)
                break
            d = d.child_by_field_name("declarator")
        out.append(found)
    return out


# Calls that are never a launcher of the project (keeps the facts small).
NOT_CALLEES = frozenset(
    "printf fprintf sizeof static_cast reinterpret_cast min max std size data_ptr "
    "TORCH_CHECK AT_ASSERTM assert malloc free memcpy memset".split()
)


CALLED_BYTES = re.compile(rb"\b([A-Za-z_]\w*)\s*\(")
# Per scope (start, end, configured checks): where its last launch check ends. Depends on the


_CLASS_BASES = re.compile(
    rb"\b(?:class|struct)\s+(\w+)\s*(?:final\s*)?:(?!:)\s*([^{};()]{1,400})\{"
)
_BASE = re.compile(
    rb"(?:public|protected|private|virtual|\s)*([\w:]+)(?:<[^<>]*(?:<[^<>]*>[^<>]*)*>)?"
)


def class_bases(files: Iterable[tuple[str, bytes]]) -> frozenset[str]:
    """ "Derived:Base" pairs of the classes the files define deriving from others (`class
    GeluLayer: public FfnLayer<T>`), read from the text: a method's calls are matched
    through the class hierarchy (GPU802's callers)."""
    out = set()
    for _, data in files:
        if b"class" not in data and b"struct" not in data:
            continue
        for m in _CLASS_BASES.finditer(data):
            derived = m.group(1).decode("ascii", "replace")
            clause = m.group(2)
            depth = 0
            part = b""
            for ch in clause + b",":
                c = bytes([ch])
                if c == b"<":
                    depth += 1
                elif c == b">":
                    depth -= 1
                if c == b"," and depth == 0:
                    b = _BASE.match(part.strip())
                    if b is not None and b.group(1):
                        out.add(
                            f"{derived}:{b.group(1).decode('ascii', 'replace').rsplit('::', 1)[-1]}"
                        )
                    part = b""
                else:
                    part += c
    return frozenset(out)


_HEAD = re.compile(
    rb"\b([A-Za-z_]\w*)\s*\((?:[^;{}()]|\([^;{}()]*\))*\)\s*(?:const\s*)?(?:noexcept\s*)?\{"
)
_DEVICE_QUALIFIER = re.compile(rb"\b__device__\b|\b[A-Z][A-Z0-9_]*_DEVICE\b")
_NOT_HEADS = frozenset({b"if", b"for", b"while", b"switch", b"catch", b"return", b"sizeof"})


def uncalled_device_printers(files: Iterable[tuple[str, bytes]]) -> frozenset[str]:
    """ "path:name" of the `__device__` functions (`__host__ __device__`, `KITTENS_DEVICE`-style
    macros too) whose body calls `printf` and whose name no file of the checked tree mentions
    besides the heads of its definitions (a call, a declaration, a pointer, a comment naming it
    all count as a use):
    debugging helpers beside the printing utilities that no kernel calls. Read from the text.
    A tree of one file gives none: the callers of a header linted alone are not in sight."""
    files = files if isinstance(files, list) else list(files)
    if len(files) < 2:
        return frozenset()
    candidates: dict[bytes, list[str]] = {}  # name -> paths defining a printing one
    for path, data in files:
        if b"printf" not in data or not _DEVICE_QUALIFIER.search(data):
            continue
        for m in _HEAD.finditer(data):
            name = m.group(1)
            if name in _NOT_HEADS:
                continue
            start = max(data.rfind(b";", 0, m.start()), data.rfind(b"}", 0, m.start()))
            start = max(start, data.rfind(b"{", 0, m.start()), data.rfind(b"\n#", 0, m.start()))
            declaration = data[start + 1 : m.start()]
            body = braced(data, m.end() - 1, limit=40000, max_lines=None)
            if (
                body is not None
                and _DEVICE_QUALIFIER.search(declaration)
                and b"printf" in body
                and b"__global__" not in declaration
            ):
                candidates.setdefault(name, []).append(path)
    if not candidates:
        return frozenset()
    # Uses beyond the definitions: the defining files and their folders first (where most
    # helpers are called), the rest of the tree only for names not yet seen used.
    folders = {p.replace("\\", "/").rpartition("/")[0] for ps in candidates.values() for p in ps}
    near = [f for f in files if f[0].replace("\\", "/").rpartition("/")[0] in folders]
    rest = [f for f in files if f[0].replace("\\", "/").rpartition("/")[0] not in folders]
    used: set[bytes] = set()  # a mention that is not a definition's head
    for _, data in near + rest:
        for name in [n for n in candidates if n not in used and n in data]:
            for m in re.finditer(rb"\b" + re.escape(name) + rb"\b", data):
                if not _HEAD.match(data, m.start()):
                    used.add(name)
                    break
        if len(used) == len(candidates):
            break
    return frozenset(
        f"{path}:{name.decode('ascii', 'replace')}"
        for name, paths in candidates.items()
        if name not in used
        for path in paths
    )


# (template arguments may hold parentheses: `launch<sizeof(T) * 8>(...)`)
_CALL_BYTES = re.compile(rb"\b([A-Za-z_]\w*)\s*(?:<(?:[^;()]|\([^;()]*\))*>\s*)?\(")


def called_names(data: bytes, memo: dict[int, set[str]]) -> set[str]:
    """Names a file calls (read from its text once per run)."""
    found = memo.get(id(data))
    if found is None:
        found = memo[id(data)] = {m.decode("ascii", "replace") for m in _CALL_BYTES.findall(data)}
    return found
