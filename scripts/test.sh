#!/usr/bin/env bash
# Install the test dependencies (Debian + PyPI) and run the whole test suite. Debian 12, as root.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    python3 python3-venv python3-dev gcc gcc-multilib libc6-dev make \
    runc crun busybox-static docker.io containerd podman \
    dpkg-dev fakeroot iproute2 kmod procps util-linux mount ca-certificates debootstrap xz-utils \
    locales e2fsprogs >/dev/null
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/pip install -q -e '.[test]'
export PATH="$PWD/.venv/bin:$PATH"
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
