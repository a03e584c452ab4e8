"""run_harness.py — helpers for the `vflow run` integration tests (not a test itself).

Each test writes a small Lua pipeline into a fresh temp dir, runs the real `vflow`
binary (VFLOW_BIN) on it, and reads what the run left: exit code, stdout/stderr, the run
dir (graph.json, run.log, metrics.jsonl), and VFLOW_TRACE_SPAWN lines (pid, worker,
stages of every spawned worker process).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(os.environ.get("VFLOW_BUILD", "build"), "vflow")

FAILS = []


def check(cond, msg):
    """Records a failed check (the test goes on, exits 1 at the end)."""
    if not cond:
        FAILS.append(msg)
        print("CHECK FAILED: " + msg, file=sys.stderr, flush=True)
    return cond


def finish():
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        sys.exit(1)
    print("ok")
    sys.exit(0)


class Run:
    """One `vflow run` in its own temp dir."""

    def __init__(self, name, lua, sets=(), env=None):
        self.dir = tempfile.mkdtemp(prefix="vf_it_%s_" % name)
        self.script = os.path.join(self.dir, name + ".lua")
        with open(self.script, "w") as f:
            f.write(lua)
        self.run_dir = os.path.join(self.dir, "run")
        self.trace = os.path.join(self.dir, "spawn.txt")
        self.args = [VFLOW, "run", self.script, "--run-dir", self.run_dir]
        for s in sets:
            self.args += ["--set", s]
        self.env = dict(os.environ)
        self.env["VFLOW_TRACE_SPAWN"] = self.trace
        self.env.update(env or {})
        self.proc = None
        self.out = self.err = ""
        self.rc = None
        self.t_start = self.t_end = None

    def start(self):
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen(self.args, cwd=self.dir, env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        return self

    def wait(self, timeout=120):
        try:
            self.out, self.err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.out, self.err = self.proc.communicate()
            check(False, "vflow run did not finish within %d s (killed)" % timeout)
        self.rc = self.proc.returncode
        self.t_end = time.monotonic()
        return self

    def run(self, timeout=120):
        return self.start().wait(timeout)

    def elapsed(self):
        return self.t_end - self.t_start

    def spawned(self):
        """[{pid, worker, stages}] from VFLOW_TRACE_SPAWN, in spawn order."""
        out = []
        if not os.path.exists(self.trace):
            return out
        for line in open(self.trace):
            kv = dict(f.split("=", 1) for f in line.split())
            out.append({"pid": int(kv["pid"]), "worker": kv["worker"], "stages": kv["stages"].split(",")})
        return out

    def wait_spawned(self, n, timeout=20):
        t = time.monotonic() + timeout
        while time.monotonic() < t:
            s = self.spawned()
            if len(s) >= n:
                return s
            time.sleep(0.02)
        return self.spawned()

    def worker_of(self, stage):
        for w in self.spawned():
            if stage in w["stages"]:
                return w
        return None

    def rows(self):
        path = os.path.join(self.run_dir, "metrics.jsonl")
        rows = []
        with open(path) as f:
            for i, line in enumerate(f):
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    check(False, "metrics.jsonl line %d is not JSON: %r" % (i + 1, line[:200]))
        return rows

    def event(self, name):
        return [r for r in self.rows() if r.get("event") == name]

    def finals(self):
        return {r["stage"]: r for r in self.rows() if r.get("type") == "final"}

    def run_row(self):
        rr = [r for r in self.rows() if r.get("type") == "run"]
        return rr[-1] if rr else None

    def log(self):
        p = os.path.join(self.run_dir, "run.log")
        return open(p).read() if os.path.exists(p) else ""

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def describe(self):
        return "rc=%s\n--- stdout\n%s\n--- stderr\n%s\n--- run.log (tail)\n%s" % (
            self.rc, self.out[-3000:], self.err[-3000:], self.log()[-3000:])


def rss_bytes(pid):
    """VmRSS of pid in bytes, or None once it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class RssSampler(threading.Thread):
    """Samples VmRSS of some pids every `every` seconds; max per pid."""

    def __init__(self, pids, every=0.02):
        super().__init__(daemon=True)
        self.pids = list(pids)
        self.every = every
        self.max = {p: 0 for p in self.pids}
        self.samples = {p: 0 for p in self.pids}
        self.stop = False

    def run(self):
        while not self.stop:
            for p in self.pids:
                r = rss_bytes(p)
                if r is not None:
                    self.max[p] = max(self.max[p], r)
                    self.samples[p] += 1
            time.sleep(self.every)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def send_signal(run, sig):
    run.proc.send_signal(sig)


MiB = 1 << 20
GiB = 1 << 30
