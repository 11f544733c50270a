"""The tree-sitter-cuda grammar, its parser and compiled queries, made once per process."""

from __future__ import annotations

import functools

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser, Query

LANGUAGE = Language(tree_sitter_cuda.language())


@functools.cache
def parser() -> Parser:
    return Parser(LANGUAGE)


@functools.cache
def _query(types: tuple[str, ...]) -> Query:
    pattern = "[" + " ".join(f"({t})" for t in types) + "] @node"
    return Query(LANGUAGE, pattern)


# The node types the front-end and the GPU80x rules ask for. One query captures them all in one
# pass over the tree: compiling a query costs ~50 ms whatever its size, so one compiled query per
# process, and one run per file, beat a query per type.
COMMON_TYPES = (
    "ERROR",
    "assignment_expression",
    "call_expression",
    "declaration",
    "enumerator",
    "field_declaration",
    "function_definition",
    "init_declarator",
    "pointer_expression",
    "preproc_def",
    "preproc_function_def",
    "preproc_include",
    "update_expression",
)


def query(types) -> Query:
    """One query capturing every node of the given types (node type names of the grammar)."""
    return _query(tuple(sorted(set(types))))


@functools.cache
def node_types() -> frozenset[str]:
    """Named node types the grammar knows, so a misspelt `visit_` method is caught early."""
    return frozenset(
        name
        for i in range(LANGUAGE.node_kind_count)
        if LANGUAGE.node_kind_is_named(i) and (name := LANGUAGE.node_kind_for_id(i))
    )


def declared_names(node: Node) -> list[str]:
    """Identifiers a declaration or parameter declares (`int a = 1, *b;` -> a, b)."""
    out = []
    stack = [c for c in node.children_by_field_name("declarator")]
    while stack:
        d = stack.pop()
        if d.type == "identifier":
            out.append((d.text or b"").decode("utf-8", errors="replace"))  # a parsed node has text
        elif d.type in (
            "init_declarator",
            "pointer_declarator",
            "reference_declarator",
            "array_declarator",
            "parenthesized_declarator",
        ):
            inner = d.child_by_field_name("declarator")
            if inner is not None:
                stack.append(inner)
            elif d.type == "reference_declarator":
                stack.extend(c for c in d.named_children if c.type == "identifier")
        elif (
            d.type == "function_declarator"
            and node.parent is not None
            and node.parent.type == "compound_statement"
        ):
            # `std::vector<float> h(n);` in a body: C++'s vexing parse, a variable in practice.
            inner = d.child_by_field_name("declarator")
            if inner is not None and inner.type == "identifier":
                stack.append(inner)
    return out
