"""test_exec_bits.py — the scripts the docs run directly can be run directly.

Every file under scripts/, bench/ and tools/ whose first line is a #! must be executable
(a user types `scripts/make_sample_videos.sh data/samples` as docs/PRECOMPUTE.md does, not
`bash scripts/…`); a file without one must not be. Fails naming each file; run with a
source dir argument or VFLOW_SRC.
"""
import os
import stat
import sys


def main():
    src = next((a for a in sys.argv[1:] if not a.startswith("-")), None) or os.environ.get("VFLOW_SRC") or \
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bad, n = [], 0
    for d in ("scripts", "bench", "tools"):
        for name in sorted(os.listdir(os.path.join(src, d))):
            p = os.path.join(src, d, name)
            if not os.path.isfile(p):
                continue
            n += 1
            with open(p, "rb") as f:
                shebang = f.read(2) == b"#!"
            executable = bool(os.stat(p).st_mode & stat.S_IXUSR)
            if shebang and not executable:
                bad.append("%s/%s: has a #! line but is not executable (chmod +x, git add)" % (d, name))
            if executable and not shebang:
                bad.append("%s/%s: executable without a #! line" % (d, name))
    print("\n".join(bad))
    print("%d files, %d problems" % (n, len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
