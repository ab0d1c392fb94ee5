#!/usr/bin/env bash
# ansible-test must run from inside .../ansible_collections/qonnect/core: copy the tracked and
# untracked-but-not-ignored files of the checkout to DEST and make DEST a git repository
# (ansible-test lists content through git).
set -euo pipefail
dest=$1
root=$(cd "$(dirname "$0")/.." && pwd)
case "$dest" in
  */ansible_collections/qonnect/core) ;;
  *) echo "collection-copy: $dest must end in ansible_collections/qonnect/core" >&2; exit 2 ;;
esac
rm -rf "$dest"
mkdir -p "$dest"
cd "$root"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -e "$f" ] || continue
  mkdir -p "$dest/$(dirname "$f")"
  cp -p "$f" "$dest/$f"
done
cd "$dest"
git init -q . && git add -A >/dev/null 2>&1 && git -c user.name=ci -c user.email=ci@localhost commit -qm copy >/dev/null
