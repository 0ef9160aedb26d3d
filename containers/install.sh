#!/usr/bin/env bash
# The psrnn image recipe: turn a base OS into the psrnn image. containers/Dockerfile,
# containers/psrnn.def and containers/psrnn-debian.def all run
# this script, as root, inside the image being built, from a copy of the repository's
# pyproject.toml, uv.lock, README.md, src/, config/ and containers/ at /opt/psrnn:
#
#   bash /opt/psrnn/containers/install.sh                       # Python 3.11.7 from uv, uv.lock as is
#   PSRNN_PYTHON=system bash /opt/psrnn/containers/install.sh   # the OS's python3 (Debian 12: 3.11.2)
#   TORCH=cpu bash /opt/psrnn/containers/install.sh             # PyTorch's CPU build (torch-variant.sh)
#   bash /opt/psrnn/containers/install.sh --no-install-project  # dependencies only (a Docker layer)
#
# Settings (environment):
#   PSRNN_PYTHON  a CPython version that uv installs (needs GitHub: python-build-standalone)
#                 or `system`: the OS's python3 from apt (Debian/Ubuntu; no download but
#                 the OS mirror). Default 3.11.7.
#   TORCH         lock (uv.lock's PyPI torch, CUDA 13.0 wheels) | cpu | cu126 | cu128.
#   UV_VERSION    the uv to use: an existing `uv` must be this version; without one it is
#                 installed from PyPI with the OS's pip (PSRNN_PYTHON=system only).
#   UV_CACHE_DIR  a uv cache to reuse (tests/test_apptainer_real.py binds the host's); unset,
#                 nothing is cached in the image.
# Extra arguments go to `uv sync`. The virtual environment is /opt/psrnn/.venv: exactly
# uv.lock (--frozen) without the dev and workflow groups (test tools and the workflow
# engines run on the host and start jobs in the image).
set -euo pipefail
cd "$(dirname "$0")/.."

PSRNN_PYTHON="${PSRNN_PYTHON:-3.11.7}"
TORCH="${TORCH:-lock}"
UV_VERSION="${UV_VERSION:-0.13.8}"
export UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy
[ -n "${UV_CACHE_DIR:-}" ] || export UV_NO_CACHE=1

# Python: the OS's (with uv from PyPI through the OS's pip when there is no uv), or uv's
# managed build at a pinned version.
if [ "$PSRNN_PYTHON" = system ]; then
  export UV_PYTHON_PREFERENCE=only-system UV_PYTHON_DOWNLOADS=never
  packages=(ca-certificates)
  command -v python3 >/dev/null || packages+=(python3)
  command -v uv >/dev/null || packages+=(python3-pip)
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${packages[@]}"
  if ! command -v uv >/dev/null; then
    python3 -m pip install -q --no-cache-dir --break-system-packages --root-user-action=ignore "uv==$UV_VERSION"
    apt-get purge -y -q --autoremove python3-pip
  fi
  apt-get clean  # the downloaded .debs: Debian keeps them, Docker's bases do not
  rm -rf /var/lib/apt/lists/*
  python=/usr/bin/python3
else
  export UV_PYTHON_PREFERENCE=only-managed UV_PYTHON_INSTALL_DIR="${UV_PYTHON_INSTALL_DIR:-/opt/python}"
  python="$PSRNN_PYTHON"
fi
have="$(uv --version | cut -d' ' -f2)"
[ "$have" = "$UV_VERSION" ] || { echo "install.sh: uv $have, expected $UV_VERSION" >&2; exit 2; }

[ "$PSRNN_PYTHON" = system ] || uv python install "$PSRNN_PYTHON"

# The project: uv.lock as it is, or the same lock with another torch build.
if [ "$TORCH" = lock ]; then
  uv sync --frozen --no-default-groups --python "$python" "$@"
else
  bash containers/torch-variant.sh "$TORCH" --no-default-groups --python "$python" "$@"
fi

chmod -R a+rX .
[ ! -d "${UV_PYTHON_INSTALL_DIR:-/nonexistent}" ] || chmod -R a+rX "$UV_PYTHON_INSTALL_DIR"
case " $* " in
  *" --no-install-project "*) ;;
  *) .venv/bin/python -c "import platform, psrnn, torch; print('psrnn', psrnn.__version__, \
'python', platform.python_version(), 'torch', torch.__version__, 'cuda available:', torch.cuda.is_available())" ;;
esac
