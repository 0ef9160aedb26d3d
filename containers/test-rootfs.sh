#!/usr/bin/env bash
# Build the psrnn image as a Debian 12 root file system and reproduce the small config in it:
#
#   sudo bash containers/test-rootfs.sh [WORKDIR]       # default /var/tmp/psrnn-rootfs
#   SQUASHFS=1 sudo bash containers/test-rootfs.sh      # also the compressed size (~ the .sif)
#
# 1. debootstrap --variant=minbase bookworm from the Debian mirror (what
#    containers/psrnn-debian.def's `Bootstrap: debootstrap` does);
# 2. containers/install.sh in it (chroot), PSRNN_PYTHON=system, TORCH=lock (uv.lock as is);
# 3. config/small.yaml's pipeline: Snakemake on the host with --use-singularity, each job in
#    the root file system through a stand-in for `apptainer exec` (chroot, the checkout
#    bound at the same path, the image's PATH), as Apptainer would run it in the .sif;
# 4. `python -m psrnn check` in it, against tests/expected/small.json.
# The numbers go to WORKDIR/summary.txt (containers/README.md has two runs'): 7 to 9 minutes
# on 2 busy cores (debootstrap 40 s, install.sh 2 min, the pipeline 5-6 min), 11 more for
# SQUASHFS=1.
#
# Needs root, debootstrap, the Debian mirror and PyPI, and the host's .venv (for Snakemake).
# The checkout is copied (tracked and untracked, not ignored, files; SOURCE=<commit>: that
# commit) to WORKDIR/checkout, so results land there. The host's uv cache (`uv cache dir`, or
# UV_CACHE=dir) is bound in, so uv.lock's wheels (2.9 GiB) are not downloaded again
# (UV_CACHE=none: no cache), and so is the host's CA bundle (SSL_CERT_FILE), for sites whose
# proxy re-signs TLS. A second run reuses the root file system; `rm -rf WORKDIR` after a run
# (everything is unmounted on exit) starts afresh.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mkdir -p "${1:-/var/tmp/psrnn-rootfs}" && cd "${1:-/var/tmp/psrnn-rootfs}" && pwd)"
ROOTFS="$WORK/rootfs"
CHECKOUT="$WORK/checkout"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
TORCH="${TORCH:-lock}"
CORES="${CORES:-all}"
SNAKEMAKE="${SNAKEMAKE:-$REPO/.venv/bin/snakemake}"
# What the recipes copy into /opt/psrnn (Dockerfile COPY, the .def files' %files).
RECIPE_FILES=(pyproject.toml uv.lock README.md src config containers/install.sh containers/torch-variant.sh)
IMAGE_PATH=/opt/psrnn/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin  # .def's %environment
SUMMARY="$WORK/summary.txt"
TIMEFORMAT='%R s wall, %U s user + %S s system CPU'

[ "$(id -u)" = 0 ] || { echo "test-rootfs.sh: needs root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "test-rootfs.sh: apt-get install debootstrap" >&2; exit 2; }
[ -x "$SNAKEMAKE" ] || { echo "test-rootfs.sh: no $SNAKEMAKE (uv sync --frozen first)" >&2; exit 2; }

MOUNTS=()
mounted() { MOUNTS+=("$1"); }
unmount_all() {
  local i
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount -R "${MOUNTS[i]}" || umount -lR "${MOUNTS[i]}"; done
  MOUNTS=()
}
SAMPLER=""
# shellcheck disable=SC2329  # run by the EXIT trap
cleanup() {
  [ -z "$SAMPLER" ] || kill "$SAMPLER" 2>/dev/null || true
  unmount_all
}
trap cleanup EXIT
log() { echo "$*" | tee -a "$SUMMARY"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
timed() {  # timed LABEL CMD...: run CMD, log its wall and CPU time and the load around it
  local label="$1" t start
  shift
  start="$(load)"
  { time "$@" 2>&1 | tee -a "$WORK/$label.log"; } 2>"$WORK/$label.time"
  t="$(tail -1 "$WORK/$label.time")"
  log "$label: $t (load average before: $start, after: $(load))"
}

: >"$SUMMARY"
log "test-rootfs.sh $(date -u +%FT%TZ) on $(nproc) cores, $(uname -m), source: ${SOURCE:-working tree of} $(git -C "$REPO" rev-parse --short "${SOURCE:-HEAD}")"

# The checkout, frozen for the whole run.
rm -rf "$CHECKOUT"
mkdir -p "$CHECKOUT"
if [ -n "${SOURCE:-}" ]; then
  git -C "$REPO" archive "$SOURCE" | tar -xf - -C "$CHECKOUT"
else
  git -C "$REPO" ls-files -z -co --exclude-standard | (cd "$REPO" && tar --null -T - -cf -) | tar -xf - -C "$CHECKOUT"
fi

# 1. The base OS.
if [ ! -e "$ROOTFS/etc/debian_version" ]; then
  timed debootstrap debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR"
fi

# 2. The recipe, as the .def's %files and %post run it.
mkdir -p "$ROOTFS/opt/psrnn/containers"
rm -rf "$ROOTFS/opt/psrnn/src" "$ROOTFS/opt/psrnn/config"
for f in "${RECIPE_FILES[@]}"; do cp -a "$CHECKOUT/$f" "$ROOTFS/opt/psrnn/$f"; done
env_in=(PATH="$IMAGE_PATH" HOME=/root LANG=C.UTF-8 PSRNN_PYTHON=system TORCH="$TORCH")
cache="${UV_CACHE:-$(uv cache dir 2>/dev/null || true)}"
if [ -n "$cache" ] && [ "$cache" != none ] && [ -d "$cache" ]; then
  mkdir -p "$ROOTFS/mnt/uv-cache"
  mount --bind "$cache" "$ROOTFS/mnt/uv-cache"; mounted "$ROOTFS/mnt/uv-cache"
  env_in+=(UV_CACHE_DIR=/mnt/uv-cache)
  log "uv cache: $cache (bound in)"
fi
ca="${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}"
if [ -f "$ca" ]; then
  touch "$ROOTFS/run/host-ca.crt"
  mount --bind "$ca" "$ROOTFS/run/host-ca.crt"; mounted "$ROOTFS/run/host-ca.crt"
  env_in+=(SSL_CERT_FILE=/run/host-ca.crt PIP_CERT=/run/host-ca.crt)
fi
mount -t proc proc "$ROOTFS/proc"; mounted "$ROOTFS/proc"
timed install chroot "$ROOTFS" /usr/bin/env -i "${env_in[@]}" bash /opt/psrnn/containers/install.sh
unmount_all
rm -f "$ROOTFS/run/host-ca.crt"
rmdir "$ROOTFS/mnt/uv-cache" 2>/dev/null || true
log "image: $(grep -o 'psrnn .*' "$WORK/install.log" | tail -1)"
log "root file system: $(du -sm "$ROOTFS" | cut -f1) MB, of which /opt/psrnn/.venv $(du -sm "$ROOTFS/opt/psrnn/.venv" | cut -f1) MB"
if [ "${SQUASHFS:-0}" = 1 ]; then  # what a .sif holds: the root file system as one squashfs (gzip)
  rm -f "$WORK/psrnn-debian.sqfs"
  timed squashfs mksquashfs "$ROOTFS" "$WORK/psrnn-debian.sqfs" -comp gzip -no-progress -quiet
  log "squashfs (gzip): $(du -m --apparent-size "$WORK/psrnn-debian.sqfs" | cut -f1) MB"
fi

# 3. The small pipeline with --use-singularity, its jobs in the root file system.
mkdir -p "$WORK/bin"
cat >"$WORK/bin/apptainer" <<EOF
#!/usr/bin/env bash
# Stand-in for Apptainer, written by containers/test-rootfs.sh: \`exec [options] IMAGE CMD...\`
# runs CMD in $ROOTFS (chroot) in the current directory, with the host's environment and the
# image's PATH, as \`apptainer exec\` runs it in the image. IMAGE and --nv are not used.
set -euo pipefail
case "\${1:-}" in
  --version) echo "apptainer version 1.3.0"; exit 0 ;;
  --quiet) shift 2 ;;  # --quiet --silent
esac
[ "\${1:-}" = exec ] || { echo "apptainer stand-in: only exec and --version" >&2; exit 2; }
shift
dir="\$PWD"
while [ \$# -gt 0 ]; do
  case "\$1" in
    --nv) shift ;;
    --home) export HOME="\$2"; shift 2 ;;
    --pwd) dir="\$2"; shift 2 ;;
    --bind)  # Snakemake binds its source cache, which only script: rules read; psrnn's are shell:
      case "\$2" in */snakemake/source-cache) shift 2 ;; *) echo "apptainer stand-in: no --bind \$2" >&2; exit 2 ;; esac ;;
    -*) echo "apptainer stand-in: \$1 is not supported" >&2; exit 2 ;;
    *) break ;;
  esac
done
shift  # IMAGE
for v in \$(compgen -e | grep -E '^(SINGULARITY|APPTAINER)ENV_' || true); do export "\${v#*ENV_}=\${!v}"; done
exec chroot "$ROOTFS" /usr/bin/env PATH="$IMAGE_PATH" PYTHONNOUSERSITE=1 sh -c 'cd "\$0" && exec "\$@"' "\$dir" "\$@"
EOF
chmod +x "$WORK/bin/apptainer"
: >"$WORK/psrnn-debian.sif"  # the config's image: a placeholder, the stand-in runs ROOTFS
cat >"$CHECKOUT/config/small-rootfs.yaml" <<EOF
# config/small.yaml in the root file system of containers/test-rootfs.sh (written by it)
extends: small.yaml
container: $WORK/psrnn-debian.sif
EOF
mkdir -p "$ROOTFS$CHECKOUT"
mount --bind "$CHECKOUT" "$ROOTFS$CHECKOUT"; mounted "$ROOTFS$CHECKOUT"
mount -t proc proc "$ROOTFS/proc"; mounted "$ROOTFS/proc"
# rslave before anything else: unmounting them must not reach the host's /dev and /sys
mount --rbind /dev "$ROOTFS/dev"; mount --make-rslave "$ROOTFS/dev"; mounted "$ROOTFS/dev"
mount --rbind /sys "$ROOTFS/sys"; mount --make-rslave "$ROOTFS/sys"; mounted "$ROOTFS/sys"
(while sleep 30; do cut -d' ' -f1 /proc/loadavg; done) >"$WORK/load.txt" &
SAMPLER=$!
cd "$CHECKOUT"
timed pipeline env PATH="$WORK/bin:$PATH" PYTHONPATH="$CHECKOUT/src" \
  "$SNAKEMAKE" --cores "$CORES" --configfile config/small-rootfs.yaml --use-singularity
kill "$SAMPLER"
SAMPLER=""
log "pipeline load average (1 min, every 30 s): $(awk '{s += $1; if ($1 > m) m = $1} END {
  if (NR) printf "mean %.2f, max %.2f over %d samples", s / NR, m, NR}' "$WORK/load.txt")"

# 4. The check, in the image.
set +e
PATH="$WORK/bin:$PATH" apptainer exec "$WORK/psrnn-debian.sif" env PYTHONPATH="$CHECKOUT/src" \
  python -m psrnn check --config config/small.yaml 2>&1 | tee "$WORK/check.log"
status="${PIPESTATUS[0]}"
set -e
log "$(grep '^check small: .* against' "$WORK/check.log")"
log "$(grep -E '^check small: (all|[0-9]+ diff)' "$WORK/check.log" | tail -1) (exit $status)"
unmount_all
find "$ROOTFS$(dirname "$CHECKOUT")" -depth -type d -empty -delete 2>/dev/null || true
exit "$status"
