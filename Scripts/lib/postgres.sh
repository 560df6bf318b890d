# A throwaway PostgreSQL server for the tests and for development (docs/store.md, "PostgreSQL").
# Source it after common.sh. It defines:
#   postgres_start DIR USER   initdb in DIR/data as USER, the server on a Unix socket in DIR
#                             (listen_addresses='': no TCP), a database "extrun"; prints the URL
#                             postgresql:///extrun?host=DIR&port=N&user=USER
#   postgres_run DIR          starts the server of DIR again (after a stop or a kill)
#   postgres_stop DIR         stops the server in DIR (fast shutdown), unmounts DIR/data if it is a
#                             mount (the tmpfs below), and removes DIR
# For the disk-full tests (root only), postgres_start reads:
#   POSTGRES_DATA_TMPFS_MB=N  the data directory DIR/data on a tmpfs of N MiB of its own
#                             (mounted before initdb, owned by USER; the socket and log stay in DIR)
#   POSTGRES_WAL_OUTSIDE=1    the write-ahead log in DIR/wal (initdb --waldir), off that tmpfs
# Debian's postgresql is installed when missing (ensure_packages, as for the build's packages).

# The directory of the server's programs (initdb, pg_ctl, postgres), newest major version first.
postgres_bin_dir() {
  local dir
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n -r); do
    [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && { echo "$dir"; return 0; }
  done
  return 1
}

ensure_postgres() {
  postgres_bin_dir >/dev/null 2>&1 && command -v psql >/dev/null 2>&1 && return 0
  ensure_packages postgresql
  postgres_bin_dir >/dev/null || { log "postgresql is installed but no /usr/lib/postgresql/*/bin/initdb was found"; return 1; }
}

# Runs "$@" as user $1 (root: runuser; the same user: directly).
postgres_as() {
  local user="$1"
  shift
  if [ "$(id -un)" = "$user" ]; then "$@"; else runuser -u "$user" -- "$@"; fi
}

# A port number for the socket's name (.s.PGSQL.N): no TCP is opened, so any free name will do.
postgres_port() {
  local dir="$1" port
  for _ in $(seq 1 50); do
    port=$((20000 + RANDOM % 20000))
    [ -e "$dir/.s.PGSQL.$port" ] || { echo "$port"; return 0; }
  done
  echo 5432
}

postgres_start() {
  local dir="$1" user="$2" bin port
  ensure_postgres
  bin="$(postgres_bin_dir)"
  mkdir -p "$dir"
  [ "$(id -un)" = "$user" ] || chown "$user:" "$dir"
  # The socket's directory must be reachable by the clients (root's run, its plugins' host).
  chmod 711 "$dir"
  port="$(postgres_port "$dir")"
  if [ -n "${POSTGRES_DATA_TMPFS_MB:-}" ]; then
    mkdir -p "$dir/data"
    mount -t tmpfs -o "size=${POSTGRES_DATA_TMPFS_MB}m,mode=0700,uid=$(id -u "$user"),gid=$(id -g "$user")" extrun-pg-data "$dir/data" ||
      { log "cannot mount a tmpfs on $dir/data (root only)"; return 1; }
  fi
  local waldir=()
  [ "${POSTGRES_WAL_OUTSIDE:-0}" = 1 ] && waldir=(--waldir="$dir/wal")
  postgres_as "$user" "$bin/initdb" -D "$dir/data" "${waldir[@]}" -U "$user" --auth=trust --encoding=UTF8 --locale=C.UTF-8 --no-sync \
    >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; return 1; }
  echo "$port" >"$dir/port"
  echo "$user" >"$dir/user"
  postgres_run "$dir" || return 1
  postgres_as "$user" "$bin/createdb" -h "$dir" -p "$port" -U "$user" extrun >&2
  echo "postgresql:///extrun?host=$dir&port=$port&user=$user"
}

# Starts the server of DIR (again: after a stop or a kill), on its socket, with no TCP.
postgres_run() {
  local dir="$1" bin user port
  bin="$(postgres_bin_dir)"
  user="$(cat "$dir/user")"
  port="$(cat "$dir/port")"
  # fsync stays on: the fault tests kill the server and count on what it acknowledged.
  # In a subshell with every descriptor above 2 closed: the server outlives this script and
  # must not keep its caller's pipes open (a test reading this script's output to its end).
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd="${fd##*/}"
      [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-" 2>/dev/null
    done
    postgres_as "$user" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses='' -c unix_socket_directories='$dir' -c port=$port -c max_connections=200 -c unix_socket_permissions=0777" \
      start >/dev/null 2>&1
  ) || { cat "$dir/server.log" >&2; return 1; }
}

postgres_stop() {
  local dir="$1" user bin
  [ -d "$dir" ] || return 0
  if [ -f "$dir/data/postmaster.pid" ] && bin="$(postgres_bin_dir)"; then
    user="$(cat "$dir/user" 2>/dev/null || id -un)"
    postgres_as "$user" "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 ||
      postgres_as "$user" "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  if mountpoint -q "$dir/data" 2>/dev/null; then
    umount "$dir/data" || { log "cannot unmount $dir/data"; return 1; }
  fi
  rm -rf "$dir"
}
