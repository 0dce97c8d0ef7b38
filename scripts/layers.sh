#!/usr/bin/env bash
# The layers of offload-core: each top-level module may use only the modules below it, so
# no two modules import each other. And one sync shim: no module but `sync` takes a lock,
# atomic, condition variable or thread-local from std (the model check, `--cfg
# offload_model`, swaps that shim for shuttle's and must see them all; the `model` harness's
# own bookkeeping is exempt). The order, bottom first, is LAYERS below (each layer's
# reason is in that module's top comment). A use is any `crate::module` path, or a name the
# crate root re-exports from a module (`crate::Error` is `error`), in code outside
# comments and outside `#[cfg(test)]` tails. Exits 1, listing every upward use, when the
# code breaks the order; prints the module graph with --graph.
set -euo pipefail
cd "$(dirname "$0")/../offload-core/src"

python3 - "$@" <<'EOF'
import os, re, sys

# Bottom first. `sync` (the lock shim) and `vocab` (plain values) import nothing; the
# runtime handle users hold (`typestate`) and what builds on it sit on top; the reference
# backend uses the whole crate as a backend would. `trace` (the Chrome trace) uses nothing
# of the crate but `sync` and `json` (the JSON string escaper it shares with offload-info,
# which uses nothing): the runtime arms and writes it. The model check (`--cfg
# offload_model`) drives the whole crate from the top.
LAYERS = ["sync", "vocab", "json", "error", "config", "trace", "hal", "erased", "compile", "runtime",
          "handles", "ipc", "typestate", "select", "reference", "model"]
rank = {m: i for i, m in enumerate(LAYERS)}

modules = sorted({os.path.splitext(e)[0] for e in os.listdir(".")} - {"lib"})
unknown = [m for m in modules if m not in rank]
missing = [m for m in LAYERS if m not in modules]
if unknown or missing:
    sys.exit(f"layers.sh: modules not in LAYERS: {unknown}; in LAYERS but gone: {missing}")

# Names the crate root re-exports, by the module they come from.
lib = open("lib.rs").read()
root = {}
for m, body in re.findall(r"pub use (\w+)(?:::\w+)*::\{([^}]*)\}", lib):
    for name in re.findall(r"\w+", body):
        root[name] = m
for m, name in re.findall(r"pub use (\w+)(?:::\w+)*::(\w+);", lib):
    root[name] = m

def files(m):
    if os.path.isdir(m):
        for d, _, fs in os.walk(m):
            for f in fs:
                if f.endswith(".rs"):
                    yield os.path.join(d, f)
    else:
        yield m + ".rs"

def code(path):
    text = open(path).read()
    text = text.split("#[cfg(test)]")[0]
    return "\n".join(re.sub(r"//.*", "", line) for line in text.splitlines())

def target(name):
    if name in rank:
        return name
    return root.get(name)

edges = {}
for m in modules:
    for path in files(m):
        src = code(path)
        names = re.findall(r"crate::(\w+)", src)
        for group in re.findall(r"crate::\{([^}]*)\}", src, re.S):
            names += re.findall(r"(?<![:\w])(\w+)", group)
        for n in names:
            t = target(n)
            if t and t != m:
                edges.setdefault((m, t), set()).add(path)

if "--graph" in sys.argv:
    for m in LAYERS:
        print(f"{m} -> {' '.join(t for t in LAYERS if (m, t) in edges)}")

unshimmed = []
for m in modules:
    if m in ("sync", "model"):
        continue
    for path in files(m):
        for n, line in enumerate(code(path).splitlines(), 1):
            if re.search(r"std::sync::|std::thread_local|(?<!sync::)\bthread_local!", line):
                unshimmed.append(f"{path}:{n}: {line.strip()}")
for u in unshimmed:
    print(f"layers.sh: synchronisation not from crate::sync: {u}")

bad = [(m, t, sorted(p)) for (m, t), p in sorted(edges.items()) if rank[t] > rank[m]]
for m, t, paths in bad:
    print(f"layers.sh: {m} uses {t}, which sits above it: {', '.join(paths)}")
if bad or unshimmed:
    sys.exit(1)
print(f"layers.sh: {len(modules)} modules of offload-core, each using only those below it, \
every lock and atomic from crate::sync")
EOF
