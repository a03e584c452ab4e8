#!/bin/bash
# bench_edges_netns.sh — a tcp edge between two hosts against a plain TCP socket stream
# between the same hosts, measured in the same run: two network namespaces joined by a
# veth pair (10.78.0.1 sends, 10.78.0.2 receives), bench_edges --netns inside the first.
# Needs root (ip netns); removes its namespaces on exit.
#   bench/bench_edges_netns.sh [big_items=8] [reps=3]
set -eu
BUILD=${VFLOW_BUILD:-build}
BIN=$BUILD/bench/bench_edges
[ -x "$BIN" ] || { echo "bench_edges not built ($BIN)"; exit 1; }
T=$(printf '%04x' $(( $$ & 0xffff )))
A=vfbe${T}a B=vfbe${T}b
cleanup() { ip netns delete "$A" 2>/dev/null || true; ip netns delete "$B" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$A" || { echo "skip: cannot make network namespaces"; exit 77; }
ip netns add "$B"
ip link add "v$T"a type veth peer name "v$T"b
ip link set "v$T"a netns "$A"
ip link set "v$T"b netns "$B"
ip netns exec "$A" ip addr add 10.78.0.1/24 dev "v$T"a
ip netns exec "$B" ip addr add 10.78.0.2/24 dev "v$T"b
for ns in "$A" "$B"; do ip netns exec "$ns" ip link set lo up; done
ip netns exec "$A" ip link set "v$T"a up
ip netns exec "$B" ip link set "v$T"b up
ip netns exec "$A" "$BIN" --netns "$B" 10.78.0.2 "${1:-8}" "${2:-3}"
