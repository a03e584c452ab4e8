"""netns_lib.py — hosts on one machine for the multi-node tests (not a test itself).

Hosts are network namespaces (`ip netns`), each with one veth into a bridge that lives in
a namespace of its own, so the test's network touches nothing of the machine's: host i
has 10.77.0.(i+1)/24 on its interface `eth0`-like end. A test makes its hosts with
`Net(n)`, starts processes on them with `net.popen(i, argv, env)` and removes everything
with `net.close()` (call it in a finally). Names carry the test's pid and a random tag, so
two tests never share a namespace. `Net` raises Unavailable when namespaces cannot be made
(no root, no iproute2): the test exits 77 then.

`launcher_env(style, rank, world, master, port)` is what a launcher would set for one rank:
torchrun's, Slurm's (srun, with a compact node list) or Open MPI's (mpirun) variables;
`Nodes` starts one `vflow run` per rank on its host with them, `one_node` the same run on
this machine alone (the reference a multi-node run is compared with).
"""
import hashlib
import os
import random
import shutil
import subprocess
import time

BUILD = os.environ.get("VFLOW_BUILD", "build")
SRC = os.environ.get("VFLOW_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(BUILD, "vflow")
TRAIN_TOOL = os.path.join(BUILD, "tools", "train_tool")
TRAIN = os.path.join(SRC, "pipelines", "train_dit.lua")
FAILS = []

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                 "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_NODE_RANK", "PMI_RANK", "PMI_SIZE",
                 "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
                 "SLURM_NODEID", "SLURM_NNODES", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_JOB_ID",
                 "VFLOW_RANK", "VFLOW_WORLD_SIZE", "VFLOW_LOCAL_RANK", "VFLOW_LOCAL_WORLD_SIZE", "VFLOW_NODE_RANK",
                 "VFLOW_NNODES", "VFLOW_MASTER_ADDR", "VFLOW_MASTER_PORT", "VFLOW_ADDR", "VFLOW_RUN_KEY")


class Unavailable(Exception):
    pass


def ip(*args, check=True):
    r = subprocess.run(["ip"] + list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("ip %s: %s" % (" ".join(args), r.stderr.strip()))
    return r


class Net:
    def __init__(self, n):
        if not shutil.which("ip"):
            raise Unavailable("no iproute2")
        tag = "%04x%02x" % (os.getpid() & 0xFFFF, random.randrange(256))
        self.tag = tag
        self.hub = "vfh" + tag
        self.hosts = []
        self.links = []
        r = ip("netns", "add", self.hub, check=False)
        if r.returncode != 0:
            raise Unavailable("ip netns add: %s" % r.stderr.strip())
        try:
            self._in(self.hub, "ip", "link", "add", "br0", "type", "bridge")
            self._in(self.hub, "ip", "link", "set", "br0", "up")
            for i in range(n):
                self.add_host()
        except Exception:
            self.close()
            raise

    def _in(self, ns, *argv):
        r = subprocess.run(["ip", "netns", "exec", ns] + list(argv), capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("%s: %s: %s" % (ns, " ".join(argv), r.stderr.strip()))
        return r

    def add_host(self):
        i = len(self.hosts)
        ns = "vfn%s%d" % (self.tag, i)
        a, b = "vfa%s%d" % (self.tag, i), "vfb%s%d" % (self.tag, i)  # <= 15 characters
        ip("netns", "add", ns)
        self.hosts.append(ns)
        ip("link", "add", a, "type", "veth", "peer", "name", b)
        ip("link", "set", a, "netns", ns)
        ip("link", "set", b, "netns", self.hub)
        self._in(self.hub, "ip", "link", "set", b, "master", "br0")
        self._in(self.hub, "ip", "link", "set", b, "up")
        self._in(ns, "ip", "addr", "add", "%s/24" % self.addr(i), "dev", a)
        self._in(ns, "ip", "link", "set", a, "up")
        self._in(ns, "ip", "link", "set", "lo", "up")
        self.links.append(a)
        return i

    def addr(self, i):
        return "10.77.0.%d" % (i + 1)

    def cut(self, i):
        """Takes host i off the network (its link down)."""
        self._in(self.hosts[i], "ip", "link", "set", self.links[i], "down")

    def popen(self, i, argv, env, **kw):
        """A process on host i (ip netns exec execs it: the pid is the program's)."""
        return subprocess.Popen(["ip", "netns", "exec", self.hosts[i]] + list(argv), env=env, **kw)

    def close(self):
        for ns in self.hosts + [self.hub]:
            # processes still in a namespace keep it alive; the tests kill theirs first
            ip("netns", "delete", ns, check=False)
        self.hosts = []


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(extra or {})
    return env


def launcher_env(style, rank, world, master, port, job=None):
    """The variables launcher `style` gives rank `rank` of `world` (one rank per node)."""
    if style == "torchrun":
        return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                "GROUP_RANK": str(rank), "MASTER_ADDR": master, "MASTER_PORT": str(port)}
    if style == "slurm":
        # a compact list as srun gives it; hosts here are addresses, "10.77.0.[1-3]"
        base, last = master.rsplit(".", 1)
        nodelist = "%s.[%s-%d]" % (base, last, int(last) + world - 1)
        # the port is derived from the job id (rank.h): 20000 + job % 20000
        return {"SLURM_PROCID": str(rank), "SLURM_NTASKS": str(world), "SLURM_LOCALID": "0",
                "SLURM_NTASKS_PER_NODE": "1", "SLURM_NODEID": str(rank), "SLURM_NNODES": str(world),
                "SLURM_JOB_NODELIST": nodelist, "SLURM_STEP_NODELIST": nodelist,
                "SLURM_JOB_ID": str(job if job is not None else port - 20000)}
    if style == "openmpi":
        # mpirun names no meeting place: the user passes one (docs/MULTINODE.md)
        return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(world),
                "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
                "OMPI_COMM_WORLD_NODE_RANK": str(rank), "VFLOW_MASTER_ADDR": master,
                "VFLOW_MASTER_PORT": str(port)}
    raise ValueError(style)


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)
    return cond


def md5(path):
    try:
        return hashlib.md5(open(path, "rb").read()).hexdigest()
    except OSError:
        return None


def tail(path, n=12):
    try:
        return "".join(open(path, errors="replace").readlines()[-n:])
    except OSError:
        return "(no %s)" % path


class Nodes:
    """One `vflow run` per node of net, rank k on host k, with a launcher's variables."""

    def __init__(self, net, tmp, tag, style, script, sets, port, world=2, env=None, ranks=None, extra=None):
        self.procs, self.outs = {}, {}
        self.run_dir = os.path.join(tmp, tag)
        for rank in (ranks if ranks is not None else range(world)):
            e = clean_env(launcher_env(style, rank, world, net.addr(0), port))
            e["OMP_NUM_THREADS"] = "1"
            e.update(env or {})
            out = os.path.join(tmp, "%s.rank%d.out" % (tag, rank))
            self.outs[rank] = out
            args = [VFLOW, "run", script, "--run-dir", self.run_dir] + [x for s in sets for x in ("--set", s)]
            args += (extra or {}).get(rank, [])
            self.procs[rank] = net.popen(rank, args, e, stdout=open(out, "w"), stderr=subprocess.STDOUT)

    def wait(self, timeout=180):
        t_end = time.monotonic() + timeout
        rcs = {}
        for rank, p in self.procs.items():
            try:
                rcs[rank] = p.wait(timeout=max(1, t_end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                rcs[rank] = p.wait()
                print("rank %d timed out" % rank)
        return rcs

    def kill(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    def describe(self):
        return "\n".join("rank %d:\n%s" % (r, tail(o)) for r, o in self.outs.items())


def one_node(tmp, tag, script, sets):
    run_dir = os.path.join(tmp, tag)
    out = os.path.join(tmp, tag + ".out")
    env = clean_env({"OMP_NUM_THREADS": "1"})
    args = [VFLOW, "run", script, "--run-dir", run_dir] + [x for s in sets for x in ("--set", s)]
    rc = subprocess.run(args, env=env, stdout=open(out, "w"), stderr=subprocess.STDOUT, timeout=300).returncode
    check(rc == 0, "%s: one-node run exit %d\n%s" % (tag, rc, tail(out)))
    return run_dir


def listening(net, i):
    """(address, port) of every TCP socket listening on host i."""
    r = subprocess.run(["ip", "netns", "exec", net.hosts[i], "cat", "/proc/net/tcp"], capture_output=True, text=True)
    out = []
    for line in r.stdout.splitlines()[1:]:
        f = line.split()
        if len(f) > 3 and f[3] == "0A":  # LISTEN
            a, p = f[1].split(":")
            addr = ".".join(str(int(a[k:k + 2], 16)) for k in (6, 4, 2, 0))
            out.append((addr, int(p, 16)))
    return out


def run_log(run_dir):
    try:
        return open(os.path.join(run_dir, "run.log"), errors="replace").read()
    except OSError:
        return ""
