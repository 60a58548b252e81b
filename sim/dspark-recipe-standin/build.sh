#!/bin/sh
# Make a git repository of the stand-in recipe checkout at DEST and print its commit.
# Usage: build.sh DEST   (DEST is replaced; one commit with a fixed author and date)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:?usage: build.sh DEST}
rm -rf "$dest"
mkdir -p "$dest"
(cd "$here" && tar --exclude=./build.sh -cf - .) | tar -C "$dest" -xf -
export GIT_AUTHOR_NAME=spark-sim GIT_AUTHOR_EMAIL=spark-sim@localhost GIT_AUTHOR_DATE='2026-08-22T15:17:09+08:00'
export GIT_COMMITTER_NAME=spark-sim GIT_COMMITTER_EMAIL=spark-sim@localhost GIT_COMMITTER_DATE='2026-08-22T15:17:09+08:00'
git -C "$dest" init -q
git -C "$dest" add -A
git -C "$dest" -c commit.gpgsign=false commit -q -m 'STAND-IN (spark-sim) of the DSpark recipe checkout'
git -C "$dest" rev-parse HEAD
