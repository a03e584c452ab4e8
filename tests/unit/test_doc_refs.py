"""test_doc_refs.py — the docs stand alone: nothing points at a file the repository lacks.

Checks README.md, docs/*.md and the comments of every source file (C, CUDA, Lua, Python,
shell, CMake, the Makefile) and fails, naming file and line, on
  - a reference to the engineers' notes outside the repository: "DESIGN §N", DESIGN.md,
    REFERENCE.md, WAN.md, /work/shared;
  - a relative Markdown link [text](path) whose file is not there;
  - a repository path in backquotes (`pipelines/train_dit.lua`, `tests/unit/x.c`, …)
    that names no file or folder of the tree (patterns with *, <, {, …, N are left alone).
Run with a source dir argument or VFLOW_SRC; `--self-test` shows each kind is caught.
"""
import os
import re
import sys

OUTSIDE = re.compile(r"DESIGN §|DESIGN\.md|REFERENCE\.md|WAN\.md|/work/shared")
TOP = ("bench", "cli", "cmake", "docs", "formats", "kernels", "lua", "models", "pipelines", "runtime", "scripts",
       "stages", "tests", "tools")
PATH_IN_TICKS = re.compile(r"`((?:%s)/[A-Za-z0-9_./-]+)`" % "|".join(TOP))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
SRC_EXT = (".c", ".h", ".cu", ".lua", ".py", ".sh", ".cmake")


def comments(path, text):
    """The text of the comments of a source file, other characters blanked, lines kept."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    if path.endswith((".c", ".h", ".cu")):
        out, i = [], 0
        for m in re.finditer(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"', text, flags=re.S):
            out.append(re.sub(r"[^\n]", " ", text[i:m.start()]))
            out.append(m.group(0) if not m.group(0).startswith('"') else blank(m))
            i = m.end()
        out.append(re.sub(r"[^\n]", " ", text[i:]))
        return "".join(out)
    marker = "--" if path.endswith(".lua") else "#"
    lines = []
    for line in text.split("\n"):
        k = line.find(marker)
        lines.append(line[k:] if k >= 0 else "")
    return "\n".join(lines)


def problems(src, rel, text, markdown):
    out = []
    body = text if markdown else comments(rel, text)
    for n, line in enumerate(body.split("\n"), 1):
        m = OUTSIDE.search(line)
        if m:
            out.append("%s:%d: names %r, which is not in the repository" % (rel, n, m.group(0)))
        if not markdown:
            continue
        for lk in LINK.findall(line):
            if "://" in lk or lk.startswith("mailto:"):
                continue
            target = os.path.normpath(os.path.join(src, os.path.dirname(rel), lk))
            if not os.path.exists(target):
                out.append("%s:%d: link to %s, which is not there" % (rel, n, lk))
        for p in PATH_IN_TICKS.findall(line):
            if re.search(r"[*<{…]|/N\b|_N\b|-N\b|\.\.\.", p):
                continue
            p = p.split(":")[0].rstrip(".,;")
            if not os.path.exists(os.path.join(src, p)):
                out.append("%s:%d: `%s` names no file of the tree" % (rel, n, p))
    return out


def files(src):
    yield "README.md", True
    for n in sorted(os.listdir(os.path.join(src, "docs"))):
        if n.endswith(".md"):
            yield "docs/" + n, True
    for f in ("CMakeLists.txt", "Makefile"):
        yield f, False
    for d in TOP:
        for root, _, names in os.walk(os.path.join(src, d)):
            if "/corpus" in root:
                continue
            for n in names:
                if n.endswith(SRC_EXT) or d == "scripts":
                    yield os.path.relpath(os.path.join(root, n), src), False


def main():
    src = next((a for a in sys.argv[1:] if not a.startswith("-")), None) or os.environ.get("VFLOW_SRC") or \
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if "--self-test" in sys.argv:
        md = "see DESIGN §3 and [x](docs/NOPE.md) and `stages/nope.c`, but `stages/decode/` is fine\n"
        c = '/* as REFERENCE.md says */\nint x; const char *s = "WAN.md in a string is code";\n'
        got = problems(src, "README.md", md, True) + problems(src, "x.c", c, False)
        print("\n".join(got))
        ok = len(got) == 4
        print("self-test", "ok" if ok else "FAILED")
        return 0 if ok else 1
    found, n = [], 0
    for rel, markdown in files(src):
        p = os.path.join(src, rel)
        if not os.path.isfile(p) or rel == "tests/unit/test_doc_refs.py":
            continue
        with open(p, encoding="utf-8", errors="replace") as f:
            text = f.read()
        n += 1
        found += problems(src, rel, text, markdown)
    print("\n".join(found))
    print("%d files, %d problems" % (n, len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
