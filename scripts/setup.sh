#!/usr/bin/env bash
# Installs what vflow needs on Debian 12, only what is missing; quiet when nothing is.
# Idempotent: run by `make run` / `make test` every time.
set -euo pipefail

pkgs=(build-essential cmake pkg-config git
      libzmq3-dev libsodium-dev libssl-dev liblmdb-dev lmdb-utils liblua5.4-dev
      libavformat-dev libavcodec-dev libavutil-dev libswscale-dev ffmpeg
      python3 python3-pip python3-torch python3-numpy python3-lmdb
      clang libclang-rt-14-dev libomp-14-dev)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The safetensors reference reader (tests check our checkpoints with it) is on PyPI only.
if ! /usr/bin/python3 -c 'import safetensors' 2>/dev/null; then
  echo "setup: installing safetensors (PyPI) for /usr/bin/python3"
  $SUDO /usr/bin/python3 -m pip install -q --break-system-packages safetensors
fi

# The independent Wan reference (diffusers' WanTransformer3DModel / AutoencoderKLWan,
# transformers' UMT5EncoderModel) for the parity tests, on Debian's torch 1.13: a venv that
# sees the system packages (torch, numpy) with pure-Python PyPI packages pinned and
# installed without their dependencies (they would pull a CUDA torch). Tests find it at
# $VFLOW_REF_PY (default /opt/vflow-ref/bin/python); tests/reference/wan_ref.py shims the
# two things torch 1.13 lacks.
REF=${VFLOW_REF_VENV:-/opt/vflow-ref}
ref_pins=(diffusers==0.33.1 transformers==4.46.3 tokenizers==0.20.3 huggingface-hub==0.29.3
          safetensors==0.8.0 regex==2026.11.19 filelock==4.2.12 fsspec==2026.9.0
          importlib_metadata==10.2.0 zipp==4.1.2 packaging==26.3 pillow==13.0.0 tqdm==4.70.1)
if ! "$REF/bin/python" -c 'import diffusers, transformers, safetensors' 2>/dev/null; then
  echo "setup: making the Wan reference venv $REF (diffusers, transformers; PyPI, pinned)"
  $SUDO /usr/bin/python3 -m venv --system-site-packages "$REF"
  $SUDO "$REF/bin/pip" install -q --no-deps "${ref_pins[@]}"
fi

# ml_dtypes, the float8_e4m3fn reference of tests/reference/test_fp8_torch.py where the
# torch at hand (Debian's 1.13) has no float8 dtypes: pinned, without dependencies (it
# needs only Debian's numpy).
if ! "$REF/bin/python" -c 'import ml_dtypes' 2>/dev/null; then
  echo "setup: installing ml_dtypes (PyPI, pinned) into $REF"
  $SUDO "$REF/bin/pip" install -q --no-deps ml_dtypes==0.4.1
fi

# A second reference venv the same way, with diffusers 0.35.2: the image-to-video Wan
# (WanTransformer3DModel(image_dim=…), 36 input channels) for
# tests/reference/test_wan_i2v_diffusers.py ($VFLOW_REF35_PY; wan_ref.py adds the
# torch.nn.RMSNorm it needs on torch 1.13).
REF35=${VFLOW_REF35_VENV:-/opt/vflow-ref35}
ref35_pins=(diffusers==0.35.2 huggingface-hub==0.34.4 transformers==4.46.3 tokenizers==0.20.3
            safetensors==0.8.0 regex==2026.11.19 filelock==4.2.12 fsspec==2026.9.0
            importlib_metadata==10.2.0 zipp==4.1.2 packaging==26.3 pillow==13.0.0 tqdm==4.70.1)
if ! "$REF35/bin/python" -c 'import diffusers, transformers, safetensors, sys
sys.exit(diffusers.__version__ != "0.35.2")' 2>/dev/null; then
  echo "setup: making the image-to-video reference venv $REF35 (diffusers 0.35.2; PyPI, pinned)"
  $SUDO /usr/bin/python3 -m venv --system-site-packages "$REF35"
  $SUDO "$REF35/bin/pip" install -q --no-deps "${ref35_pins[@]}"
fi

# TensorBoard — the server `make run` points at ($REF/bin/tensorboard --logdir …) and its
# event reader for tests/reference/test_tb_events.py — and tbparse, in the same venv the
# same way (pinned, without dependencies: the pins are the whole closure beside Debian's
# numpy and the pins above; werkzeug, markdown, grpcio and the data server are what the
# server itself imports).
tb_pins=(tensorboard==2.20.0 tbparse==0.0.9 protobuf==5.29.5 absl-py==2.1.0 pandas==2.2.3
         python-dateutil==2.9.0.post0 pytz==2025.2 tzdata==2025.2 six==1.16.0
         werkzeug==3.1.3 markupsafe==3.0.2 markdown==3.7 grpcio==1.68.1 tensorboard-data-server==0.7.2)
# (found without importing them: quick when everything is there)
tb_mods="tensorboard tbparse werkzeug markdown markupsafe grpc tensorboard_data_server google.protobuf absl pandas"
if ! "$REF/bin/python" -c 'import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in sys.argv[1].split()))' "$tb_mods" 2>/dev/null; then
  echo "setup: installing tensorboard and tbparse (PyPI, pinned) into $REF"
  $SUDO "$REF/bin/pip" install -q --no-deps "${tb_pins[@]}"
fi

# cuDNN's C++ graph API for the CUDA backend's fused attention (kernels/cuda/cudnn_att.cpp):
# the header-only cudnn-frontend (MIT) from the include/ of PyPI's nvidia-cudnn-frontend
# wheel, pinned, into .deps/ (git-ignored). Only where a CUDA toolkit is (nvcc); libcudnn
# itself comes with the toolkit or PyTorch and is loaded at run time. A fetch that fails
# is said and the build leaves cuDNN attention out (CMake says so too): the hand kernels
# run attention then.
FE_VER=1.32.0
FE_DIR=$(cd "$(dirname "$0")/.." && pwd)/.deps/cudnn-frontend
if { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; } &&
   [ "$(cat "$FE_DIR/VERSION" 2>/dev/null)" != "$FE_VER" ]; then
  echo "setup: fetching the cudnn-frontend $FE_VER headers (PyPI nvidia-cudnn-frontend) into $FE_DIR"
  fe_tmp=$(mktemp -d)
  if /usr/bin/python3 -m pip download -q --no-deps --only-binary=:all: \
       "nvidia-cudnn-frontend==$FE_VER" -d "$fe_tmp" &&
     rm -rf "$FE_DIR" && mkdir -p "$FE_DIR" &&
     /usr/bin/python3 - "$fe_tmp" "$FE_DIR" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/nvidia_cudnn_frontend-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith("include/") and not n.endswith("/")]
    if not any(n == "include/cudnn_frontend.h" for n in names):
        sys.exit(whl + ": no include/cudnn_frontend.h")
    z.extractall(sys.argv[2], names)
PY
  then
    echo "$FE_VER" > "$FE_DIR/VERSION"
  else
    echo "setup: WARNING: could not fetch nvidia-cudnn-frontend==$FE_VER; the CUDA build leaves out" \
         "cuDNN attention (the hand kernels run it)"
    rm -rf "$FE_DIR"
  fi
  rm -rf "$fe_tmp"
fi
