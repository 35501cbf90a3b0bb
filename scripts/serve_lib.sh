# Sourced by the scripts that check or measure a real `clockwork serve` on a free port:
# one way to give it a temporary directory, start it, learn its address and stop it.
# Defines `work` (a temporary directory, removed on exit with the server stopped) and
# `start_server`, which sets `server_pid` and `address`.

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
