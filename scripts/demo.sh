#!/usr/bin/env bash
# Install nct and everything it uses, then run the main job: a simulated 2-GPU node, its
# `nvidia-container-cli info` and `list`, and a busybox container given GPU 1 by our hook.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    python3 python3-venv gcc gcc-multilib libc6-dev runc busybox-static >/dev/null
python3 -m venv /opt/nct
/opt/nct/bin/pip install -q .
ln -sf /opt/nct/bin/nct /opt/nct/bin/nvidia-* /usr/local/bin/
node=$(mktemp -d /tmp/nct-node.XXXXXX)
rm -rf "$node"
nct sim create "$node" --gpus 2
nct sim run "$node" -- sh -c 'nvidia-container-cli info && nvidia-container-cli list'
exec python3 "$PWD/scripts/demo_container.py" "$node"
