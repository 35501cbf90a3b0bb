# Sourced by the scripts that check or measure a real `clockwork serve` on a free port:
# one way to give it a temporary directory, start it, learn its address and stop it.
# Defines `work` (a temporary directory, removed on exit with the server stopped),
# `start_server`, which sets `server_pid` and `address`, `serve_until_ready` and
# `free_port`.

work=$(mktemp -d)
server_pid=
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# start_server BINARY [RUST_LOG]: serves "$work/config.toml" from "$work" (its log in
# "$work/log") and waits until it says its HTTP address; fails with the log if it exits
# first or never says it.
start_server() {
    local binary=$1 filter=${2:-info}
    (cd "$work" && RUST_LOG=$filter exec "$binary" serve --config config.toml) 2> "$work/log" &
    server_pid=$!
    address=
    for _ in $(seq 1 100); do
        address=$(sed -n 's/.*listening address=\([^ ]*\).*/\1/p' "$work/log" | head -n 1)
        [ -n "$address" ] && return 0
        kill -0 "$server_pid" 2>/dev/null || { cat "$work/log"; echo "server exited" >&2; exit 1; }
        sleep 0.1
    done
    cat "$work/log"
    echo "server did not announce its address" >&2
    exit 1
}

# await_log SED_EXPRESSION: prints the first value the expression finds in the server's
# log, waiting up to 10 s for it (e.g. the gRPC address, said after the HTTP one).
await_log() {
    local value=
    for _ in $(seq 1 100); do
        value=$(sed -n "$1" "$work/log" | head -n 1)
        [ -n "$value" ] && { echo "$value"; return 0; }
        sleep 0.1
    done
    cat "$work/log" >&2
    echo "the server's log never matched $1" >&2
    return 1
}

# serve_until_ready BINARY CONFIG URL: serves CONFIG (its log in "$work/profile.log") until
# URL answers, then stops it: a first start profiles every model (minutes), which is what
# the emulated benches want from it. Fails with the log if the server exits first or is
# not ready within 10 minutes.
serve_until_ready() {
    local binary=$1 config=$2 url=$3 ready=
    "$binary" serve --config "$config" > "$work/profile.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 1200); do
        curl -sf "$url" > /dev/null && { ready=1; break; }
        kill -0 "$server_pid" 2>/dev/null || { tail "$work/profile.log" >&2; exit 1; }
        sleep 0.5
    done
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
    [ -n "$ready" ] || { tail "$work/profile.log" >&2; echo "$url never answered" >&2; exit 1; }
}

# free_port: prints a TCP port free on 127.0.0.1 now.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
