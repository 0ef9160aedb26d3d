#!/usr/bin/env bash
# Install the project from uv.lock with another build of the same torch/torchvision pair:
#
#   bash containers/torch-variant.sh cpu      # CPU only: no CUDA or triton wheels (~4 GB less)
#   bash containers/torch-variant.sh cu126    # CUDA 12.6 wheels, for NVIDIA drivers >= 560
#   bash containers/torch-variant.sh cu128    # CUDA 12.8 wheels, for NVIDIA drivers >= 570
#   uv run --no-sync snakemake ...            # then run WITHOUT syncing (uv run would put
#                                             # uv.lock's CUDA 13 build back)
#
# uv.lock holds PyPI's torch 2.14.1, built for CUDA 13.0 (NVIDIA driver >= 580). PyPI has
# only that build; the others live on PyTorch's own index. Everything except torch,
# torchvision and torch's CUDA runtime packages (read from uv.lock: nvidia-*, cuda-*,
# triton) is installed exactly as locked; then torch and torchvision come from
# https://download.pytorch.org/whl/<variant> at the locked versions. CUDA 12 builds bring
# their own nvidia-*-cu12 runtime packages from PyPI; those are resolved, not locked.
# Extra arguments go to `uv sync` (the container recipes pass --no-default-groups); it
# runs --inexact, so a second call (after the project's sources arrive) keeps the torch
# build the first one installed. DRY_RUN=1 shows what would be installed, offline.
set -euo pipefail
cd "$(dirname "$0")/.."

variant="${1:?usage: containers/torch-variant.sh cpu|cu126|cu128 [uv sync args]}"
shift
case "$variant" in
  cpu|cu126|cu128) ;;
  *) echo "containers/torch-variant.sh: unknown variant '$variant' (cpu, cu126, cu128)" >&2; exit 2 ;;
esac

# torch / torchvision versions and the CUDA runtime packages, as uv.lock has them
locked() { awk -v n="$1" '$0 == "name = \"" n "\"" {getline; gsub(/version = |"/, ""); print; exit}' uv.lock; }
torch_version="$(locked torch)"
vision_version="$(locked torchvision)"
mapfile -t gpu_packages < <(sed -n 's/^name = "\(nvidia-[^"]*\|cuda-[^"]*\|triton\)"$/\1/p' uv.lock)
skip=(--no-install-package torch --no-install-package torchvision)
for p in "${gpu_packages[@]}"; do skip+=(--no-install-package "$p"); done

dry=()
[ "${DRY_RUN:-0}" = 1 ] && dry=(--dry-run)
uv sync --frozen --inexact "${dry[@]}" "${skip[@]}" "$@"
deps=()
[ "$variant" = cpu ] && deps=(--no-deps)  # the CPU wheels need nothing uv.lock lacks
install=(uv pip install "${deps[@]}" --index-url "https://download.pytorch.org/whl/$variant"
         --extra-index-url https://pypi.org/simple
         "torch==${torch_version}+${variant}" "torchvision==${vision_version}+${variant}")
if [ "${DRY_RUN:-0}" = 1 ]; then
  echo "would run: ${install[*]}"
  exit 0
fi
"${install[@]}"
uv run --no-sync python -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'CUDA', torch.version.cuda)"
