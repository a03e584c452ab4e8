"""test_mdb_calls.py — every LMDB error names the call that failed.

The check macros of formats/lmdb_store.h put their call's text into the message:
VF_MDB(st, db, mdb_txn_commit(txn)) reads "PATH: mdb_txn_commit: …". Given a variable that
holds a code (VF_MDB(st, db, m)) the message would name the variable ("PATH: m: …"), so
this test fails, naming file and line, on
  - a VF_MDB whose third argument is not a call of an mdb_* function;
  - a VF_MDB_RC or VF_MDB_KEY whose call argument is not a string literal "mdb_…".
Run with a source dir argument or VFLOW_SRC; `--self-test` shows that each is caught.
"""
import os
import re
import sys

DIRS = ["runtime", "formats", "kernels", "models", "stages", "cli", "tests", "bench"]


def args_of(text, start):
    """The top-level comma-separated arguments of the call whose "(" is at text[start]."""
    depth, cur, out, i = 0, "", [], start
    while i < len(text):
        c = text[i]
        if c == "(":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c == ")":
            depth -= 1
            if depth == 0:
                out.append(cur.strip())
                return out
        elif c == "," and depth == 1:
            out.append(cur.strip())
            cur = ""
            i += 1
            continue
        cur += c
        i += 1
    return out


def uncomment(text):
    """text with its C comments blanked (newlines kept, so line numbers stay)."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


def problems(path, text):
    out = []
    text = uncomment(text)
    for m in re.finditer(r"\bVF_MDB(_RC|_KEY)?\s*\(", text):
        if text[max(0, m.start() - 8):m.start()].endswith("define "):
            continue  # the macros' own definitions
        line = text.count("\n", 0, m.start()) + 1
        a = args_of(text, m.end() - 1)
        kind = m.group(1) or ""
        if kind == "" and (len(a) != 3 or not re.match(r"^mdb_\w+\s*\(", a[2])):
            out.append("%s:%d: VF_MDB's third argument %r is not a call of an mdb_* function (use VF_MDB_RC "
                       "with the call's name for a code held in a variable)" % (path, line, a[2] if len(a) > 2 else a))
        elif kind and (len(a) < 4 or not re.match(r'^"mdb_\w+"$', a[2])):
            out.append('%s:%d: VF_MDB%s names its call %r, not a string "mdb_..."' % (path, line, kind,
                                                                                     a[2] if len(a) > 2 else a))
    return out


def main():
    if "--self-test" in sys.argv:
        bad = 'VF_MDB(st, db, m);\nVF_MDB_RC(st, db, m, m);\nVF_MDB_KEY(st, db, what, k, n, m);\n'
        good = 'VF_MDB(st, db, mdb_stat(txn, dbi, &s));\nVF_MDB_RC(st, db, "mdb_txn_commit", m);\n'
        got = problems("self.c", bad)
        ok = len(got) == 3 and not problems("self.c", good)
        print("\n".join(got))
        print("self-test", "ok" if ok else "FAILED")
        return 0 if ok else 1
    src = next((a for a in sys.argv[1:] if not a.startswith("-")), None) or os.environ.get("VFLOW_SRC") or \
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found, files = [], 0
    for d in DIRS:
        for root, _, names in os.walk(os.path.join(src, d)):
            for n in names:
                if not n.endswith((".c", ".h", ".cu")) or n == "test_mdb_calls.py":
                    continue
                p = os.path.join(root, n)
                with open(p, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                files += 1
                found += problems(os.path.relpath(p, src), text)
    print("\n".join(found))
    print("%d files, %d problems" % (files, len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
