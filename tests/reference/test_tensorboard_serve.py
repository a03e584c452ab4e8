# test_tensorboard_serve.py — the `tensorboard --logdir` line `make run` prints works on a
# machine scripts/setup.sh prepared: the TensorBoard it names (the reference venv's,
# ${VFLOW_REF_VENV:-/opt/vflow-ref}/bin/tensorboard) starts, serves a training run's event
# files and lists its scalars (train/loss) over HTTP, as a user's browser would ask.
# vflow-test: labels=reference timeout=300
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SRC = os.environ.get("VFLOW_SRC", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.environ.get("VFLOW_BUILD", "build")
VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(BUILD, "vflow")
VENV = os.environ.get("VFLOW_REF_VENV", "/opt/vflow-ref")
TB = os.path.join(VENV, "bin", "tensorboard")


def main():
    quick = open(os.path.join(SRC, "scripts", "run_quickstart.sh")).read()
    if "${VFLOW_REF_VENV:-/opt/vflow-ref}/bin/tensorboard --logdir" not in quick:
        print("FAIL: run_quickstart.sh does not print the reference venv's tensorboard")
        return 1
    if not os.path.exists(os.path.join(VENV, "bin", "python")):
        print("skip: no reference venv at %s (scripts/setup.sh makes it)" % VENV)
        return 77
    tmp = tempfile.mkdtemp(prefix="vf_tb_serve_")
    subprocess.run([os.path.join(BUILD, "tools", "train_tool"), "mkcache", os.path.join(tmp, "c.lmdb"),
                    "8", "4", "1", "8", "8", "7"], check=True, capture_output=True)
    r = subprocess.run([VFLOW, "run", os.path.join(SRC, "pipelines", "train_dit.lua"), "--set",
                        "cache=" + os.path.join(tmp, "c.lmdb"), "--set", "steps=3", "--run-dir",
                        os.path.join(tmp, "run")], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        print("FAIL: the training run: %s" % r.stderr)
        return 1
    with socket.socket() as s:  # a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if not os.access(TB, os.X_OK):
        print("FAIL: %s is not there: scripts/setup.sh installs it" % TB)
        return 1
    p = subprocess.Popen([TB, "--logdir", os.path.join(tmp, "run", "tb"), "--host", "127.0.0.1", "--port", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    tags, err = {}, ""
    try:
        deadline = time.time() + 90
        while time.time() < deadline and p.poll() is None:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/data/plugin/scalars/tags" % port, timeout=5) as f:
                    tags = json.loads(f.read())
                if any("train/loss" in v for v in tags.values()):
                    break
            except OSError as e:
                err = str(e)
            time.sleep(1)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
        out = p.communicate(timeout=30)[0]
    subprocess.run(["rm", "-rf", tmp])
    if not any("train/loss" in v for v in tags.values()):
        print("FAIL: %s served no train/loss (%s; tags %s)\n%s" % (TB, err, tags, out[-2000:]))
        return 1
    print("ok: %s serves %s" % (TB, sorted(next(iter(tags.values())))[:5]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
