"""test_plan_names.py — every memory-plan line's name fits the plan entry that keeps it.

A stage names what it will hold with vf_mem_plan_add* (runtime/vflow.h); the entry keeps
VF_MEM_WHAT_MAX - 1 bytes of the name and cuts the rest, so `vflow plan` would print
"block swap ring (gradients of the blocks in fli". This test reads VF_MEM_WHAT_MAX from
runtime/vflow.h and fails, naming file and line, on a call whose name argument is a string
literal (adjacent literals joined) longer than that. Names built at run time are not seen.
Run with a source dir argument or VFLOW_SRC; `--self-test` shows a long name is caught.
"""
import os
import re
import sys

DIRS = ["runtime", "formats", "kernels", "models", "stages", "cli"]
CALL = re.compile(r"\bvf_mem_plan_add(?:_input|_lib|_pinned)?\s*\(")
LIT = re.compile(r'"((?:[^"\\]|\\.)*)"')


def args_of(text, start):
    """The top-level comma-separated arguments of the call whose "(" is at text[start]."""
    depth, cur, out, i, quote = 0, "", [], start, False
    while i < len(text):
        c = text[i]
        if quote:
            cur += c
            if c == "\\":
                cur += text[i + 1]
                i += 1
            elif c == '"':
                quote = False
        elif c == '"':
            quote = True
            cur += c
        elif c == "(":
            depth += 1
            if depth > 1:
                cur += c
        elif c == ")":
            depth -= 1
            if depth == 0:
                out.append(cur.strip())
                return out
            cur += c
        elif c == "," and depth == 1:
            out.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    return out


def literal(arg):
    """The string of an argument made of string literals only, else None."""
    rest = LIT.sub("", arg).strip()
    if rest or '"' not in arg:
        return None
    return "".join(bytes(m, "utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")
                   for m in LIT.findall(arg))


def problems(text, path, limit):
    out = []
    for m in CALL.finditer(text):
        args = args_of(text, m.end() - 1)
        # the name is the fourth argument, the third of vf_mem_plan_add_pinned (no device)
        k = 2 if m.group(0).startswith("vf_mem_plan_add_pinned") else 3
        if len(args) <= k:
            continue
        name = literal(args[k])
        if name is not None and len(name.encode("utf-8")) > limit:
            line = text.count("\n", 0, m.start()) + 1
            out.append("%s:%d: plan line name of %d bytes, over %d (VF_MEM_WHAT_MAX - 1): \"%s\"" %
                       (path, line, len(name.encode("utf-8")), limit, name))
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    src = args[0] if args else os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
    hdr = open(os.path.join(src, "runtime", "vflow.h")).read()
    limit = int(re.search(r"#define VF_MEM_WHAT_MAX (\d+)", hdr).group(1)) - 1
    if "--self-test" in sys.argv:
        bad = 'vf_mem_plan_add(out, dev, VF_MEM_WEIGHTS, "%s" "x", n);' % ("a" * limit)
        good = 'vf_mem_plan_add_pinned(out, VF_MEM_GRADS, "%s", f(a, b));' % ("a" * limit)
        assert len(problems(bad, "bad.c", limit)) == 1 and not problems(good, "good.c", limit)
        print("self-test ok")
        return 0
    found, calls = [], 0
    for d in DIRS:
        for root, _, files in os.walk(os.path.join(src, d)):
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    path = os.path.join(root, f)
                    text = open(path, encoding="utf-8", errors="replace").read()
                    calls += len(CALL.findall(text))
                    found += problems(text, os.path.relpath(path, src), limit)
    for p in found:
        print(p)
    if calls < 20:
        print("only %d vf_mem_plan_add* calls found: is %s the source dir?" % (calls, src))
        return 1
    print("%d calls, %d over" % (calls, len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
