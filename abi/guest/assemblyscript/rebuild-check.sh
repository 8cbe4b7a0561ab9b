#!/usr/bin/env bash
# rebuild-check.sh rebuilds every committed AssemblyScript module of ssrun
# from its source with the pinned compiler (npm ci from the committed
# package-lock.json) in a temporary copy, so the tree is left untouched, and
# checks for each that
#   1. the rebuilt module passes the Go tests of its package (pointed at it
#      with an environment variable), and
#   2. the committed module is byte-identical to the rebuilt one, i.e. it is
#      what its source builds to.
# Needs go, node and npm (and the npm registry, or a warm npm cache). Runs
# from any directory; exits non-zero if any check fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# project directory | npm script | module (in the project) | Go package | variable naming the module to test
modules=(
	"abi/guest/assemblyscript|build:test|testdata/verbs.wasm|./abi/guest/assemblyscript|SSRUN_AS_VERBS_MODULE"
	"examples/thermostat-as|build|rules/thermostat.wasm|./examples/thermostat-as|SSRUN_THERMOSTAT_AS_MODULE"
)

# Copy the projects keeping their layout (rules import the SDK by relative
# path), without node_modules.
for m in "${modules[@]}"; do
	IFS='|' read -r dir _ <<<"$m"
	mkdir -p "$tmp/$dir"
	tar -C "$dir" --exclude=./node_modules -cf - . | tar -C "$tmp/$dir" -xf -
done

fail=0
for m in "${modules[@]}"; do
	IFS='|' read -r dir script module pkg var <<<"$m"
	echo "== $dir: npm ci && npm run $script"
	rm -f "$tmp/$dir/$module"
	(cd "$tmp/$dir" && npm ci --no-audit --no-fund --loglevel=error && npm run --silent "$script")
	echo "== go test $pkg with $var=<rebuilt $module>"
	if ! env "$var=$tmp/$dir/$module" go test -count=1 "$pkg"; then
		fail=1
	fi
	if cmp -s "$dir/$module" "$tmp/$dir/$module"; then
		echo "== $dir/$module is identical to the rebuilt module ($(wc -c <"$dir/$module") bytes)"
	else
		echo "FAIL: $dir/$module differs from what its source builds to; run 'npm ci && npm run $script' in $dir and commit the module" >&2
		fail=1
	fi
done
exit "$fail"
