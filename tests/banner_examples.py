#!/usr/bin/env python3
"""Compile the banner example of every public rill header.

Every public header (core/include, operators/include, connectors/include, include/,
examples/nexmark/include; detail/ excluded) starts with a banner that shows a short example. This script extracts
that example, wraps it in a translation unit and compiles it (-fsyntax-only) with the
flags CMake uses for the tests, so a banner cannot drift from the API. A header without
an example fails with its name.

Banner convention (read by this script):

    // Example (compiled by tests/banner_examples.py):
    //   rill::record<int> r{42, rill::event_time{5s}};
    //   r.value += 1;
    //
    // Prose continues here ...

  - the block starts at the first comment line that begins with "// Example"; that
    heading may run over several lines and ends with a line ending in ":";
  - it holds the following lines of the form "//   code" (at least two spaces after
    "//") and empty "//" lines; it ends at the first other line;
  - by default the code is a function body; "(namespace scope" in the first line puts it
    at namespace scope instead (for examples that define types or main);
  - the example's own `#include <...>` lines (what it uses from other headers) are moved
    to the top of the translation unit.

The translation unit is: the standard headers below, `#include` of the header itself,
`using namespace std::chrono_literals;`, then the code, with #line directives so a
compiler error names the header and the banner line. Variables an example declares for
show may be unused: -Wno-unused-* only; every other warning is an error.

Usage (ctest runs both):
    tests/banner_examples.py --build-dir build [-j 2] [-v] [headers...]
    tests/banner_examples.py --build-dir build --self-test   # the checker catches a missing
                                                             # and a broken example
Exit status 0 when every header outside KNOWN_EXCEPTIONS compiles, 1 otherwise.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import textwrap

PUBLIC_INCLUDE_DIRS = [
    "core/include",
    "operators/include",
    "connectors/include",
    "include",
    "examples/nexmark/include",
]

# Headers whose banner example may fail without failing the run (compiled and reported;
# one that passes is reported so it can come off). Empty: every banner compiles.
KNOWN_EXCEPTIONS: set = set()

PRELUDE_INCLUDES = [
    "array", "cassert", "chrono", "cstddef", "cstdint", "cstdio", "functional",
    "iostream", "map", "memory", "span", "string", "string_view", "unordered_map",
    "utility", "vector",
]

EXTRA_FLAGS = [
    "-Werror",
    "-Wno-unused-variable",
    "-Wno-unused-but-set-variable",
    "-Wno-unused-parameter",
    "-Wno-unused-function",
    "-Wno-unused-local-typedefs",
]

EXAMPLE_START = re.compile(r"^//\s*Example\b")
CODE_LINE = re.compile(r"^//( {2,}.*)?$")


def public_headers(source_dir):
    out = []
    for d in PUBLIC_INCLUDE_DIRS:
        root = os.path.join(source_dir, d)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(n for n in dirnames if n != "detail")
            for f in sorted(filenames):
                if f.endswith(".hpp"):
                    full = os.path.join(dirpath, f)
                    out.append((os.path.relpath(full, source_dir), full, os.path.relpath(full, root)))
    return out


def extract_example(path):
    """Returns (scope, first_line_number, code) or None. scope: 'function' | 'namespace'."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("//"):
            break  # the banner is the leading comment block
        if EXAMPLE_START.match(line):
            heading, j = line, i + 1
            while not lines[j - 1].rstrip().endswith(":") and j < len(lines) and lines[j].startswith("// "):
                heading += " " + lines[j][3:]
                j += 1
            scope = "namespace" if "(namespace scope" in heading else "function"
            body, first = [], j + 1
            while j < len(lines) and CODE_LINE.match(lines[j]):
                body.append(lines[j][3:] if len(lines[j]) > 3 else "")
                j += 1
            while body and not body[-1].strip():
                body.pop()
            if not any(b.strip() for b in body):
                return None
            return scope, first, textwrap.dedent("\n".join(body))
    return None


def make_tu(header_path, include_name, example):
    scope, line_no, code = example
    parts = [f"#include <{h}>" for h in PRELUDE_INCLUDES]
    parts.append(f"#include <{include_name}>")
    # An example's own #include lines go to the top; a blank line keeps the numbering.
    kept = []
    for line in code.split("\n"):
        if line.lstrip().startswith("#include"):
            parts.append(line.strip())
            kept.append("")
        else:
            kept.append(line)
    code = "\n".join(kept)
    parts.append("using namespace std::chrono_literals;")
    if scope == "namespace":
        parts.append(f'#line {line_no} "{header_path}"')
        parts.append(code)
    else:
        parts.append("[[maybe_unused]] static void banner_example() {")
        parts.append(f'#line {line_no} "{header_path}"')
        parts.append(code)
        parts.append("}")
    return "\n".join(parts) + "\n"


def compile_flags(build_dir, source_dir):
    """The flags CMake uses for a test that links rill::rill, minus -o/-c and the file."""
    db_path = os.path.join(build_dir, "compile_commands.json")
    with open(db_path, encoding="utf-8") as f:
        db = json.load(f)
    want = os.path.join("tests", "operators", "banner_examples_test.cpp")
    entry = next((e for e in db if e["file"].endswith(want)), None)
    if entry is None:
        entry = next((e for e in db if os.sep + "tests" + os.sep in e["file"]), None)
    if entry is None:
        sys.exit(f"no test entry in {db_path}")
    args = entry.get("arguments") or shlex.split(entry["command"])
    if args and "ccache" in os.path.basename(args[0]):
        args = args[1:]
    cxx, out, skip = args[0], [], False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c"):
            skip = True
            continue
        if a == entry["file"] or a.endswith(".cpp"):
            continue
        out.append(a)
    return cxx, out


def self_test(build_dir, jobs):
    """Runs the checker on three made-up headers: one without an example, one whose
    example does not compile, one whose namespace-scope example does. The checker must
    fail exactly the first two, so this test can fail."""
    import shutil
    root = tempfile.mkdtemp(prefix="rill-banner-self-")
    try:
        for d in PUBLIC_INCLUDE_DIRS:
            os.makedirs(os.path.join(root, d), exist_ok=True)
        core = os.path.join(root, "core/include/rill/core")
        os.makedirs(core)
        files = {
            "a.hpp": "// rill/core/a.hpp: no example.\n#pragma once\n",
            "b.hpp": "// rill/core/b.hpp: a broken example.\n//\n"
                     "// Example (compiled by tests/banner_examples.py):\n"
                     "//   int x = undefined_name;\n#pragma once\n",
            "c.hpp": "// rill/core/c.hpp: a good example.\n//\n"
                     "// Example (namespace scope, compiled by tests/banner_examples.py):\n"
                     "//   #include <rill/core/a.hpp>\n"
                     "//   struct s { int v = 1; };\n"
                     "//   int main() { return s{}.v - 1; }\n#pragma once\n",
        }
        for name, text in files.items():
            with open(os.path.join(core, name), "w", encoding="utf-8") as f:
                f.write(text)
        failed = run(root, build_dir, jobs, verbose=False, only=[], known=set())
        want = ["core/include/rill/core/a.hpp", "core/include/rill/core/b.hpp"]
        if sorted(failed) != want:
            print(f"self-test FAILED: the checker failed {sorted(failed)}, expected {want}")
            return 1
        print("self-test passed: a missing and a broken example fail, a good one passes")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--build-dir", required=True, help="a CMake build tree with compile_commands.json")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--self-test", action="store_true", help="check the checker on made-up headers")
    ap.add_argument("headers", nargs="*", help="only these (paths relative to the source dir)")
    a = ap.parse_args()
    if a.self_test:
        return self_test(os.path.abspath(a.build_dir), a.j)
    failed = run(os.path.abspath(a.source_dir), os.path.abspath(a.build_dir), a.j, a.verbose,
                 a.headers, KNOWN_EXCEPTIONS)
    return 1 if failed else 0


def run(source_dir, build_dir, jobs, verbose, only, known):
    """Checks every public header under source_dir; prints a line per header and returns
    the failing ones that are not in `known`."""
    cxx, flags = compile_flags(build_dir, source_dir)
    # The headers under test come first (the build tree's flags may point at another tree).
    flags = [f"-I{os.path.join(source_dir, d)}" for d in PUBLIC_INCLUDE_DIRS] + flags
    headers = public_headers(source_dir)
    if only:
        headers = [h for h in headers if h[0] in only]

    tmp = tempfile.mkdtemp(prefix="rill-banner-")
    tasks, missing = [], []
    for rel, full, include_name in headers:
        ex = extract_example(full)
        if ex is None:
            missing.append(rel)
            continue
        tu = os.path.join(tmp, rel.replace("/", "_") + ".cpp")
        with open(tu, "w", encoding="utf-8") as f:
            f.write(make_tu(rel, include_name, ex))
        tasks.append((rel, tu))

    def compile_one(task):
        rel, tu = task
        cmd = [cxx, *flags, *EXTRA_FLAGS, "-fsyntax-only", tu]
        p = subprocess.run(cmd, cwd=source_dir, capture_output=True, text=True)
        return rel, p.returncode, p.stderr, cmd

    failed, exc_failed, exc_passed, passed = [], [], [], []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for rel, rc, err, cmd in pool.map(compile_one, tasks):
            is_known = rel in known
            if rc == 0:
                (exc_passed if is_known else passed).append(rel)
                print(f"ok      {rel}")
            else:
                (exc_failed if is_known else failed).append(rel)
                print(f"{'KNOWN ' if is_known else 'FAIL  '}  {rel}")
                if not is_known or verbose:
                    print(err.rstrip()[-6000:])
                    if verbose:
                        print("  command:", " ".join(shlex.quote(c) for c in cmd))
    for rel in missing:
        is_known = rel in known
        print(f"{'KNOWN ' if is_known else 'FAIL  '}  {rel}: no '// Example' block in its banner")
        (exc_failed if is_known else failed).append(rel)

    total = len(headers)
    print(f"\n{len(passed) + len(exc_passed)}/{total} banner examples compile"
          f" ({len(exc_failed)} known exceptions failing, {len(failed)} failures)")
    for rel in exc_passed:
        print(f"note: {rel} now compiles: take it off KNOWN_EXCEPTIONS in tests/banner_examples.py")
    if failed:
        print("failing: " + " ".join(failed))
    if not verbose:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"translation units kept in {tmp}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
