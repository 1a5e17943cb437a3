#!/usr/bin/env python3
"""Report import cycles between the library's top-level modules.

Reads every `src/**/*.rs` file of the library (not the binary: `main.rs` and `cli/`), takes the
top-level module a file belongs to (`src/poll/state.rs` -> `poll`), and collects every
`crate::NAME` path it names (in `use` lines, grouped `use crate::{a, b::c}` lines and inline
paths), ignoring comments. Test code is left out (files named `tests.rs` or `*_tests.rs`, and
`#[cfg(test)] mod NAME { ... }` blocks): it is not part of the library's build, and a test may
reach across modules (a guard test parses a definitions file). It then looks for strongly connected components of that graph: any
component with more than one module is an import loop. Prints the loops and exits 1 if there is
one; prints the edge count and exits 0 otherwise.

Usage: python3 scripts/import-loops.py [--edges]   (run from the repository root)
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent / "src"
# Files that belong to the binary, not the library.
BINARY = {"main.rs", "cli.rs", "cli"}


def top_module(path: pathlib.Path) -> str | None:
    rel = path.relative_to(ROOT)
    first = rel.parts[0]
    if first in BINARY or first == "lib.rs":
        return None
    return first[:-3] if first.endswith(".rs") else first


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def is_test_file(path: pathlib.Path) -> bool:
    return path.name == "tests.rs" or path.name.endswith("_tests.rs")


def strip_test_modules(text: str) -> str:
    """Removes every `#[cfg(test)] mod NAME { ... }` block (braces counted)."""
    out, at = [], 0
    for match in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([a-z]+\))?\s+)?mod\s+\w+\s*\{", text):
        if match.start() < at:
            continue
        out.append(text[at : match.start()])
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        at = i
    out.append(text[at:])
    return "".join(out)


def referenced(text: str) -> set[str]:
    names = set(re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", text))
    # `use crate::{a, b::c, d::{e, f}}`: the first segment of each top-level item of the group.
    for match in re.finditer(r"\bcrate::\{", text):
        depth, i, item, items = 1, match.end(), "", []
        while i < len(text) and depth:
            ch = text[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if depth == 1 and ch == ",":
                items.append(item)
                item = ""
            elif depth >= 1 and not (depth == 1 and ch in "{}"):
                item += ch
            i += 1
        items.append(item)
        for it in items:
            head = re.match(r"\s*([a-z_][a-z0-9_]*)", it)
            if head:
                names.add(head.group(1))
    return names


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in sorted(ROOT.rglob("*.rs")):
        module = top_module(path)
        if module is None or is_test_file(path):
            continue
        edges.setdefault(module, set())
        for name in referenced(strip_test_modules(strip_comments(path.read_text()))):
            if name not in ("self", "super") and name != module:
                edges[module].add(name)
    known = set(edges)
    return {m: {n for n in deps if n in known} for m, deps in edges.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components; those with more than one module."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    edges = graph()
    if "--edges" in sys.argv:
        for m in sorted(edges):
            print(f"{m} -> {', '.join(sorted(edges[m])) or '-'}")
    found = cycles(edges)
    for component in found:
        inside = set(component)
        pairs = [f"{a} -> {b}" for a in component for b in sorted(edges[a]) if b in inside]
        print(f"import loop among {', '.join(component)}: {'; '.join(pairs)}")
    if found:
        print("Break each loop by moving the shared part to a module both can import.")
        return 1
    total = sum(len(d) for d in edges.values())
    print(f"no import loops among {len(edges)} modules ({total} imports)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
