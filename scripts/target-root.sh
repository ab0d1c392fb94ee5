#!/usr/bin/env bash
# A fresh Debian root for the real-target test (tests/integration/user_path/test_real_target.py):
# debootstrap --variant=minbase with Python (python3, python3-venv) and what its sshd needs
# (openssh-server), nothing of qonnect. Built once into a tarball in a cache outside the checkout
# (~/.cache/qonnect/target-root, QONNECT_TARGET_ROOT_CACHE moves it), reused by later runs; the
# tarball's path is printed. Needs root and Debian's package mirror (~100 s on the 2-core machine).
#   scripts/target-root.sh [SUITE]        SUITE defaults to the host's (bookworm here)
set -euo pipefail

suite=${1:-$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release 2>/dev/null || true)}
suite=${suite:-bookworm}
packages=python3,python3-venv,openssh-server
cache=${QONNECT_TARGET_ROOT_CACHE:-$HOME/.cache/qonnect/target-root}
# the mirror apt uses here (deb822 or one-line sources), else Debian's own
mirror=${QONNECT_DEBIAN_MIRROR:-$(
  { sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null
    sed -n 's/^deb \(\[[^]]*\] \)\?\([^ ]*\) .*/\2/p' /etc/apt/sources.list 2>/dev/null; } |
    grep -v security | head -n1 || true
)}
mirror=${mirror:-http://deb.debian.org/debian}
# the name changes with what the root holds, so a changed package list builds a new one
tarball="$cache/$suite-minbase-$(echo "$packages" | sha1sum | cut -c1-10).tar"

if [ "$(id -u)" != 0 ]; then
  echo "target-root: needs root (debootstrap, chroot)" >&2; exit 1
fi
if ! command -v debootstrap >/dev/null; then
  echo "target-root: installing debootstrap from Debian's packages" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock -w 900 9 || { echo "target-root: another build holds $cache/.lock" >&2; exit 1; }
if [ -s "$tarball" ]; then
  echo "$tarball"; exit 0
fi

work=$(mktemp -d "$cache/.build.XXXXXX")
cleanup() {
  # debootstrap mounts proc and sys in the root while it works; never delete through a mount
  awk -v r="$work/" 'index($5, r) == 1 {print $5}' /proc/self/mountinfo | sort -r |
    while read -r m; do umount -l "$m" || true; done
  if awk -v r="$work/" 'index($5, r) == 1 {f=1} END {exit !f}' /proc/self/mountinfo; then
    echo "target-root: $work still has mounts; not removed" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

started=$(date +%s)
if ! debootstrap --variant=minbase --include="$packages" "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1; then
  tail -n 20 "$work/debootstrap.log" >&2
  echo "target-root: debootstrap $suite from $mirror failed" >&2; exit 1
fi
# what each test makes afresh: host keys, and no package lists or downloaded .debs
rm -f "$work"/root/etc/ssh/ssh_host_*
rm -rf "$work"/root/var/cache/apt/archives/*.deb "$work"/root/var/lib/apt/lists/*
tar -C "$work/root" --numeric-owner -cf "$work/root.tar" .
mv "$work/root.tar" "$tarball"
echo "target-root: $suite root built in $(($(date +%s) - started)) s" >&2
echo "$tarball"
