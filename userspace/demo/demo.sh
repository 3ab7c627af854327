#!/usr/bin/env bash
# The demo behind `./x demo`: two network namespaces joined by a veth pair,
# cfctl attached to the server's end, a small built-in blocklist imported,
# pings from a listed and an unlisted source (IPv4 and IPv6), then
# `cfctl status` and `cfctl stats`. Uses only 198.18.0.0/15 and
# 2001:db8::/32. Everything it creates (namespaces, pins, state) is removed
# on exit, also when a step fails. Exits non-zero if a listed source got a
# reply or an unlisted one did not, so `./x test` runs it as a test.
#
# Usage: demo.sh PATH/TO/cfctl   (as root)
set -euo pipefail

cfctl_binary=$(realpath "$1")
demo_dir=$(dirname "$(realpath "$0")")
tag=$$
client_ns="cfdemo-client-$tag"
server_ns="cfdemo-server-$tag"
pin_dir="/sys/fs/bpf/cfctl-demo-$tag"
state_dir=$(mktemp -d /tmp/cfctl-demo.XXXXXX)

cleanup() {
    # Detaching unpins the program; deleting the namespaces removes the
    # veth pair.
    in_server "$cfctl_binary" --pin-dir "$pin_dir" --state-dir "$state_dir" detach --all \
        >/dev/null 2>&1 || true
    ip netns del "$client_ns" 2>/dev/null || true
    ip netns del "$server_ns" 2>/dev/null || true
    rm -rf "$pin_dir" "$state_dir"
}
trap cleanup EXIT

step() { printf '\n\033[1m--- %s\033[0m\n' "$*"; }

# cfctl runs in the server's network namespace through nsenter, which
# (unlike `ip netns exec`) leaves /sys, and so the bpffs pins, visible.
in_server() { nsenter --net="/run/netns/$server_ns" "$@"; }
cfctl() {
    printf '$ cfctl %s\n' "$*"
    in_server "$cfctl_binary" --pin-dir "$pin_dir" --state-dir "$state_dir" "$@"
}

failures=0
# Pings the server from SOURCE; prints how many of COUNT came back, and
# counts a failure unless that is EXPECTED: `all` or `none`.
ping_from() {
    local source=$1 destination=$2 expected=$3 count=10 received
    received=$(ip netns exec "$client_ns" ping -n -q -c "$count" -i 0.05 -W 1 -I "$source" \
        "$destination" 2>/dev/null | sed -n 's/.* \([0-9]*\) received.*/\1/p' || true)
    received=${received:-0}
    printf '  ping %-16s -> %-12s %s of %s replies\n' "$source" "$destination" "$received" "$count"
    # A first ping may be lost to neighbour discovery: `all` means all but one.
    if { [ "$expected" = all ] && [ "$received" -lt $((count - 1)) ]; } ||
        { [ "$expected" = none ] && [ "$received" -ne 0 ]; }; then
        echo "  UNEXPECTED: $expected of the replies should have come back" >&2
        failures=$((failures + 1))
    fi
}

step "network: $client_ns (198.18.0.2, .66; 2001:db8::2, ::66) <-veth-> $server_ns (198.18.0.1; 2001:db8::1)"
ip netns add "$client_ns"
ip netns add "$server_ns"
ip -n "$server_ns" link add veth-server type veth peer name veth-client netns "$client_ns"
ip -n "$server_ns" addr add 198.18.0.1/24 dev veth-server
ip -n "$server_ns" addr add 2001:db8::1/64 dev veth-server nodad
for address in 198.18.0.2/24 198.18.0.66/24; do
    ip -n "$client_ns" addr add "$address" dev veth-client
done
for address in 2001:db8::2/64 2001:db8::66/64; do
    ip -n "$client_ns" addr add "$address" dev veth-client nodad
done
for ns in "$client_ns" "$server_ns"; do
    ip -n "$ns" link set lo up
done
ip -n "$server_ns" link set veth-server up
ip -n "$client_ns" link set veth-client up

step "before cfctl: every source gets through"
ping_from 198.18.0.2 198.18.0.1 all
ping_from 198.18.0.66 198.18.0.1 all

step "attach to the server's veth and import the built-in list"
cfctl attach veth-server --capacity 10000
cfctl import "$demo_dir/blocklist.txt"
cfctl check 198.18.0.66
# `check` answers in its exit status: 1 for an address that is not listed.
status=0
cfctl check 198.18.0.2 || status=$?
[ "$status" -eq 1 ] || { echo "error: check 198.18.0.2 exited $status, not 1" >&2; exit 1; }

step "traffic: listed sources (.66, ::66) are dropped, the others pass"
ping_from 198.18.0.2 198.18.0.1 all
ping_from 198.18.0.66 198.18.0.1 none
ping_from 2001:db8::2 2001:db8::1 all
ping_from 2001:db8::66 2001:db8::1 none

step "a live delete, no reload: ::66's entry goes, its pings pass"
cfctl del 2001:db8::40/122
ping_from 2001:db8::66 2001:db8::1 all

step "status and counters"
cfctl status
cfctl stats
cfctl verify

if [ "$failures" -ne 0 ]; then
    echo "demo: $failures ping expectations failed" >&2
    exit 1
fi
