"""test_layering.py — the include rules of docs/ARCHITECTURE.md, checked on every source file.

Reads each quoted #include of runtime/, formats/, kernels/, models/, stages/, cli/, tests/
and bench/ and fails, naming file and line, when
  - an include is not spelled from the repository root (the one include directory), or
    names a file that does not exist;
  - a lower layer includes a higher one (runtime/core including runtime/edge, the runtime
    below the driver including formats/, any of the runtime including models/, kernels
    including models, …);
  - a stage includes runtime internals (runtime/<folder>/), or one stage family
    (stages/decode/, stages/reader/, stages/train/, the single-file stages in stages/)
    includes another;
  - an op family of kernels/ops_list.h lacks its file on a backend (kernels/cpu/<family>.c,
    kernels/cuda/<family>.cu or .c: the two backends' file names mirror each other);
  - a payload lane of the ZeroMQ channel (runtime/edge/lane*, the shared-memory, view and bulk
    machinery behind them, the device hook's header) calls the channel back: includes
    transport_zmq.h or <zmq.h>, or names a vf_zmq_ function outside a comment;
  - a stage encodes or parses a file format itself, which is formats/' work: a stage calls
    a C or POSIX function that opens, reads, writes, lists, renames or removes a file
    (STAGE_FILE_CALLS; its files reach it through formats/, or the runtime's logs, metrics
    and quarantine list), or code outside formats/ spells a mark of a format formats/ owns
    (FORMAT_MARKS: the tags and file names that identify it, in a string literal).
The rules are data (ALLOWED, STAGE_FILE_CALLS, FORMAT_MARKS below), so the tables in
docs/ARCHITECTURE.md and this test say the same thing. Run with a source dir argument or VFLOW_SRC; `--self-test` shows that
each kind of violation is caught.
"""
import os
import re
import sys

PUBLIC = ["runtime/vflow.h", "runtime/json.h", "runtime/philox.h"]

# Folder of the including file -> prefixes it may include (besides its own folder).
# The first matching key (longest first) applies.
ALLOWED = {
    "runtime/core/": PUBLIC + ["runtime/core/"],
    "runtime/edge/": PUBLIC + ["runtime/core/", "runtime/edge/"],
    "runtime/graph/": PUBLIC + ["runtime/core/", "runtime/edge/", "runtime/graph/"],
    "runtime/plan/": PUBLIC + ["runtime/core/", "runtime/edge/", "runtime/graph/", "runtime/plan/"],
    # the driver writes the run's own files: TensorBoard events through formats/tb_events.h
    "runtime/driver/": PUBLIC + ["runtime/core/", "runtime/edge/", "runtime/graph/", "runtime/plan/",
                                 "runtime/driver/", "formats/"],
    "runtime/": PUBLIC,
    "formats/": PUBLIC + ["formats/"],
    # the CUDA backend plugs the device transports into the data plane (transport_dev.h),
    # allocates through the memory accounts and makes the view tensors of received views
    "kernels/cuda/": PUBLIC + ["kernels/", "runtime/core/alloc.h", "runtime/core/shared.h", "runtime/edge/chan.h",
                               "runtime/edge/transport.h", "runtime/edge/transport_dev.h"],
    # phases.h: the per-phase op timer over any backend (benchmarks and tools use it)
    "kernels/": PUBLIC + ["kernels/ops.h", "kernels/ops_list.h", "kernels/phases.h", "kernels/cpu/"],
    "models/": PUBLIC + ["formats/", "kernels/ops.h", "kernels/ops_list.h", "models/"],
    "stages/decode/": PUBLIC + ["formats/", "models/", "kernels/ops.h", "kernels/ops_list.h", "stages/decode/"],
    "stages/reader/": PUBLIC + ["formats/", "models/", "kernels/ops.h", "kernels/ops_list.h", "stages/reader/"],
    "stages/train/": PUBLIC + ["formats/", "models/", "kernels/ops.h", "kernels/ops_list.h", "stages/train/"],
    "stages/": PUBLIC + ["formats/", "models/", "kernels/ops.h", "kernels/ops_list.h", "STAGES_FLAT"],
    "cli/": None,      # the top floor: anything
    "tests/": None,
    "bench/": None,
}
SCAN = ["runtime", "formats", "kernels", "models", "stages", "cli", "tests", "bench"]

# A stage does not encode or parse a file format itself. (1) It calls none of these; its
# files' bytes pass through formats/ (or the runtime: logs, metrics, the quarantine list).
# Making a directory (mkdir) is no format and stays allowed.
STAGE_FILE_CALLS = {
    "fopen", "fdopen", "freopen", "fread", "fwrite", "fgets", "getline", "getdelim", "fscanf",
    "open", "openat", "creat", "read", "pread", "write", "pwrite", "readv", "writev", "mmap",
    "opendir", "fdopendir", "readdir", "scandir", "glob",
    "rename", "renameat", "unlink", "unlinkat", "rmdir", "ftruncate", "truncate", "fsync", "fdatasync",
}
# The exceptions, each with its reason.
STAGE_FILE_CALLS_ALLOWED = {
    # the decode worker's crash records are written from a signal handler, where only
    # open/write/close may run, so no library can carry them; it reads its own records
    # (decode_fatal.jsonl) back when it starts
    "stages/decode/decode_guard.c": {"open", "write", "fopen", "getline"},
}
# (2) The marks that identify a format formats/ owns (version tags, file names) appear in
# string literals only in formats/: the runtime, models and stages reach the format
# through its header.
FORMAT_MARKS = {
    "formats/ckpt.h": ["vflow-checkpoint", "optimizer-", "step-%lld.tmp"],
    "formats/lr_cursor.h": [";epoch="],
    "formats/tb_events.h": ["tfevents", "brain.Event"],
}
MARKS_SCAN = ("runtime/", "models/", "stages/")
FILE_CALL = re.compile(r"(?<![\w.>])(" + "|".join(sorted(STAGE_FILE_CALLS)) + r")\s*\(")
EXTS = (".c", ".h", ".cu", ".cuh")
INC = re.compile(r'^\s*#\s*include\s*"([^"]+)"')

# The payload lanes (runtime/edge/lane.h) sit below the ZeroMQ channel (transport_zmq.c):
# the channel asks them through vf_lane_ops, they never call it back.
LANE_FILE = re.compile(r"^runtime/edge/(lane[^/]*|edge_shm[^/]*|edge_bulk[^/]*|edge_view[^/]*|transport_dev\.h)$")
LANE_NO_INC = ("runtime/edge/transport_zmq.h", "zmq.h")
ANY_INC = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def rule_for(rel):
    for key in sorted(ALLOWED, key=len, reverse=True):
        if rel.startswith(key):
            return key, ALLOWED[key]
    return None, None


def allowed(inc, key, prefixes):
    if prefixes is None:
        return True
    for p in prefixes:
        if p == "STAGES_FLAT":
            if inc.startswith("stages/") and inc.count("/") == 1:
                return True
        elif inc == p or (p.endswith("/") and inc.startswith(p)):
            return True
    return False


def split_c(text):
    """The code with comments and string/char literals blanked (newlines kept), and the
    string literals as (line, text)."""
    code, lits, i, n, line = [], [], 0, len(text), 1
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            code.append("\n" * text.count("\n", i, j))
            line += text.count("\n", i, j)
            i = j
        elif c in "\"'":
            j, buf = i + 1, []
            while j < n and text[j] != c and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n:
                    buf.append(text[j:j + 2])
                    j += 2
                else:
                    buf.append(text[j])
                    j += 1
            if c == '"':
                lits.append((line, "".join(buf)))
            code.append(c + c)
            i = j + 1 if j < n and text[j] == c else j  # an unclosed one ends at its line
        else:
            if c == "\n":
                line += 1
            code.append(c)
            i += 1
    return "".join(code), lits


def check_formats(rel, text):
    """A stage's own file I/O, and a format's marks outside formats/."""
    errs = []
    code, lits = split_c(text)
    if rel.startswith("stages/") and rel.endswith(".c"):
        allowed_calls = STAGE_FILE_CALLS_ALLOWED.get(rel, set())
        for m in FILE_CALL.finditer(code):
            if m.group(1) in allowed_calls:
                continue
            n = code.count("\n", 0, m.start()) + 1
            errs.append(f"{rel}:{n}: {m.group(1)}(): a stage opens, reads or writes a file itself "
                        f"(a file format is formats/' work: call its header)")
    if rel.startswith(MARKS_SCAN):
        for n, lit in lits:
            for hdr, marks in FORMAT_MARKS.items():
                for mark in marks:
                    if mark in lit:
                        errs.append(f"{rel}:{n}: \"{lit[:60]}\": spells \"{mark}\", a mark of {hdr}'s format "
                                    f"(only formats/ encodes or parses it)")
    return errs


def check_file(src, rel, text):
    errs = check_formats(rel, text)
    key, prefixes = rule_for(rel)
    for n, line in enumerate(text.splitlines(), 1):
        m = INC.match(line)
        if not m:
            continue
        inc = m.group(1)
        where = f"{rel}:{n}"
        if inc.startswith("./") or inc.startswith("../") or "/" not in inc and not inc.endswith(".c"):
            errs.append(f"{where}: #include \"{inc}\": spell includes from the repository root")
            continue
        if not os.path.isfile(os.path.join(src, inc)):
            errs.append(f"{where}: #include \"{inc}\": no such file under the repository root")
            continue
        if not allowed(inc, key, prefixes):
            if rel.startswith("stages/") and inc.startswith("runtime/") and inc not in PUBLIC:
                why = "a stage includes runtime internals (stages use runtime/vflow.h, formats/, models/, kernels/ops.h)"
            elif rel.startswith("stages/") and inc.startswith("stages/"):
                why = "one stage family includes another"
            else:
                why = f"{key} may not include {inc.rsplit('/', 1)[0]}/ (a lower layer including a higher one)"
            errs.append(f"{where}: #include \"{inc}\": {why}")
    return errs + check_lane(rel, text)


def check_lane(rel, text):
    """A lane file includes neither the channel nor ZeroMQ and calls no vf_zmq_ function."""
    if not LANE_FILE.match(rel):
        return []
    errs = []
    why = "a payload lane calls the ZeroMQ channel back (lanes answer through vf_lane_ops, runtime/edge/lane.h)"
    # comments blanked, their newlines kept, so line numbers stay those of the file
    code = COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    for n, line in enumerate(code.splitlines(), 1):
        m = ANY_INC.match(line)
        if m and m.group(1) in LANE_NO_INC:
            errs.append(f"{rel}:{n}: #include {m.group(1)}: {why}")
        elif "vf_zmq_" in line:
            errs.append(f"{rel}:{n}: {line.strip()}: {why}")
    return errs


def scan(src):
    errs, nfiles, nincs = [], 0, 0
    for top in SCAN:
        for dirpath, dirnames, filenames in os.walk(os.path.join(src, top)):
            dirnames[:] = [d for d in dirnames if d not in ("corpus",)]
            for f in sorted(filenames):
                if not f.endswith(EXTS):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, src).replace(os.sep, "/")
                text = open(path, encoding="utf-8", errors="replace").read()
                nfiles += 1
                nincs += sum(1 for l in text.splitlines() if INC.match(l))
                errs += check_file(src, rel, text)
    return errs, nfiles, nincs


def op_families(src):
    """Each op family of kernels/ops_list.h has its file on both backends, same name."""
    errs = []
    text = open(os.path.join(src, "kernels", "ops_list.h")).read()
    fams = sorted(set(re.findall(r"X\(\s*\w+\s*,\s*(\w+)\s*\)", text)))
    for f in fams:
        if not os.path.isfile(os.path.join(src, "kernels", "cpu", f + ".c")):
            errs.append(f"kernels/ops_list.h: op family '{f}' has no kernels/cpu/{f}.c")
        if not any(os.path.isfile(os.path.join(src, "kernels", "cuda", f + ext)) for ext in (".cu", ".c")):
            errs.append(f"kernels/ops_list.h: op family '{f}' has no kernels/cuda/{f}.cu (or .c)")
    return errs, fams


def self_test(src):
    """Each kind of violation is reported; a clean file is not."""
    cases = [
        ("runtime/core/x.c", '#include "runtime/edge/chan.h"\n', "lower layer"),
        ("runtime/graph/x.c", '#include "formats/ckpt.h"\n', "lower layer"),
        ("runtime/edge/x.c", '#include "formats/tb_events.h"\n', "lower layer"),
        ("runtime/driver/x.c", '#include "models/dit.h"\n', "lower layer"),
        ("formats/x.c", '#include "runtime/core/obuf.h"\n', "lower layer"),
        ("kernels/cpu/x.c", '#include "models/dit.h"\n', "lower layer"),
        ("models/x.c", '#include "stages/latent_cache.h"\n', "lower layer"),
        ("stages/vae_encode.c", '#include "runtime/edge/chan.h"\n', "runtime internals"),
        ("stages/decode/x.c", '#include "stages/train/dit_train.h"\n', "another"),
        ("stages/latent_cache.c", '#include "stages/decode/decode_av.h"\n', "another"),
        ("stages/reader/x.c", '#include "stages/train/dit_train.h"\n', "another"),
        ("stages/train/x.c", '#include "stages/reader/latent_reader.h"\n', "another"),
        ("stages/train/x.c", '#include "vflow.h"\n', "repository root"),
        ("formats/x.c", '#include "../runtime/vflow.h"\n', "repository root"),
        ("models/x.c", '#include "models/nonexistent.h"\n', "no such file"),
        ("runtime/edge/lane_x.c", '#include "runtime/edge/transport_zmq.h"\n', "calls the ZeroMQ channel back"),
        ("runtime/edge/edge_bulk_x.c", '#include <zmq.h>\n', "calls the ZeroMQ channel back"),
        ("runtime/edge/edge_shm.c", "/* unlike vf_zmq_send */\nint f(void) { return vf_zmq_flush_credits(0, 0); }\n",
         "calls the ZeroMQ channel back"),
    ]
    # a stage encoding or parsing a format itself, as the checkpoint, the reader cursor and
    # the TensorBoard events once were
    cases += [
        ("stages/train/x.c", 'static int f(void) { FILE *f = fopen("a", "r"); return !f; }\n', "fopen()"),
        ("stages/train/x.c", 'int f(const char *a, const char *b) { return rename(a, b); }\n', "rename()"),
        ("stages/reader/x.c", 'int f(DIR *d) { return readdir(d) != 0; }\n', "readdir()"),
        ("stages/decode/decode_guard.c", 'int f(void) { return unlink("x"); }\n', "unlink()"),
        ("stages/train/x.c", 'const char *k = "optimizer-%02d-of-%02d.safetensors";\n', "formats/ckpt.h"),
        ("stages/train/x.c", 'const char *k = "vflow-checkpoint v1";\n', "formats/ckpt.h"),
        ("stages/x.c", 'int f(const char *c) { return strstr(c, ";epoch=") != 0; }\n', "formats/lr_cursor.h"),
        ("runtime/driver/x.c", 'const char *p = "%s/events.out.tfevents.%lld";\n', "formats/tb_events.h"),
        ("models/x.c", 'const char *e = "brain.Event:2";\n', "formats/tb_events.h"),
    ]
    bad = 0
    for rel, text, want in cases:
        errs = check_file(src, rel, text)
        if len(errs) != 1 or want not in errs[0]:
            print(f"self-test: {rel} {text.strip()}: expected one error with '{want}', got {errs}")
            bad += 1
    for rel, text in [("stages/train/x.c", '#include "stages/train/dit_train.h"\n#include "formats/ckpt.h"\n'),
                      ("cli/x.c", '#include "runtime/driver/launch.h"\n'),
                      ("runtime/driver/x.c", '#include "formats/tb_events.h"\n'),
                      ("kernels/cuda/x.c", '#include "runtime/edge/transport_dev.h"\n'),
                      # member calls, comments and strings are no file I/O; formats/ spells its marks
                      ("stages/x.c", 'int f(vf_backend *be) { return be->read(be) + s.write(1); } /* open(x) */\n'
                                     'const char *m = "fopen(";\n'),
                      ("stages/decode/decode_guard.c", 'int f(void) { return open("x", 0); }\n'),
                      ("stages/train/x.c", 'int f(void) { return mkdir("d", 0755); }\n'),
                      ("formats/x.c", 'const char *k = "v1;epoch=%llu;pos=%lld";\n'),
                      ("cli/x.c", 'FILE *f = fopen("optimizer-00-of-01.safetensors", "rb");\n'),
                      ("runtime/edge/lane_x.c", '#include "runtime/edge/lane.h"\n/* vf_zmq_send, not here */\n'),
                      ("runtime/edge/transport_zmq.c", '#include <zmq.h>\nint x = vf_zmq_consumed;\n')]:
        errs = check_file(src, rel, text)
        if errs:
            print(f"self-test: {rel}: expected no error, got {errs}")
            bad += 1
    return bad


def main():
    src = next((a for a in sys.argv[1:] if not a.startswith("--")), None) or os.environ.get("VFLOW_SRC") \
        or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bad = self_test(src)
    errs, nfiles, nincs = scan(src)
    ferrs, fams = op_families(src)
    errs += ferrs
    for e in errs:
        print(e)
    print(f"layering: {nfiles} files, {nincs} includes, {len(fams)} op families on both backends, "
          f"{len(errs)} violations, self-test {'failed' if bad else 'ok'}")
    return 1 if errs or bad else 0


if __name__ == "__main__":
    sys.exit(main())
