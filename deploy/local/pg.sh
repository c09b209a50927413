#!/usr/bin/env bash
# A private PostgreSQL cluster inside DIR: unix socket in DIR, no TCP listener, so that any number of
# clusters can run side by side. As root, the server runs as the `postgres` user.
#
#   pg.sh start DIR    initdb (first time) and start; prints the libpq connection string
#   pg.sh stop DIR     stop the server started in DIR (and only that one)
#   pg.sh status DIR   exit 0 if the server in DIR accepts connections
set -euo pipefail

usage() { echo "usage: $0 start|stop|status DIR" >&2; exit 2; }
die() { echo "pg.sh: $*" >&2; exit 1; }
[ $# -eq 2 ] || usage
action=$1
dir=$(realpath -m -- "$2")

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
[ -x "$pgbin/pg_ctl" ] || die "PostgreSQL server binaries not found (run deploy/bootstrap.sh)"
data=$dir/pgdata
log=$dir/postgres.log

as_owner() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

conninfo() { echo "host=$dir port=5432 dbname=postgres user=postgres"; }

case $action in
start)
    mkdir -p "$dir"
    chmod 755 "$dir"
    if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; fi
    if [ ! -f "$data/PG_VERSION" ]; then
        # --no-sync: initdb's final sync of ~40 MB took tens of seconds on a busy disk, for every suite's
        # server; the server itself runs with fsync on, and a private cluster outlives no machine crash.
        as_owner "$pgbin/initdb" -D "$data" -U postgres --auth-local=trust --auth-host=reject \
            --encoding=UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 ||
            die "initdb failed; see $dir/initdb.log"
    fi
    if as_owner "$pgbin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        conninfo
        exit 0
    fi
    # listen_addresses='' : no TCP at all; the socket lives in DIR, named .s.PGSQL.5432 there.
    as_owner "$pgbin/pg_ctl" -D "$data" -l "$log" -w -t 60 \
        -o "-c listen_addresses='' -c unix_socket_directories='$dir' -c fsync=on" start >/dev/null ||
        die "server did not start; see $log"
    conninfo
    ;;
stop)
    [ -f "$data/postmaster.pid" ] || exit 0
    as_owner "$pgbin/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null || die "server did not stop"
    ;;
status)
    "$pgbin/pg_isready" -q -h "$dir" -p 5432
    ;;
*) usage ;;
esac
