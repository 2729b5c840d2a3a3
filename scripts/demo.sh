#!/usr/bin/env bash
# Install nct (the self-contained toolkit: its own Python, static launchers; see
# docs/toolkit.md) and what the demo uses, then run the main job: a simulated 2-GPU node, its
# `nvidia-container-cli info` and `list`, and a busybox container given GPU 1 by our hook.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    python3 python3-venv gcc gcc-multilib libc6-dev xz-utils runc busybox-static >/dev/null
# A throwaway venv only for pip (fetching the pinned wheels); the toolkit does not use it.
python3 -m venv /var/cache/nct/build-venv
rm -rf /opt/nct
/var/cache/nct/build-venv/bin/python packaging/toolkit/assemble.py --out /opt/nct >/dev/null
ln -sf /opt/nct/nct /opt/nct/nvidia-* /usr/local/bin/
node=$(mktemp -d /tmp/nct-node.XXXXXX)
rm -rf "$node"
nct sim create "$node" --gpus 2
nct sim run "$node" -- sh -c 'nvidia-container-cli info && nvidia-container-cli list'
exec python3 "$PWD/scripts/demo_container.py" "$node"
