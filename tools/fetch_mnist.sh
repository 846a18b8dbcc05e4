#!/usr/bin/env bash
# Put the four MNIST IDX files into data/mnist/ (git-ignored), verified.
#
#   tools/fetch_mnist.sh [--mirror DIR] [--dest DIR]
#
# Source, in order: --mirror DIR, $PTXLAB_MNIST_MIRROR, ../shared/data/mnist beside
# the repository when it exists, else the public MNIST mirrors over HTTPS.
# Each file's uncompressed content must match data/SHA256SUMS; a file that does not
# is removed and the script fails. Files already present and valid are kept.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest="$root/data/mnist"
mirror="${PTXLAB_MNIST_MIRROR:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --mirror) mirror="$2"; shift 2 ;;
    --dest) dest="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fetch_mnist: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$mirror" ] && [ -d "$root/../shared/data/mnist" ]; then mirror="$root/../shared/data/mnist"; fi

files="train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte"
urls="https://ossci-datasets.s3.amazonaws.com/mnist https://storage.googleapis.com/cvdf-datasets/mnist"
mkdir -p "$dest"

want_sum() { awk -v f="$1" '$2 == f { print $1 }' "$root/data/SHA256SUMS"; }
have_sum() { gzip -dc -f "$1" | sha256sum | cut -d' ' -f1; }   # uncompressed content, .gz or raw

for f in $files; do
  out="$dest/$f.gz"
  want=$(want_sum "$f")
  [ -n "$want" ] || { echo "fetch_mnist: no checksum for $f in data/SHA256SUMS" >&2; exit 1; }
  if [ -f "$out" ] && [ "$(have_sum "$out")" = "$want" ]; then echo "ok       $f (already here)"; continue; fi
  rm -f "$out"
  if [ -n "$mirror" ]; then
    if [ -f "$mirror/$f.gz" ]; then cp "$mirror/$f.gz" "$out"
    elif [ -f "$mirror/$f" ]; then gzip -c "$mirror/$f" > "$out"
    else echo "fetch_mnist: $mirror has no $f(.gz)" >&2; exit 1; fi
    src="$mirror"
  else
    got=""
    for u in $urls; do
      if curl -fsSL --retry 2 -o "$out" "$u/$f.gz"; then got="$u"; break; fi
    done
    [ -n "$got" ] || { echo "fetch_mnist: could not download $f.gz from any mirror ($urls)" >&2; rm -f "$out"; exit 1; }
    src="$got"
  fi
  sum=$(have_sum "$out")
  if [ "$sum" != "$want" ]; then
    rm -f "$out"
    echo "fetch_mnist: $f from $src has SHA-256 $sum, expected $want: refused" >&2
    exit 1
  fi
  echo "fetched  $f from $src (sha256 ok)"
done
echo "MNIST is in $dest"
