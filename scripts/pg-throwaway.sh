#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for tests and benchmarks.
#
#   scripts/pg-throwaway.sh start DIR     initdb + start; prints postgres://postgres@127.0.0.1:PORT/postgres
#   scripts/pg-throwaway.sh restart DIR   restart on the same port (tests that survive a server restart)
#   scripts/pg-throwaway.sh pause DIR     stop the server, keep the cluster (tests of a database outage)
#   scripts/pg-throwaway.sh resume DIR    start a paused cluster again on the same port
#   scripts/pg-throwaway.sh stop DIR      stop and delete DIR
#
# Only the URL goes to stdout, so `url=$(scripts/pg-throwaway.sh start "$dir")` just works.
# Layout of DIR: data/ (the cluster), postgres.log, port, url, and the server's unix socket.
set -euo pipefail

usage() {
  echo "usage: $0 start|restart|pause|resume|stop DIR" >&2
  exit 2
}

log() { echo "pg-throwaway: $*" >&2; }
die() { log "$*"; exit 1; }

[[ $# -eq 2 && -n $2 ]] || usage
cmd=$1
dir=$2

# Marks a directory as ours, so `stop` never rm -rf's something it did not create.
marker=.pg-throwaway

find_bindir() {
  local initdb
  # Only a server install has initdb; the client package alone ships just psql and friends.
  initdb=$(ls -1d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1 || true)
  [[ -n $initdb ]] || die "PostgreSQL server binaries not found; install Debian's postgresql package"
  dirname "$initdb"
}

# The server refuses to run as root, so root delegates to the postgres user.
as_owner() {
  if [[ $EUID -eq 0 ]]; then
    # cd / first: postgres may not be allowed into the caller's working directory.
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

free_port() {
  # Port 0 lets the kernel pick an unused port; a race with another process is
  # possible, and start_server retries with a fresh port when the bind fails.
  node -e '
    const s = require("node:net").createServer();
    s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });
  '
}

server_opts() {
  local port=$1
  echo "-h 127.0.0.1 -p $port -k $dir -c max_connections=200 -c fsync=on -c shared_buffers=256MB"
}

start_server() {
  local bindir=$1 port attempt
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    if as_owner "$bindir/pg_ctl" start -w -t 60 -D "$dir/data" -l "$dir/postgres.log" \
        -o "$(server_opts "$port")" >&2; then
      echo "$port" >"$dir/port"
      return 0
    fi
    log "start on port $port failed (attempt $attempt); last log lines:"
    tail -n 5 "$dir/postgres.log" >&2 || true
  done
  die "could not start PostgreSQL; see $dir/postgres.log"
}

case $cmd in
  start)
    bindir=$(find_bindir)
    [[ $dir == /* ]] || dir=$PWD/$dir
    # A unix socket path is limited to ~107 bytes; tests connect over TCP, but the server still creates one.
    (( ${#dir} < 80 )) || die "$dir is too long for the server's unix socket; use a shorter path (e.g. mktemp -d)"
    # pg_ctl -o is one string that the server splits on whitespace.
    [[ $dir != *[[:space:]]* ]] || die "'$dir' contains whitespace; use a path without spaces"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [[ ! -e $dir/data ]] || die "$dir/data already exists; stop it first or pick another directory"
    [[ -z $(ls -A "$dir") ]] || die "$dir is not empty; pick an empty or new directory"
    touch "$dir/$marker"
    if [[ $EUID -eq 0 ]]; then
      id postgres >/dev/null 2>&1 || die "running as root needs the 'postgres' user (created by Debian's postgresql package)"
      chown postgres: "$dir"
      as_owner test -w "$dir" \
        || die "user postgres cannot reach $dir (a parent directory is closed to it); use a directory under /tmp"
    fi
    as_owner "$bindir/initdb" -D "$dir/data" -A trust -U postgres --no-sync -E UTF8 --locale=C >&2
    start_server "$bindir"
    url="postgres://postgres@127.0.0.1:$(cat "$dir/port")/postgres"
    echo "$url" >"$dir/url"
    echo "$url"
    ;;

  restart)
    bindir=$(find_bindir)
    [[ -f $dir/port ]] || die "$dir has no running cluster (no $dir/port); use start"
    dir=$(cd "$dir" && pwd)
    # Pass the same options again so the port (and so the URL) survives the restart.
    as_owner "$bindir/pg_ctl" restart -m fast -w -t 60 -D "$dir/data" -l "$dir/postgres.log" \
      -o "$(server_opts "$(cat "$dir/port")")" >&2
    ;;

  pause)
    bindir=$(find_bindir)
    [[ -f $dir/port ]] || die "$dir has no cluster (no $dir/port); use start"
    dir=$(cd "$dir" && pwd)
    # Connected clients see their connections end, as in a real outage; the data stays for resume.
    as_owner "$bindir/pg_ctl" stop -m fast -w -t 60 -D "$dir/data" >&2
    ;;

  resume)
    bindir=$(find_bindir)
    [[ -f $dir/port ]] || die "$dir has no cluster (no $dir/port); use start"
    dir=$(cd "$dir" && pwd)
    # The same port, so URLs handed out before the pause work again.
    as_owner "$bindir/pg_ctl" start -w -t 60 -D "$dir/data" -l "$dir/postgres.log" \
      -o "$(server_opts "$(cat "$dir/port")")" >&2
    ;;

  stop)
    [[ -d $dir ]] || exit 0
    [[ -e $dir/$marker ]] || die "$dir was not created by $0; refusing to delete it"
    if [[ -f $dir/data/PG_VERSION ]]; then
      bindir=$(find_bindir)
      as_owner "$bindir/pg_ctl" stop -m fast -w -t 60 -D "$dir/data" >&2 || true
    fi
    rm -rf "$dir"
    ;;

  *)
    usage
    ;;
esac
