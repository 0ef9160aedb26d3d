#!/usr/bin/env bash
# Apptainer on a Debian 12 machine (glibc 2.36), from the Debian mirror alone:
#
#   sudo bash containers/install-apptainer.sh        # once; a second call does nothing
#   export APPTAINER_DROP_CAPS=CAP_SYS_RESOURCE        # as root on machines whose root lacks it
#
# Apptainer is in no Debian 12 suite; Debian unstable packages it (1.4.5 on 2026-11-27), built
# against glibc 2.38. Its two binaries import only two symbols newer than 2.36, C23's
# strtol/strtoul; containers/glibc_compat.py points them at the plain ones (and refuses, one
# line, when a binary needs anything else newer than the host's glibc). Then the package's
# libc6 bound is relaxed and apt installs it with its other dependencies from Debian 12,
# and debootstrap (containers/psrnn-debian.def bootstraps with it).
#
# Which package: unstable's current one, downloaded fresh (sha256 from the mirror's
# Packages index); when that one cannot be made to run here (a newer Apptainer needing more
# of glibc), the pinned copy: $PSRNN_APPTAINER_DEB, default ../shared/apptainer/ beside the
# checkout (apptainer_1.4.5-2_amd64.deb, sha256 26cf96e0...). The system's apt sources are
# never touched: the index is fetched over HTTP into a temporary folder, and only the
# dependencies come from the configured bookworm sources. Needs root, dpkg and apt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
pinned=${PSRNN_APPTAINER_DEB:-$here/../../shared/apptainer/apptainer_1.4.5-2_amd64.deb}
pinned_sha=26cf96e08fccb0e50ea0f285a5a19f940ee873d167a0680584fe6eba7d197d65
export APPTAINER_DROP_CAPS=${APPTAINER_DROP_CAPS:-CAP_SYS_RESOURCE}
say() { echo "install-apptainer: $*"; }
die() { echo "install-apptainer: $*" >&2; exit 2; }

if command -v apptainer > /dev/null && apptainer --version > /dev/null 2>&1 && command -v debootstrap > /dev/null; then
  say "$(apptainer --version) and debootstrap are installed already: nothing to do"
  exit 0
fi
[ "$(id -u)" = 0 ] || die "needs root (it installs a Debian package): run it with sudo"
command -v dpkg-deb > /dev/null && command -v apt-get > /dev/null || die "needs dpkg and apt (a Debian machine)"
. /etc/os-release
[ "${ID:-}" = debian ] || die "written for Debian 12 (this is ${PRETTY_NAME:-unknown}): install Apptainer as apptainer.org says"

if ! command -v debootstrap > /dev/null; then  # containers/psrnn-debian.def bootstraps with it
  apt-get install -y -qq --no-install-recommends debootstrap > /dev/null 2>&1 \
    || { apt-get update -qq > /dev/null 2>&1; apt-get install -y -qq --no-install-recommends debootstrap > /dev/null; } \
    || die "apt could not install debootstrap"
fi
if command -v apptainer > /dev/null && apptainer --version > /dev/null 2>&1; then
  say "$(apptainer --version) is installed already; debootstrap added"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fresh() {  # download unstable's apptainer into $work/fresh.deb, checked against the index's sha256
  curl -fsS --max-time 120 -o "$work/Packages.xz" "$mirror/dists/unstable/main/binary-amd64/Packages.xz" || return 1
  local entry file sha
  entry=$(xz -dc "$work/Packages.xz" | awk '/^Package: apptainer$/{p=1} p&&/^$/{exit} p')
  file=$(sed -n 's/^Filename: //p' <<< "$entry"); sha=$(sed -n 's/^SHA256: //p' <<< "$entry")
  [ -n "$file" ] && [ -n "$sha" ] || return 1
  say "downloading $mirror/$file"
  curl -fsS --max-time 600 -o "$work/fresh.deb" "$mirror/$file" || return 1
  echo "$sha  $work/fresh.deb" | sha256sum -c --quiet - || { say "sha256 mismatch for $file"; return 1; }
}

adapt() {  # adapt <deb> <out.deb>: patch both binaries, relax the libc6 bound, rebuild
  local pkg=$work/pkg
  rm -rf "$pkg"
  dpkg-deb -R "$1" "$pkg"
  local bins=(usr/bin/apptainer usr/lib/x86_64-linux-gnu/apptainer/bin/starter)
  (cd "$pkg" && python3 "$here/glibc_compat.py" "${bins[@]}") || return 1
  sed -i -E 's/libc6 \(>= 2\.(3[7-9]|[4-9][0-9])\)/libc6 (>= 2.34)/' "$pkg/DEBIAN/control"
  (cd "$pkg" && for b in "${bins[@]}"; do
     sed -i "\\#  $b\$#d" DEBIAN/md5sums && md5sum "$b" >> DEBIAN/md5sums; done)
  dpkg-deb -b "$pkg" "$2" > /dev/null
}

deb=""
if fresh && adapt "$work/fresh.deb" "$work/apptainer.deb"; then
  deb=$work/apptainer.deb
else
  say "unstable's package could not be used here; trying the pinned copy $pinned"
  [ -f "$pinned" ] || die "no usable package: the mirror's failed and $pinned is missing (set PSRNN_APPTAINER_DEB)"
  echo "$pinned_sha  $pinned" | sha256sum -c --quiet - || die "$pinned: sha256 is not the pinned one ($pinned_sha)"
  adapt "$pinned" "$work/apptainer.deb" || die "the pinned package cannot be adapted to this glibc either"
  deb=$work/apptainer.deb
fi
if ! apt-get install -y -qq --no-install-recommends "$deb" > "$work/apt.log" 2>&1; then
  apt-get update -qq > /dev/null 2>&1 || true  # a fresh machine may have no package lists yet
  apt-get install -y -qq --no-install-recommends "$deb" > "$work/apt.log" 2>&1 || { tail -n 5 "$work/apt.log" >&2; die "apt could not install the adapted package"; }
fi
apptainer --version > /dev/null 2>&1 || die "installed, but 'apptainer --version' fails: $(apptainer --version 2>&1 | tail -n 1)"
say "$(apptainer --version) installed (glibc $(ldd --version | head -n 1 | awk '{print $NF}')); as root export APPTAINER_DROP_CAPS=CAP_SYS_RESOURCE"
