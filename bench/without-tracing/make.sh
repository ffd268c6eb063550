#!/usr/bin/env bash
# Builds the "without" side of `./onto bench tracing`: this checkout's HEAD in a worktree, with
# packages/shared/src/tracing replaced by the stubs beside this script (the same API, nothing
# behind it, no OpenTelemetry module loaded). Prints the worktree's path, for BENCH_BASELINE_REPO:
#
#   BENCH_BASELINE_REPO=$(bench/without-tracing/make.sh) ./onto bench tracing
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
dir=${1:-${TMPDIR:-/tmp}/onto-without-tracing}
if [ -d "$dir" ]; then
  git -C "$dir" checkout -q -f --detach "$(git -C "$repo" rev-parse HEAD)" >&2
else
  git -C "$repo" worktree add -q --detach "$dir" HEAD >&2
fi
cp "$here"/context.ts "$here"/http.ts "$here"/sdk.ts "$dir/packages/shared/src/tracing/"
(cd "$dir" && pnpm install --frozen-lockfile --prefer-offline >&2 && pnpm --loglevel silent run build >&2)
echo "$dir"
