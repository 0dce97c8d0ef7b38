#!/usr/bin/env bash
# No `hal` method of a backend forwards: a method of an `impl … hal::Trait for Type` block
# whose whole body is one call of the same-named method on one of its arguments
# (`buffer.read(offset, dst)`, `ZeModule::kernel(self, name)`, optionally with a trailing
# `?` or wrapped in `Ok(..)`), or of a method of another name on an argument other than
# `self` that passes on only the other arguments unchanged (`dst.copy_from(dst_offset, src,
# src_offset, len)` for `copy`), is reported, since the implementation belongs in the hal
# method itself. A call on a field of `self` (a wrapper such as the fault injector
# delegating to the object it wraps) or of a free function is not a forward of this kind.
# Exits 1, listing each forward, when it finds any; prints the count either way.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 - "$@" <<'EOF'
import os, re, sys

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, "scripts")
from rust_source import strip  # noqa: E402

def block_end(code, open_at):
    """Index just past the brace matching the `{` at `open_at`."""
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{": depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(code)

def type_name(t):
    """`&mut StreamBuffer<A>` -> `StreamBuffer`."""
    t = re.sub(r"^&\s*(mut\s+)?", "", t.strip())
    m = re.match(r"(?:\w+::)*(\w+)", t)
    return m.group(1) if m else ""

def balanced_call(s):
    """`s` is `<callee>(<args>)` with the parentheses balanced over the whole of it."""
    if not s.endswith(")"):
        return None
    depth = 0
    for j, c in enumerate(s):
        if c == "(":
            if depth == 0: start = j
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0 and j != len(s) - 1:
                return None
    return s[:start], s[start + 1:-1]

IMPL = re.compile(r"\bimpl\b(?:\s*<[^{]*?>)?\s+[^{;]*?\bhal::(\w+)\b[^{;]*?\bfor\s+([\w:]+)[^{;]*\{")
FN = re.compile(r"\bfn\s+(\w+)\s*(?:<[^>]*>)?\s*\(")

found = []
for root in sorted(os.listdir(".")):
    if root in ("target", ".git") or not os.path.isdir(root):
        continue
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ("target", ".git", "tests", "benches", "examples", "fuzz")]
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(d, f)
            text = open(path, encoding="utf-8").read()
            code = strip(text)
            for impl in IMPL.finditer(code):
                self_ty = type_name(impl.group(2))
                body_start = impl.end() - 1
                end = block_end(code, body_start)
                depth1 = code[body_start + 1:end - 1]
                base = body_start + 1
                pos = 0
                while True:
                    m = FN.search(depth1, pos)
                    if not m:
                        break
                    name = m.group(1)
                    # The parameter list.
                    depth, j = 0, m.end() - 1
                    while j < len(depth1):
                        if depth1[j] == "(": depth += 1
                        elif depth1[j] == ")":
                            depth -= 1
                            if depth == 0: break
                        j += 1
                    params_text = depth1[m.end():j]
                    brace = depth1.find("{", j)
                    semi = depth1.find(";", j)
                    if brace < 0 or (0 <= semi < brace):
                        pos = j
                        continue
                    fn_end = block_end(depth1, brace)
                    body = re.sub(r"\s+", "", depth1[brace + 1:fn_end - 1])
                    pos = fn_end
                    params = {"self": self_ty}
                    for p in re.split(r",(?![^<]*>)", params_text):
                        pm = re.match(r"\s*(?:mut\s+)?(\w+)\s*:\s*(.+)", p, re.S)
                        if pm and pm.group(1) != "_":
                            params[pm.group(1)] = type_name(pm.group(2))
                    expr = body
                    if expr.startswith("Ok(") and expr.endswith(")"):
                        expr = expr[3:-1]
                    expr = expr.rstrip("?")
                    call = balanced_call(expr)
                    if not call:
                        continue
                    callee, args = call
                    first = re.split(r",", args, 1)[0].lstrip("&").replace("mut", "", 1) if args else ""
                    forward = False
                    passed = [a.strip().lstrip("&").replace("mut", "", 1) for a in args.split(",") if a.strip()]
                    om = re.fullmatch(r"(\w+)\.(\w+)", callee)
                    if om and om.group(2) == name:
                        forward = om.group(1) in params
                    elif om and om.group(1) in params and om.group(1) != "self" and om.group(2) != "absurd":
                        # Another name, the other arguments passed on unchanged
                        # (`dst.copy_from(dst_offset, src, src_offset, len)`).
                        forward = all(a in params for a in passed)
                    else:
                        um = re.fullmatch(rf"(?:\w+::)*(\w+)::{name}", callee)
                        if um and first in params and um.group(1) in (params[first], "Self"):
                            forward = True
                    if forward:
                        line = text.count("\n", 0, base + m.start()) + 1
                        found.append(f"{path}:{line}: hal::{impl.group(1)} for {self_ty}: fn {name} forwards: {depth1[brace + 1:fn_end - 1].strip()}")

for f in found:
    print(f"forwards.sh: {f}")
print(f"forwards.sh: {len(found)} hal methods whose body only calls the same method on an argument")
sys.exit(1 if found else 0)
EOF
