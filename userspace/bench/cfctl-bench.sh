#!/usr/bin/env bash
# The benchmark behind `./x bench-cfctl` (see userspace/BENCHMARKS-cfctl.md):
# wall time to import 10^6 IPv4 addresses into a default attach (median
# of three fresh imports), to replace them with a list that shares half of
# them, to apply a feed refresh that changes 10^5 of them (cfctl agent
# against an `ipset restore` of the same 10^5 deletions and additions)
# and one of a 100-entry feed beside them, and the latency of adding one
# address (cfctl with and without a running agent, beside the process
# start and device flushes that one add cannot avoid), for cfctl,
# xdp-filter (xdp-tools) and ipset in the same run on the same list. The
# XDP programs are attached (native mode) to the host end of a veth pair
# whose peer is in a namespace the script creates; no traffic is sent.
# Everything is removed on exit, also when a step fails.
#
# Usage: cfctl-bench.sh PATH/TO/cfctl PATH/TO/store_floor   (as root; needs
# xdp-filter, ipset, python3, strace; store_floor is the example
# userspace/examples/store_floor.rs). ENTRIES, ADDS and XDP_FILTER_ADDS override the sizes.
set -euo pipefail

cfctl_binary=$(realpath "$1")
store_floor_binary=$(realpath "$2")
entries=${ENTRIES:-1000000}
adds=${ADDS:-25}
xdp_filter_adds=${XDP_FILTER_ADDS:-1000}
changed=$((entries / 10))
tag=$$
namespace="cfbench-$tag"
host_link="cfbh$tag"
pin_dir="/sys/fs/bpf/cfctl-bench-$tag"
ipset_name="cfbench-$tag"
work=$(mktemp -d /tmp/cfctl-bench.XXXXXX)

state="$work/state"
feed_server_pid=""
agent_pid=""
# libxdp (xdp-filter) makes /sys/fs/bpf/xdp; removed on exit if it was not
# there before.
libxdp_dir=/sys/fs/bpf/xdp
libxdp_dir_existed=$([ -d "$libxdp_dir" ] && echo yes || true)

cleanup() {
    [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
    [ -n "$feed_server_pid" ] && kill "$feed_server_pid" 2>/dev/null
    "$cfctl_binary" --pin-dir "$pin_dir" --state-dir "$state" detach --all >/dev/null 2>&1 || true
    xdp-filter unload "$host_link" >/dev/null 2>&1 || true
    ipset destroy "$ipset_name" >/dev/null 2>&1 || true
    ipset destroy "$ipset_name-new" >/dev/null 2>&1 || true
    ip netns del "$namespace" 2>/dev/null || true
    ip link del "$host_link" 2>/dev/null || true
    rm -rf "$pin_dir" "$work"
    [ -n "$libxdp_dir_existed" ] || rmdir "$libxdp_dir" 2>/dev/null || true
}
trap cleanup EXIT

cfctl() { "$cfctl_binary" --pin-dir "$pin_dir" --state-dir "$state" "$@"; }
median() { python3 -c "import statistics, sys; print(f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "$@"; }
# Wall-clock seconds since START (an $EPOCHREALTIME value), to the ms.
seconds_since() {
    local end=$EPOCHREALTIME
    python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$end"
}

# Runs the commands named in turn, `rounds` times, and prints for each
# "NAME median (min-max)" in milliseconds of wall time: interleaved, so
# that every command meets the same moments of the machine. Each command
# is called with a fresh address of 198.19.0.0/16 (from `first` on), which
# it may ignore. The write-back of what came before (an import writes
# hundreds of MB) is flushed first, so that the adds' own flushes do not
# wait for it.
interleaved_ms() {
    local rounds=$1 first=$2 times=()
    shift 2
    sync
    for round in $(seq 1 "$rounds"); do
        local n=$((first + round)) command
        for command in "$@"; do
            local start=$EPOCHREALTIME
            "$command" "198.19.$((n / 256)).$((n % 256))" >/dev/null
            times+=("$command" "$start" "$EPOCHREALTIME")
        done
    done
    python3 -c "
import statistics, sys
samples = {}
for name, start, end in zip(*[iter(sys.argv[1:])] * 3):
    samples.setdefault(name, []).append((float(end) - float(start)) * 1000)
for name, ms in samples.items():
    ms.sort()
    print(f'{name} {statistics.median(ms):.2f} ms ({ms[0]:.2f}-{ms[-1]:.2f})')" "${times[@]}"
}
# The commands timed; each takes the address to add.
cfctl_add() { cfctl add "$1"; }
ipset_add() { ipset add "$ipset_name" "$1"; }
xdp_filter_add() { xdp-filter ip "$1"; }
process_start() { /bin/true; }
cfctl_start() { "$cfctl_binary" --version; }
# The key is the address's last two bytes (fresh in every round), split
# in the shell itself: no other process in the timed call.
store_floor_add() {
    local IFS=. octets
    read -r -a octets <<<"$1"
    "$store_floor_binary" add "$work/floor.redb" $((octets[2] * 256 + octets[3]))
}
# One command's result from interleaved_ms's output.
result_of() { sed -n "s/^$1 //p" <<<"$2"; }

echo "==> network: $host_link <-veth-> $namespace; $entries random IPv4 addresses"
ip netns add "$namespace"
ip link add "$host_link" type veth peer name cfbench-peer netns "$namespace"
ip link set "$host_link" up
ip -n "$namespace" link set cfbench-peer up
python3 - "$entries" "$work" "$ipset_name" "$changed" <<'PY'
import random, sys
entries, work, name, changed = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
rng = random.Random(0x5eed)
addresses = set()
while len(addresses) < entries:
    addresses.add(rng.randrange(0x0100_0000, 0xC612_0000))  # below 198.18.0.0
# The replacement keeps every other address and brings as many new ones.
kept = sorted(addresses)[::2]
fresh = set()
while len(fresh) < entries - len(kept):
    address = rng.randrange(0x0100_0000, 0xC612_0000)
    if address not in addresses:
        fresh.add(address)
def text(values):
    return [f"{a >> 24}.{a >> 16 & 255}.{a >> 8 & 255}.{a & 255}" for a in values]
for values, list_path, set_name, restore_path in [
    (addresses, "list.txt", name, "ipset.restore"),
    (kept + sorted(fresh), "replacement.txt", f"{name}-new", "ipset-new.restore"),
]:
    lines = text(values)
    with open(f"{work}/{list_path}", "w") as out:
        out.write("\n".join(lines) + "\n")
    with open(f"{work}/{restore_path}", "w") as out:
        out.write(f"create {set_name} hash:ip family inet hashsize 1048576 maxelem {2 * entries}\n")
        out.writelines(f"add {set_name} {line}\n" for line in lines)
# A feed's next version: `changed` of its addresses leave, as many new ones
# arrive. As ipset commands: the same deletions and additions, and back.
leaving = rng.sample(sorted(addresses), changed)
arriving = set()
while len(arriving) < changed:
    address = rng.randrange(0x0100_0000, 0xC612_0000)
    if address not in addresses and address not in fresh:
        arriving.add(address)
with open(f"{work}/feed-next.txt", "w") as out:
    out.write("\n".join(text(sorted((addresses - set(leaving)) | arriving))) + "\n")
for path, gone, new in [("ipset-next.restore", leaving, arriving), ("ipset-back.restore", arriving, leaving)]:
    with open(f"{work}/{path}", "w") as out:
        out.writelines(f"del {name} {line}\n" for line in text(gone))
        out.writelines(f"add {name} {line}\n" for line in text(new))
PY

echo "==> cfctl"
imports=()
for run in 1 2 3; do
    [ "$run" -gt 1 ] && cfctl detach --all >/dev/null
    state="$work/state-$run"
    # A default attach: the filter sizes itself (grows for the import).
    cfctl attach "$host_link" >/dev/null
    start=$EPOCHREALTIME; cfctl import --source bench "$work/list.txt" >/dev/null; imports+=("$(seconds_since "$start")")
done
cfctl_import="$(median "${imports[@]}") (${imports[*]})"
cfctl verify >/dev/null
start=$EPOCHREALTIME; cfctl import --replace --source bench "$work/replacement.txt" >/dev/null; cfctl_replace=$(seconds_since "$start")
cfctl verify >/dev/null
cfctl status
# Kept, with its store, for the adds at the end.
added_state=$state
cfctl detach --all >/dev/null

echo "==> cfctl agent: a feed refresh that changes $changed of $entries entries"
state="$work/state-agent"
cfctl attach "$host_link" --capacity $((entries + entries / 10)) >/dev/null
mkdir "$work/feed"
cp "$work/list.txt" "$work/feed/list.txt"
feed_port=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
python3 -m http.server --bind 127.0.0.1 --directory "$work/feed" "$feed_port" >/dev/null 2>&1 &
feed_server_pid=$!
cat >"$work/agent.toml" <<TOML
[metrics]
listen = ""

[[feed]]
name = "bench"
url = "http://127.0.0.1:$feed_port/list.txt"
refresh = "1h"
max_bytes = 100000000
max_entries = $((2 * entries))
TOML
for _ in $(seq 1 50); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$feed_port/list.txt')" 2>/dev/null && break
    sleep 0.1
done
# The first refresh lists the whole feed; the measured ones alternate
# between its next version and the first.
cfctl agent --once --config "$work/agent.toml" 2>/dev/null
applies=() passes=()
for version in feed-next.txt list.txt feed-next.txt; do
    cp "$work/$version" "$work/feed/list.txt"
    start=$EPOCHREALTIME
    cfctl agent --once --config "$work/agent.toml" 2>"$work/agent.log"
    passes+=("$(seconds_since "$start")")
    apply=$(sed -n 's/.*apply_seconds=\([0-9.]*\).*/\1/p' "$work/agent.log" | tail -n 1)
    applies+=("$(printf '%.3f' "$apply")")
done
agent_apply="$(median "${applies[@]}") (${applies[*]})"
agent_pass="$(median "${passes[@]}") (${passes[*]})"

echo "==> cfctl agent: a feed of 100 entries refreshed beside the $entries others"
# Two versions that differ in ten addresses, alternated; the big feed's
# file stays as it is (the server answers it 304 Not Modified).
for version in 1 2; do
    seq $((version * 10)) $((version * 10 + 99)) | sed 's/^/198.19.200./' >"$work/small-$version.txt"
done
cp "$work/small-1.txt" "$work/feed/small.txt"
cat >>"$work/agent.toml" <<TOML

[[feed]]
name = "small"
url = "http://127.0.0.1:$feed_port/small.txt"
refresh = "1h"
TOML
cfctl agent --once --config "$work/agent.toml" 2>/dev/null
small_applies=() round=0
for version in 2 1 2 1 2; do
    cp "$work/small-$version.txt" "$work/feed/small.txt"
    # A later modification time each round, to the second: the server
    # answers a request that names an older one 304 Not Modified.
    round=$((round + 1))
    touch -d "@$(($(date +%s) + round))" "$work/feed/small.txt"
    cfctl agent --once --config "$work/agent.toml" 2>"$work/agent.log"
    apply=$(sed -n 's/.*feed=small .*apply_seconds=\([0-9.e-]*\).*/\1/p' "$work/agent.log" | tail -n 1)
    small_applies+=("$(python3 -c "print(f'{float(\"$apply\") * 1000:.1f}')")")
done
small_apply="$(median "${small_applies[@]}") (${small_applies[*]})"
cfctl verify >/dev/null
cfctl detach --all >/dev/null

echo "==> xdp-filter"
xdp-filter load --mode native "$host_link"
start=$EPOCHREALTIME
head -n "$xdp_filter_adds" "$work/list.txt" | while read -r address; do
    xdp-filter ip "$address"
done
xdp_filter_bulk=$(seconds_since "$start")
xdp_filter_add=$(result_of xdp_filter_add "$(interleaved_ms "$adds" 0 xdp_filter_add)")
xdp_filter_per_entry=$(python3 -c "print(f'{float(\"$xdp_filter_bulk\") / $xdp_filter_adds * 1000:.2f}')")
xdp-filter unload "$host_link"

echo "==> ipset"
imports=()
for run in 1 2 3; do
    ipset destroy "$ipset_name" >/dev/null 2>&1 || true
    start=$EPOCHREALTIME; ipset restore -f "$work/ipset.restore"; imports+=("$(seconds_since "$start")")
done
ipset_import="$(median "${imports[@]}") (${imports[*]})"
diffs=()
for restore in ipset-next.restore ipset-back.restore ipset-next.restore; do
    start=$EPOCHREALTIME; ipset restore -f "$work/$restore"; diffs+=("$(seconds_since "$start")")
done
ipset_diff="$(median "${diffs[@]}") (${diffs[*]})"
ipset destroy "$ipset_name"
ipset restore -f "$work/ipset.restore"
start=$EPOCHREALTIME
ipset restore -f "$work/ipset-new.restore"
ipset swap "$ipset_name-new" "$ipset_name"
ipset destroy "$ipset_name-new"
ipset_replace=$(seconds_since "$start")

echo "==> one add: cfctl (without and with its agent), ipset, and what no add goes below"
state=$added_state
cfctl attach "$host_link" >/dev/null
"$store_floor_binary" fill "$work/floor.redb" "$entries"
adds_alone=$(interleaved_ms "$adds" 0 cfctl_add ipset_add process_start cfctl_start store_floor_add)
cfctl_add=$(result_of cfctl_add "$adds_alone")
ipset_add=$(result_of ipset_add "$adds_alone")
true_start=$(result_of process_start "$adds_alone")
cfctl_start=$(result_of cfctl_start "$adds_alone")
store_floor=$(result_of store_floor_add "$adds_alone")
# Five adds under strace: the flushes one add makes, and their wall time
# (after the write-back of what came before).
sync
strace -f -c -w -e trace=fdatasync -o "$work/flushes.txt" bash -c "for n in 1 2 3 4 5; do
    '$cfctl_binary' --pin-dir '$pin_dir' --state-dir '$state' add 198.19.255.\$n >/dev/null
done"
add_flushes=$(awk '$NF == "fdatasync" { printf "%d, %.2f ms", $4 / 5, $2 * 1000 / 5 }' "$work/flushes.txt")
# An agent with nothing to fetch: it only ends listings and watches the
# store. The binary itself, not the cfctl function: $! must be its pid.
printf '[metrics]\nlisten = ""\n' >"$work/idle-agent.toml"
"$cfctl_binary" --pin-dir "$pin_dir" --state-dir "$state" agent --config "$work/idle-agent.toml" 2>/dev/null &
agent_pid=$!
for _ in $(seq 1 100); do
    cfctl status --json | grep -Eq '"running": ?true' && break
    sleep 0.1
done
adds_beside_agent=$(interleaved_ms "$adds" 1000 cfctl_add ipset_add)
cfctl_add_agent=$(result_of cfctl_add "$adds_beside_agent")
ipset_add_agent=$(result_of ipset_add "$adds_beside_agent")
kill "$agent_pid"
wait "$agent_pid" || true
agent_pid=""
cfctl detach --all >/dev/null

cat <<TABLE

| tool | import $entries IPv4 addresses, s (median; runs) | replace with a list sharing half (atomic swap), s | add one address (median of $adds, min-max) |
|---|---|---|---|
| cfctl (XDP cuckoo filter, attached) | ${cfctl_import} | ${cfctl_replace} | ${cfctl_add} |
| xdp-filter (XDP hash map, attached) | cannot: its maps hold at most 10,000 entries; $xdp_filter_adds adds took ${xdp_filter_bulk} s (${xdp_filter_per_entry} ms each) | - | ${xdp_filter_add} |
| ipset restore (hash:ip, not attached to any filter) | ${ipset_import} | ${ipset_replace} | ${ipset_add} |

| tool | apply a refresh that changes $changed of $entries entries, s (median of 3; runs) | add one address, $entries listed (median of $adds, min-max) |
|---|---|---|
| cfctl agent (feed over HTTP on 127.0.0.1; from the response to the live filter, as the agent logs it) | ${agent_apply}; whole \`agent --once\` process: ${agent_pass} | ${cfctl_add_agent} (\`cfctl add\` while the agent runs) |
| ipset restore (the same deletions and additions to a hash:ip set) | ${ipset_diff} | ${ipset_add_agent} (\`ipset add\`, interleaved with those) |

| cfctl agent: a feed of 100 entries, 10 of them changed, refreshed beside the $entries entries of another feed | ms from the response to the live filter, as the agent logs it (median of 5; runs) |
|---|---|
| feed \`small\` | ${small_apply} |

| what one add cannot go below | ms (median of $adds, min-max) |
|---|---|
| /bin/true (the shell's fork and exec) | ${true_start} |
| cfctl --version (cfctl's start: loader, Rust runtime, command line) | ${cfctl_start} |
| device flushes of one cfctl add (count, their wall time under strace; mean of 5 adds) | ${add_flushes} |
| store_floor add (a process that only opens a redb store of $entries keys, inserts one and commits it as cfctl does) | ${store_floor} |
TABLE
