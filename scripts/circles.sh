#!/usr/bin/env bash
# No import circle inside any crate of the product: in every crate's src/, at every level of
# its module tree, the sibling modules (a file, or a folder taken whole) use one another
# without a cycle. A use is a path in code — `crate::…`, `super::…`, `self::…`, or a path
# starting with a child module's name — resolved to the module that defines the item,
# following `pub use` re-exports (the crate root's `pub use error::Error` makes
# `crate::Error` a use of `error`); code after `#[cfg(test)]` and comments and strings do
# not count. A parent and its own children are not siblings (a `mod.rs` lists and
# re-exports its children, and children build on what their parent declares), so only
# arrows between siblings can make a circle. Exits 1, listing each circle with one use per
# arrow, when it finds any not listed in scripts/circles.known (the circles still to break;
# the list may only shrink); `--graph` prints every sibling arrow; a crate's folder as an
# argument checks that crate alone, with no list (tests/house_rules.rs plants a circle so).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - "$@" <<'EOF'
import os, re, sys

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, "scripts")
from rust_source import strip  # noqa: E402

def crates():
    roots = []
    for line in open("Cargo.toml").read().split("members = [", 1)[1].split("]", 1)[0].splitlines():
        m = re.search(r'"([^"]+)"', line)
        if m:
            roots.append(m.group(1))
    if os.path.isdir("src"):
        roots.append(".")
    return roots

def modules_of(src):
    """Module path (a tuple) -> file, for every module file under src/."""
    mods = {}
    for d, _, fs in os.walk(src):
        for f in fs:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(d, f), src)[:-3].split(os.sep)
            if rel in (["lib"], ["main"]):
                key = ()
            elif rel[0] == "bin":
                continue
            elif rel[-1] == "mod":
                key = tuple(rel[:-1])
            else:
                key = tuple(rel)
            mods[key] = os.path.join(d, f)
    return mods

USE = re.compile(r"\buse\s+((?:::)?[\w:]+(?:::\{|::\*|\b)[^;]*);", re.S)

def use_paths(tree):
    """The paths a use tree names: `a::{b, c::{d}}` gives a::b and a::c::d."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree))
    out = []
    def walk(prefix, t):
        depth, start, parts = 0, 0, []
        for i, ch in enumerate(t):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(t[start:i])
                start = i + 1
        parts.append(t[start:])
        for p in parts:
            if not p:
                continue
            if "{" in p:
                head, rest = p.split("{", 1)
                walk(prefix + [s for s in head.split("::") if s], rest[:-1])
            else:
                path = prefix + [s for s in p.split("::") if s]
                if path and path[-1] == "self":
                    path = path[:-1]
                out.append(path)
    walk([], tree)
    return out

def analyse(root):
    src = os.path.join(root, "src")
    mods = modules_of(src)
    code = {}
    for key, path in mods.items():
        text = strip(open(path).read())
        code[key] = text.split("#[cfg(test)]")[0]
    # Re-exports: (module, name) -> the path it re-exports (absolute, as a list).
    reexports = {}
    for key, text in code.items():
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
            for p in use_paths(m.group(1)):
                absolute = resolve_rel(key, p, mods)
                if absolute and p[-1] not in ("*", "self"):
                    reexports[(key, p[-1])] = absolute
    def module_of(path, depth=0):
        """The module that defines the item a path (absolute, segments) names."""
        best = ()
        for i in range(len(path), -1, -1):
            if tuple(path[:i]) in mods:
                best = tuple(path[:i])
                rest = path[i:]
                break
        if rest and depth < 8 and (best, rest[0]) in reexports:
            target = reexports[(best, rest[0])] + rest[1:]
            return module_of(target, depth + 1)
        return best
    edges = {}
    for key, text in code.items():
        lines = text.splitlines()
        paths = []
        for n, line in enumerate(lines, 1):
            for m in re.finditer(r"(?<![\w:])((?:crate|super|self|\w+)(?:::(?:\w+|\{))+)", line):
                s = m.group(1)
                if s.endswith("::{"):
                    continue  # a use group: read below from the whole statement
                paths.append((s.split("::"), n))
        for m in USE.finditer(text):
            n = text.count("\n", 0, m.start()) + 1
            for p in use_paths(m.group(1)):
                paths.append((p, n))
        for p, n in paths:
            absolute = resolve_rel(key, p, mods)
            if absolute is None:
                continue
            target = module_of(absolute)
            a, b = key, target
            i = 0
            while i < min(len(a), len(b)) and a[i] == b[i]:
                i += 1
            if i == len(a) or i == len(b):
                continue  # the same module, an ancestor or a descendant
            level = a[:i]
            edges.setdefault((level, a[i], b[i]), []).append(f"{mods[key]}:{n}")
    return edges

def resolve_rel(key, p, mods):
    """An absolute module path for a path `p` used in module `key`, or None (an outside crate)."""
    p = [s for s in p if s not in ("{", "")]
    if not p:
        return None
    if p[0] == "crate":
        return p[1:]
    if p[0] in ("super", "self"):
        base = list(key)
        while p and p[0] in ("super", "self"):
            if p[0] == "super":
                if not base:
                    return None
                base.pop()
            p = p[1:]
        return base + p
    if tuple(key) + (p[0],) in mods:
        return list(key) + p
    return None

def sccs(nodes, succ):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out

args = [a for a in sys.argv[1:] if not a.startswith("--")]
roots = args or crates()
# The circles known when this check came (issue 44), each to be broken: a circle found here
# within one of them passes, a new one (or one that grew) fails, and a known one that is
# gone fails until its line is removed, so the list only shrinks. Not used for a crate
# named on the command line.
known = {}
if not args:
    for line in open("scripts/circles.known"):
        line = line.split("#", 1)[0].strip()
        if line:
            folder, members = line.split(":", 1)
            known[folder.strip()] = {m.strip() for m in members.split(",")}
circles, allowed, arrows, seen = [], [], 0, set()
for root in roots:
    edges = analyse(root)
    arrows += len(edges)
    levels = {}
    for (level, a, b), where in edges.items():
        levels.setdefault(level, {}).setdefault(a, {})[b] = where
    for level, succ in sorted(levels.items()):
        nodes = set(succ) | {b for s in succ.values() for b in s}
        where = os.path.normpath(os.path.join(root, "src", *level))
        if "--graph" in sys.argv:
            for a in sorted(succ):
                print(f"{where}: {a} -> {' '.join(sorted(succ[a]))}")
        for comp in sccs(nodes, succ):
            inside = set(comp)
            lines = [f"circles.sh: a circle in {where}/ between {', '.join(comp)}:"]
            for a in comp:
                for b in sorted(succ.get(a, {})):
                    if b in inside:
                        lines.append(f"    {a} -> {b} ({succ[a][b][0]})")
            if where in known and inside <= known[where]:
                seen.add(where)
                allowed.append(f"{where}/ ({len(comp)} modules)")
            else:
                circles.append("\n".join(lines))
gone = sorted(set(known) - seen)
for c in circles:
    print(c)
for g in gone:
    print(f"circles.sh: the known circle in {g}/ is gone: remove its line from scripts/circles.known")
if allowed:
    print(f"circles.sh: {len(allowed)} known circles still to break (scripts/circles.known): {', '.join(allowed)}")
if circles or gone:
    sys.exit(1)
print(f"circles.sh: {len(roots)} crates, {arrows} arrows between sibling modules, no new circle")
EOF
