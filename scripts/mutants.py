#!/usr/bin/python3
"""mutants.py — does the test suite catch one-line bugs? (`make mutants`)

Plants each mutant of scripts/mutants.txt (the list's header says its format), one at a
time, in a scratch copy of this tree under /tmp — the files git tracks plus the untracked
ones it does not ignore, as they are in the working tree; the tree itself is never
written — builds what the mutant's tests need, runs those tests, and puts the file back.
A mutant is killed when one of its tests fails; it survives when all pass. The tests a
mutant names are first run on the unmutated copy: a test that fails there is an error,
not a kill. Tests that run past 60 s plus three times their unmutated time are stopped,
and the mutant counts as caught (a hang).

  scripts/mutants.py [--check] [--keep] [--jobs N] [--list FILE] [NAME ...]

  NAME ...   only these mutants (default: all)
  --check    only check the list against the tree (every text found exactly once,
             every file present); no build
  --keep     leave the scratch copy and its build (the path is printed)
  --jobs N   build jobs (default 2)

Prints one line per mutant and the survivors. Exit 0 when every mutant is killed, 1 when
one survives, 2 for a list that no longer applies, a mutant that does not build, a test
that fails unmutated or a bad option.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ListError(Exception):
    pass


def parse(path):
    """The list: ({alias: path}, [mutant dicts]) or ListError naming file:line."""
    files, mutants, cur = {}, [], None
    with open(path, encoding="utf-8") as fh:
        for no, raw in enumerate(fh, 1):
            line = raw.rstrip("\n")
            where = "%s:%d" % (os.path.relpath(path, ROOT), no)
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key, _, rest = line.strip().partition(" ")
            rest = rest.strip()
            if key == "file" and not line[0].isspace():
                alias, _, p = rest.partition(" ")
                if not alias or not p.strip() or alias in files:
                    raise ListError("%s: 'file ALIAS PATH' with a new alias" % where)
                files[alias] = p.strip()
            elif key == "mutant" and not line[0].isspace():
                name, _, what = rest.partition(":")
                if not re.fullmatch(r"[a-z0-9-]+", name) or any(m["name"] == name for m in mutants):
                    raise ListError("%s: 'mutant NAME: what it breaks' with a new name of [a-z0-9-]" % where)
                cur = {"name": name, "what": what.strip(), "where": where}
                mutants.append(cur)
            elif key in ("in", "find", "replace", "tests") and line[0].isspace() and cur is not None:
                if key in cur:
                    raise ListError("%s: a second '%s' for mutant %s" % (where, key, cur["name"]))
                cur[key] = rest.split() if key == "tests" else rest
            else:
                raise ListError("%s: not a file, mutant or field line: %r" % (where, line))
    for m in mutants:
        for k in ("in", "find", "replace", "tests"):
            if k not in m:
                raise ListError("%s: mutant %s has no '%s'" % (m["where"], m["name"], k))
        if m["in"] not in files:
            raise ListError("%s: mutant %s: no file alias '%s'" % (m["where"], m["name"], m["in"]))
        if not m["find"] or not m["tests"] or m["find"] == m["replace"]:
            raise ListError("%s: mutant %s: empty find or tests, or a replacement equal to the text"
                            % (m["where"], m["name"]))
        m["path"] = files[m["in"]]
    return files, mutants


def applies(tree, m):
    """The mutated file's text, or ListError saying why the mutant no longer applies."""
    p = os.path.join(tree, m["path"])
    if not os.path.isfile(p):
        raise ListError("%s: mutant %s: %s is not there (moved? change its file line)" % (m["where"], m["name"],
                                                                                           m["path"]))
    text = open(p, encoding="utf-8").read()
    n = text.count(m["find"])
    if n != 1:
        raise ListError("%s: mutant %s: %r occurs %d times in %s, not once: the mutant no longer applies"
                        % (m["where"], m["name"], m["find"], n, m["path"]))
    return text, text.replace(m["find"], m["replace"], 1)


def copy_tree(dst):
    """The files git tracks and the untracked ones it does not ignore, into dst."""
    ls = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                        check=True, capture_output=True).stdout.split(b"\0")
    for rel in (x.decode() for x in ls if x):
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src) or os.path.islink(src):
            continue  # deleted in the working tree, or a submodule
        os.makedirs(os.path.join(dst, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dst, rel))


def targets(src, tests):
    """Build targets the tests need: each C test's executable, the vflow binary and the
    helper tools the script tests drive."""
    out = ["vflow"] + sorted(os.path.splitext(f)[0] for f in os.listdir(os.path.join(src, "tests", "tools"))
                             if f.endswith(".c"))
    for t in tests:
        label, _, name = t.partition(".")
        if label == "fuzz":
            out.append(name)
        elif os.path.exists(os.path.join(src, "tests", label, name + ".c")):
            out.append("%s_%s" % (label, name))
        if name == "test_gpu_harness":  # it runs every gpu test's executable on the CPU
            gpu = os.path.join(src, "tests", "gpu")
            out += sorted("gpu_" + os.path.splitext(f)[0] for f in os.listdir(gpu)
                          if f.startswith("test_") and f.endswith(".c"))
    return out


def run(cmd, log, limit=None):
    """Runs cmd with its output appended to log; the exit code, or None when it ran past
    limit seconds (then it is killed with everything it started in its session)."""
    with open(log, "ab") as fh:
        fh.write(("$ %s\n" % " ".join(cmd)).encode())
        fh.flush()
        p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return None


def ctest(build, tests, log, limit=None):
    """Runs the tests, stopping at the first failure: ([] when all pass, else the failed
    ones, or ["timed out"] past limit seconds), and {test: seconds} of those that passed."""
    rx = "^(%s)$" % "|".join(re.escape(t) for t in tests)
    start = os.path.getsize(log) if os.path.exists(log) else 0
    rc = run(["ctest", "--test-dir", build, "-R", rx, "-j1", "--stop-on-failure", "--output-on-failure"], log,
             limit)
    with open(log, errors="replace") as fh:
        fh.seek(start)
        passed = {m.group(1): float(m.group(2))
                  for m in re.finditer(r"Test +#\d+: (\S+) \.+ +Passed +([\d.]+) sec", fh.read())}
    failed = []
    last = os.path.join(build, "Testing", "Temporary", "LastTestsFailed.log")
    if os.path.exists(last):
        failed = [ln.strip().split(":", 1)[1] for ln in open(last) if ":" in ln]
        os.remove(last)
    if rc is None:
        failed = ["timed out after %.0f s" % limit]
    return failed, passed


def main(argv):
    args, names, check, keep, jobs, lst = list(argv), [], False, False, 2, os.path.join(ROOT, "scripts",
                                                                                        "mutants.txt")
    while args:
        a = args.pop(0)
        if a == "--check":
            check = True
        elif a == "--keep":
            keep = True
        elif a == "--jobs" and args and args[0].isdigit():
            jobs = int(args.pop(0))
        elif a == "--list" and args:
            lst = os.path.abspath(args.pop(0))
        elif a.startswith("-"):
            print(__doc__.split("\n\n")[2], file=sys.stderr)
            return 2
        else:
            names.append(a)
    try:
        _, mutants = parse(lst)
        unknown = [n for n in names if n not in {m["name"] for m in mutants}]
        if unknown:
            raise ListError("no mutant named %s in %s" % (", ".join(unknown), os.path.relpath(lst, ROOT)))
        if names:
            mutants = [m for m in mutants if m["name"] in names]
        for m in mutants:
            applies(ROOT, m)
    except ListError as e:
        print("mutants: %s" % e, file=sys.stderr)
        return 2
    if check:
        print("mutants: %d mutants apply to this tree" % len(mutants))
        return 0

    scratch = tempfile.mkdtemp(prefix="vf_mutants.")
    src, build, log = os.path.join(scratch, "src"), os.path.join(scratch, "build"), os.path.join(scratch, "log")
    os.makedirs(log)
    print("mutants: %d, scratch copy %s (logs in log/)" % (len(mutants), scratch), flush=True)
    rc = 2
    try:
        copy_tree(src)
        alltests = sorted({t for m in mutants for t in m["tests"]})
        setup = os.path.join(log, "setup.log")
        if run(["cmake", "-S", src, "-B", build, "-DVFLOW_CUDA=OFF", "-DVFLOW_BUILD_BENCH=OFF"], setup) or \
                run(["cmake", "--build", build, "-j", str(jobs), "--target"] + targets(src, alltests), setup):
            print("mutants: the unmutated copy does not build (%s)" % setup, file=sys.stderr)
            return 2
        listed = subprocess.run(["ctest", "--test-dir", build, "-N"], capture_output=True, text=True).stdout
        known = set(re.findall(r"Test\s+#\d+: (\S+)", listed))
        missing = [t for t in alltests if t not in known]
        if missing:
            print("mutants: no test named %s (ctest -N): the list no longer applies" % ", ".join(missing),
                  file=sys.stderr)
            return 2
        t0 = time.time()
        bad, took = ctest(build, alltests, setup)
        if bad:
            print("mutants: %s fail(s) on the unmutated copy (%s)" % (", ".join(bad), setup), file=sys.stderr)
            return 2
        print("mutants: the unmutated copy builds and passes the %d listed tests (%.0f s)"
              % (len(alltests), time.time() - t0), flush=True)
        survivors, broken = [], []
        for i, m in enumerate(mutants, 1):
            t0 = time.time()
            path = os.path.join(src, m["path"])
            orig, mutated = applies(src, m)
            mlog = os.path.join(log, m["name"] + ".log")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(mutated)
            try:
                if run(["cmake", "--build", build, "-j", str(jobs), "--target"] + targets(src, m["tests"]), mlog):
                    verdict = "DOES NOT BUILD (see %s)" % mlog
                    broken.append(m["name"])
                else:
                    # a mutant that makes its tests hang is caught: past 3x their time unmutated
                    limit = 60 + 3 * sum(took.get(t, 60) for t in m["tests"])
                    failed, _ = ctest(build, m["tests"], mlog, limit)
                    verdict = ("killed: " if failed[:1] and failed[0].startswith("timed out") else
                               "killed by ") + ", ".join(failed) if failed else "SURVIVED"
                    if not failed:
                        survivors.append(m)
            finally:
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(orig)
            print("[%2d/%d] %-22s %s (%.0f s)" % (i, len(mutants), m["name"], verdict, time.time() - t0), flush=True)
        print("\nmutants: %d planted, %d killed, %d survived%s" % (
            len(mutants), len(mutants) - len(survivors) - len(broken), len(survivors),
            ", %d did not build" % len(broken) if broken else ""))
        for m in survivors:
            print("  survivor %s: %s (%s: %s -> %s; tests %s)" % (m["name"], m["what"], m["path"], m["find"],
                                                                  m["replace"] or "(deleted)", " ".join(m["tests"])))
        rc = 2 if broken else 1 if survivors else 0
        return rc
    finally:
        if keep or rc == 2:
            print("mutants: kept %s" % scratch)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
