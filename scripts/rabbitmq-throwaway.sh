#!/usr/bin/env bash
# A throwaway RabbitMQ node of its own (Debian's rabbitmq-server), for tests that restart the broker
# and for CI when no broker answers: its own node name, ports, data and logs in DIR, loopback only.
# It never touches the machine's own node (rabbit@localhost, port 5672) or its files.
#
#   scripts/rabbitmq-throwaway.sh start DIR     start a node; prints amqp://guest:guest@127.0.0.1:PORT
#   scripts/rabbitmq-throwaway.sh restart DIR   stop the node and start it again on the same port, data kept
#   scripts/rabbitmq-throwaway.sh stop DIR      stop the node and delete DIR
#   scripts/rabbitmq-throwaway.sh kill DIR      kill -9 the node (a crash); `restart` starts it again
#   scripts/rabbitmq-throwaway.sh ctl DIR ARGS  rabbitmqctl ARGS against the node (e.g. join_cluster)
#
# RABBITMQ_THROWAWAY_COOKIE, at start: the Erlang cookie, so that nodes started with the same one can
# form a cluster (scripts/torture/failover/); without it each node has a cookie of its own.
#
# Only the URL goes to stdout, so `url=$(scripts/rabbitmq-throwaway.sh start "$dir")` just works.
set -euo pipefail

usage() {
  echo "usage: $0 start|restart|stop|kill DIR, or $0 ctl DIR ARGS..." >&2
  exit 2
}

log() { echo "rabbitmq-throwaway: $*" >&2; }
die() { log "$*"; exit 1; }

[[ $# -ge 2 && -n $2 ]] || usage
[[ $# -eq 2 || $1 == ctl ]] || usage
cmd=$1
dir=$2
marker=.rabbitmq-throwaway
bindir=/usr/lib/rabbitmq/bin

free_port() {
  node -e '
    const s = require("node:net").createServer();
    s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });
  '
}

# Everything the node reads comes from DIR: no /etc/rabbitmq, no /var/lib/rabbitmq, no ~/.erlang.cookie.
node_env() {
  export HOME=$dir
  export RABBITMQ_NODENAME
  RABBITMQ_NODENAME=$(cat "$dir/nodename")
  export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
  export RABBITMQ_NODE_PORT
  RABBITMQ_NODE_PORT=$(cat "$dir/port")
  export RABBITMQ_DIST_PORT
  RABBITMQ_DIST_PORT=$(cat "$dir/dist_port")
  export RABBITMQ_MNESIA_BASE=$dir/mnesia
  export RABBITMQ_LOG_BASE=$dir/log
  export RABBITMQ_CONF_ENV_FILE=$dir/rabbitmq-env.conf
  export RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf
  export RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins
  export RABBITMQ_PID_FILE=$dir/pid
  export ERL_EPMD_ADDRESS=127.0.0.1
  export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

start_node() {
  node_env
  rm -f "$dir/pid"
  "$bindir/rabbitmq-server" -detached >>"$dir/startup.log" 2>&1
  # `wait` returns once the broker accepts connections, or fails after the timeout.
  "$bindir/rabbitmqctl" -q -n "$RABBITMQ_NODENAME" wait "$dir/pid" --timeout 90 >&2 \
    || { tail -n 20 "$dir"/log/*.log >&2 2>/dev/null || true; die "the node did not start; see $dir/log"; }
}

stop_node() {
  node_env
  [[ -f $dir/pid ]] || return 0
  "$bindir/rabbitmqctl" -q -n "$RABBITMQ_NODENAME" stop "$dir/pid" >&2 || {
    # Not answering: end the process the pid file names, and only that one.
    kill -9 "$(cat "$dir/pid")" 2>/dev/null || true
  }
  rm -f "$dir/pid"
}

case $cmd in
  start)
    [[ -x $bindir/rabbitmq-server ]] || die "RabbitMQ not found in $bindir; install Debian's rabbitmq-server package"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [[ -z $(ls -A "$dir") ]] || die "$dir is not empty; pick an empty or new directory"
    touch "$dir/$marker"
    echo "throwaway-$(date +%s)-$$@localhost" >"$dir/nodename"
    free_port >"$dir/port"
    free_port >"$dir/dist_port"
    : >"$dir/rabbitmq-env.conf"
    if [[ -n ${RABBITMQ_THROWAWAY_COOKIE:-} ]]; then
      (umask 077 && printf '%s' "$RABBITMQ_THROWAWAY_COOKIE" >"$dir/.erlang.cookie")
    fi
    echo '[].' >"$dir/enabled_plugins"
    # guest may log in over loopback only, which is all this node listens on.
    printf 'listeners.tcp.default = 127.0.0.1:%s\n' "$(cat "$dir/port")" >"$dir/rabbitmq.conf"
    start_node
    url="amqp://guest:guest@127.0.0.1:$(cat "$dir/port")"
    echo "$url" >"$dir/url"
    echo "$url"
    ;;

  restart)
    [[ -f $dir/port && -e $dir/$marker ]] || die "$dir has no node; use start"
    dir=$(cd "$dir" && pwd)
    stop_node
    start_node
    ;;

  kill)
    [[ -f $dir/pid && -e $dir/$marker ]] || die "$dir has no running node"
    kill -9 "$(cat "$dir/pid")"
    ;;

  ctl)
    [[ -f $dir/nodename && -e $dir/$marker ]] || die "$dir has no node; use start"
    dir=$(cd "$dir" && pwd)
    shift 2
    node_env
    "$bindir/rabbitmqctl" -q -n "$RABBITMQ_NODENAME" "$@"
    ;;

  stop)
    [[ -d $dir ]] || exit 0
    [[ -e $dir/$marker ]] || die "$dir was not created by $0; refusing to delete it"
    dir=$(cd "$dir" && pwd)
    [[ -f $dir/nodename ]] && stop_node
    rm -rf "$dir"
    ;;

  *)
    usage
    ;;
esac
