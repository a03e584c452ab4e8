#!/usr/bin/env bash
# Installs what vflow needs on Debian 12, only what is missing; quiet when nothing is.
# Idempotent: run by `make run` / `make test` every time.
set -euo pipefail

pkgs=(build-essential cmake pkg-config git
      libzmq3-dev liblmdb-dev lmdb-utils liblua5.4-dev
      libavformat-dev libavcodec-dev libavutil-dev libswscale-dev ffmpeg
      python3 python3-pip python3-torch python3-numpy python3-lmdb)

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
