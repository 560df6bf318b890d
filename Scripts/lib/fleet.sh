# Scripts/fleet's functions (source it after common.sh): fleet_up, fleet_down, fleet_status,
# fleet_check. DIR's layout:
#   .extrun-fleet          marks a directory `up` made (`down` removes only such a directory)
#   token                  the bearer token every host takes (--token-file), 0600
#   request-state.key      the 32-byte key sealing MCP input_required rounds, shared, 0600
#   bin/                   copies of the executables (extrun, extrun-serve, the examples')
#   plugins/               the example plugins, signed by stage-home's key (Scripts/stage-plugins)
#   stage-home/            the signer's home ("the author's machine")
#   postgres/              the PostgreSQL server's data and Unix socket, when there is one
#   hosts/hN/              a host: home/ (EXTRUN_HOME), tmp/ (TMPDIR), serve.json, serve.sock,
#                          serve.log, audit.log (one line per call: where each MCP round ran)
#   haproxy.cfg, haproxy.log, haproxy.sock (HAProxy's admin socket, for `status`)
#   network                how the hosts are reached: "netns K" (10.231.K.0/24) or "loopback"
#   processes              "ROLE NAME PID" per process `up` started
#   fleet.json             what `up` printed

FLEET_HAPROXY_BIN="${FLEET_HAPROXY_BIN:-haproxy}"
FLEET_HOST_PORT=8080

# Starts "$@" in the background, detached from the caller's descriptors above 2 (a caller reading
# this script's output to its end must not wait for the fleet), stdout and stderr to $FLEET_LOG;
# prints its pid.
fleet_spawn() {
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd="${fd##*/}"
      [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-" 2>/dev/null
    done
    exec "$@" </dev/null >>"$FLEET_LOG" 2>&1
  ) &
  echo $!
}

# A process is named by PID@START (START: its start time, field 22 of /proc/PID/stat), so
# that a pid the kernel gave to another process since (pid_max is 32768 here, and builds start
# thousands) is never taken for it: nothing is signalled unless both still match.
fleet_identity() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo "$1@gone"; return 0; }
  stat="${stat##*) }"
  echo "$1@$(awk '{print $20}' <<<"$stat")"
}

# Every descendant of PID (through /proc's parent links), one PID@START a line.
fleet_descendants() {
  python3 - "$1" <<'EOF'
import os, sys
parents = {}
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            stat = open("/proc/%s/stat" % entry).read()
        except OSError:
            continue
        parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
found, frontier = [], {int(sys.argv[1])}
while frontier:
    frontier = {pid for pid, parent in parents.items() if parent in frontier}
    found += sorted(frontier)
for pid in found:
    try:
        stat = open("/proc/%d/stat" % pid).read()
        print("%d@%s" % (pid, stat[stat.rindex(")") + 2:].split()[19]))
    except OSError:
        pass
EOF
}

# Whether the process PID@START (or PID) is alive (not a zombie) and still the one named.
fleet_alive() {
  local pid="${1%@*}"
  [ -e "/proc/$pid" ] && ! grep -q '^State:.*[ZX]' "/proc/$pid/status" 2>/dev/null || return 1
  case "$1" in *@*) [ "$(fleet_identity "$pid")" = "$1" ] ;; esac
}

# A free TCP port on 127.0.0.1.
fleet_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The first K in 0..255 such that no interface has an address in 10.231.K.0/24 and no
# namespace of ours uses it.
fleet_free_subnet() {
  local used k
  used="$(ip -4 -o addr show 2>/dev/null | awk '{print $4}')"
  for k in $(seq 0 255); do
    if ! grep -q "^10\.231\.$k\." <<<"$used" && ! ip netns list 2>/dev/null | grep -q "^extrun-f$k-"; then
      echo "$k"
      return 0
    fi
  done
  return 1
}

# Whether network namespaces can be made here (root, ip netns, veth and bridge links).
fleet_netns_possible() {
  [ "${EXTRUN_FLEET_NETNS:-1}" = 1 ] || return 1
  [ "$(id -u)" = 0 ] || return 1
  local probe="extrun-fprobe-$$"
  ip netns add "$probe" 2>/dev/null || return 1
  local ok=0
  if ip link add "xfp$$" type veth peer name "xfq$$" 2>/dev/null; then
    ip link set "xfq$$" netns "$probe" 2>/dev/null || ok=1
    ip link del "xfp$$" 2>/dev/null || true
  else
    ok=1
  fi
  if [ "$ok" = 0 ] && ip link add "xfb$$" type bridge 2>/dev/null; then
    ip link del "xfb$$" 2>/dev/null || true
  else
    ok=1
  fi
  ip netns del "$probe" 2>/dev/null || true
  return "$ok"
}

# Copies the executables the fleet runs into DIR/bin: extrun, extrun-serve, extrun-intentgen
# (for stage-plugins) and the example plugins'. A copy, so that a build while the fleet runs
# (which rewrites .build/debug's files in place) neither stops a host's next exec nor swaps a
# plugin under it. A file that changed during its copy is copied again.
fleet_copy_binaries() {
  local dir="$1" name example names=(extrun extrun-serve extrun-intentgen)
  for example in "$ROOT"/Examples/*/; do
    example="${example%/}"
    names+=("$(basename "$example")")
    if [ -f "$example/manifest.json" ]; then
      names+=("$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["executable"])' "$example/manifest.json")")
    fi
  done
  mkdir -p "$dir/bin"
  chmod 755 "$dir/bin"
  for name in "${names[@]}"; do
    [ -f "$BIN_DIR/$name" ] && [ -x "$BIN_DIR/$name" ] && [ ! -e "$dir/bin/$name" ] || continue
    for _ in $(seq 30); do
      local before after
      before="$(stat -c '%s %Y' "$BIN_DIR/$name")"
      cp "$BIN_DIR/$name" "$dir/bin/$name"
      after="$(stat -c '%s %Y' "$BIN_DIR/$name")"
      [ "$before" = "$after" ] && [ "$(stat -c %s "$dir/bin/$name")" = "${after%% *}" ] && break
      sleep 2
    done
    chmod 755 "$dir/bin/$name"
  done
}

# curl with the fleet's token: fleet_curl DIR URL [curl options...]
fleet_curl() {
  local dir="$1" url="$2"
  shift 2
  curl -sS --max-time "${FLEET_CURL_TIMEOUT:-10}" -H @<(printf 'Authorization: Bearer %s\n' "$(cat "$dir/token")") "$@" "$url" </dev/null
}

# Starts host NAME of the fleet in DIR listening on ADDRESS (in its namespace when the fleet
# has them), with its home, TMPDIR, serve.json and log in DIR/hosts/NAME; prints its pid.
fleet_start_host() {
  local dir="$1" name="$2" address="$3" host_dir="$1/hosts/$2" kind k store prefix=()
  read -r kind k <"$dir/network"
  store="$(cat "$dir/store")"
  if [ "$kind" = netns ]; then prefix=(ip netns exec "extrun-f$k-$name"); fi
  # The plugins: DIR/plugins, or the folder DIR/plugin-path names (the check's change of owner
  # starts each host again on the plugins signed for the new owner).
  local plugins="$dir/plugins"
  [ ! -f "$dir/plugin-path" ] || plugins="$(cat "$dir/plugin-path")"
  local env=(env EXTRUN_HOME="$host_dir/home" EXTRUN_PLUGIN_PATH="$plugins" TMPDIR="$host_dir/tmp")
  if [ -n "$store" ]; then env+=(EXTRUN_STORE="$store"); fi
  FLEET_LOG="$host_dir/serve.log" fleet_spawn ${prefix[@]+"${prefix[@]}"} "${env[@]}" "$dir/bin/extrun" serve \
    --socket "$host_dir/serve.sock" --listen "$address" --token-file "$dir/token" --config "$host_dir/serve.json"
}

# Waits until host NAME (pid PID) answers /v1/health at ADDRESS (60 s at most).
fleet_wait_host() {
  local dir="$1" name="$2" pid="$3" address="$4"
  for _ in $(seq 600); do
    fleet_curl "$dir" "http://$address/v1/health" -o /dev/null -f 2>/dev/null && return 0
    fleet_alive "$pid" || { log "fleet: host $name exited; its log:"; tail -20 "$dir/hosts/$name/serve.log" >&2; return 1; }
    sleep 0.1
  done
  log "fleet: host $name did not answer /v1/health within 60 s"
  return 1
}

# Restarts host NAME: SIGTERM (it finishes what runs within shutdownGraceSeconds and refuses
# the rest `overloaded`), then the same command again, then waits until it answers and
# HAProxy has it UP again.
fleet_restart() {
  local dir="$1" target="$2" role name pid address found=""
  dir="$(cd "$dir" && pwd)"
  while read -r role name pid address; do
    [ "$role" = host ] && [ "$name" = "$target" ] && found="$pid $address"
  done <"$dir/processes"
  [ -n "$found" ] || { log "fleet: no host $target in $dir"; return 1; }
  read -r pid address <<<"$found"
  fleet_stop_process "$pid" "host $target"
  # The same port at once: `extrun serve` binds with SO_REUSEADDR, so the connections the
  # stopped host closed (TIME_WAIT) do not hold it.
  local new
  new="$(fleet_identity "$(fleet_start_host "$dir" "$target" "$address")")"
  sed -i "s/^host $target $pid /host $target $new /" "$dir/processes"
  fleet_wait_host "$dir" "$target" "$new" "$address" || return 1
  for _ in $(seq 300); do
    fleet_haproxy_states "$dir" | grep -q "^$target UP$" && break
    sleep 0.1
  done
  fleet_haproxy_states "$dir" | grep -q "^$target UP$" || { log "fleet: HAProxy does not have $target UP again within 30 s"; return 1; }
  fleet_write_json "$dir" "$(cat "$dir/store")"
  log "fleet: $target restarted (pid $pid -> $new)"
}

fleet_up() {
  local dir="$1" count="$2"
  dir="$(mkdir -p "$dir" && cd "$dir" && pwd)"
  if [ -f "$dir/processes" ]; then
    log "fleet: $dir has a fleet already (Scripts/fleet down --dir $dir first)"
    exit 1
  fi
  if [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/.extrun-fleet" ]; then
    log "fleet: $dir is not empty and not a fleet's directory; give --dir a new or empty directory"
    exit 1
  fi
  case "$dir" in /tmp | /tmp/*) log "fleet: $dir is under /tmp, which a plugin's sandbox replaces: the staged plugins would not be found (choose another --dir)"; exit 1 ;; esac

  ensure_packages haproxy iproute2 curl python3
  ensure_plugin_user
  if [ ! -x "$BIN_DIR/extrun" ] || [ ! -x "$BIN_DIR/extrun-serve" ]; then
    "$ROOT/Scripts/bootstrap"
  elif build_is_stale; then
    if [ "${EXTRUN_FLEET_BUILD:-1}" = 1 ]; then "$ROOT/Scripts/bootstrap"; else log "fleet: the build is older than the sources (EXTRUN_FLEET_BUILD=0: used as it is)"; fi
  fi

  touch "$dir/.extrun-fleet"
  # Searchable by others: as root, plugins run as extrun-plugin and must reach their folders.
  chmod 711 "$dir"
  : >"$dir/processes"
  # From here on, a failure takes down what was started.
  trap 'status=$?; if [ "$status" != 0 ]; then log "fleet: up failed (exit $status); taking down what it started"; fleet_down "'"$dir"'" >/dev/null 2>&1 || true; fi' EXIT

  (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/token")
  (umask 077 && head -c 32 /dev/urandom >"$dir/request-state.key")

  # The example plugins, signed as their author would (stage-home's owner key), and a home
  # that trusts that author's key for EXAMPLETEAM, copied for every host: on a shared store
  # the hosts must hold the same owner keys and trust (keys/OWNER.key and OWNER.trusted;
  # docs/scaling.md, "The owners' keys and trust").
  mkdir -m 700 "$dir/stage-home"
  fleet_copy_binaries "$dir"
  local bin="$dir/bin"
  EXTRUN_HOME="$dir/stage-home" "$ROOT/Scripts/stage-plugins" "$bin" "$dir/plugins" >&2
  local store=""
  if [ -f "$ROOT/Scripts/lib/postgres.sh" ]; then
    source "$ROOT/Scripts/lib/postgres.sh"
    local pguser
    pguser="$(id -un)"
    if [ "$(id -u)" = 0 ]; then
      pguser=extrun-postgres
      getent passwd "$pguser" >/dev/null 2>&1 ||
        useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$pguser" >&2
    fi
    store="$(postgres_start "$dir/postgres" "$pguser")"
    log "fleet: PostgreSQL on $store"
  else
    log "fleet: no Scripts/lib/postgres.sh: each host keeps its own SQLite store"
  fi
  printf '%s\n' "$store" >"$dir/store"
  mkdir -m 700 "$dir/template-home"
  (
    export EXTRUN_HOME="$dir/template-home"
    if [ -n "$store" ]; then export EXTRUN_STORE="$store"; fi
    "$bin/extrun" owners create EXAMPLETEAM >/dev/null 2>&1 || true
    "$bin/extrun" owners trust EXAMPLETEAM --signing-key "$dir/plugins/EXAMPLETEAM.pub" >/dev/null
  )

  # The network.
  local k="" balancer_port
  balancer_port="$(fleet_free_port)"
  if fleet_netns_possible && k="$(fleet_free_subnet)"; then
    echo "netns $k" >"$dir/network"
    ip link add "xf$k-br" type bridge
    ip addr add "10.231.$k.1/24" dev "xf$k-br"
    ip link set "xf$k-br" up
    log "fleet: hosts in network namespaces extrun-f$k-h1..h$count on 10.231.$k.0/24 (bridge xf$k-br)"
  else
    k=""
    echo "loopback" >"$dir/network"
    log "fleet: network namespaces cannot be made here (not root, or EXTRUN_FLEET_NETNS=0): hosts on loopback ports"
  fi

  # The hosts.
  local i name host_dir address pid
  mkdir -p "$dir/hosts"
  for i in $(seq 1 "$count"); do
    name="h$i"
    host_dir="$dir/hosts/$name"
    mkdir -p "$host_dir"
    chmod 711 "$host_dir"
    cp -a "$dir/template-home" "$host_dir/home"
    mkdir -m 1777 "$host_dir/tmp"
    # hostName: the host's interactive runs have ids NAME.UUID, which HAProxy routes answers on.
    python3 - "$dir/request-state.key" "$name" >"$host_dir/serve.json" <<'EOF'
import json, sys
print(json.dumps({"hostName": sys.argv[2], "mcp": {"requestStateKeyFile": sys.argv[1]}, "audit": {"path": "audit.log"}}, indent=2))
EOF
    if [ -n "$k" ]; then
      local ns="extrun-f$k-$name"
      ip netns add "$ns"
      ip link add "xf$k-$name" type veth peer name "xf$k-$name-p"
      ip link set "xf$k-$name-p" netns "$ns"
      ip link set "xf$k-$name" master "xf$k-br" up
      ip -n "$ns" link set "xf$k-$name-p" name eth0
      ip -n "$ns" addr add "10.231.$k.$((10 + i))/24" dev eth0
      ip -n "$ns" link set eth0 up
      ip -n "$ns" link set lo up
      address="10.231.$k.$((10 + i)):$FLEET_HOST_PORT"
    else
      address="127.0.0.1:$(fleet_free_port)"
    fi
    pid="$(fleet_identity "$(fleet_start_host "$dir" "$name" "$address")")"
    echo "host $name $pid $address" >>"$dir/processes"
  done
  # Each host answers /v1/health over TCP (from this namespace, through its veth) within 60 s.
  local role _
  while read -r role name pid address; do
    [ "$role" = host ] || continue
    fleet_wait_host "$dir" "$name" "$pid" "$address" || exit 1
  done <"$dir/processes"

  # The balancer: round robin, no stickiness (but for MCP's handshake-era sessions); a host is taken out after 2 failed health checks
  # (1 s apart) and back after 2 good ones. A request is retried (on another host: redispatch)
  # only when the connection failed before it was sent, or when the host answered 503
  # (`overloaded`: nothing ran; see docs/scaling.md for `cancelled`, also 503).
  {
    cat <<EOF
# Written by Scripts/fleet up; the token comes from the environment (EXTRUN_FLEET_TOKEN).
global
    log stdout format raw local0
    stats socket $dir/haproxy.sock mode 600 level admin
    tune.bufsize 262144

defaults
    mode http
    log global
    option httplog
    timeout connect 2s
    timeout client 300s
    timeout server 300s
    timeout http-request 30s

frontend fleet
    bind 127.0.0.1:$balancer_port
    default_backend hosts

backend hosts
    balance roundrobin
    option httpchk
    http-check send meth GET uri /v1/health hdr Authorization "Bearer \${EXTRUN_FLEET_TOKEN}"
    http-check expect status 200
    retries 2
    option redispatch 1
    retry-on conn-failure 503
    # A 503 is retried only if HAProxy holds the whole request: wait for the body before
    # sending (a client that writes the head and the body apart, as Python's http.client does,
    # would otherwise get the host's 503 unretried).
    option http-buffer-request
    default-server check inter 1s fall 2 rise 2
    # MCP's handshake era (2025-11-25 and before) keeps a session on the host that answered
    # initialize (Mcp-Session-Id): a request naming a session goes to that host. A request
    # without the header (every 2026-07-28 call and round) is not sticky.
    stick-table type string len 128 size 100k expire 30m
    stick match req.hdr(mcp-session-id)
    stick store-response res.hdr(mcp-session-id)
EOF
    echo "    # An interactive /v1 run's answers go to the host named in its id (RUN = HOST.UUID)."
    while read -r role name pid address; do
      [ "$role" = host ] && echo "    use-server $name if { path_beg /v1/runs/$name. }"
    done <"$dir/processes"
    while read -r role name pid address; do
      [ "$role" = host ] && echo "    server $name $address"
    done <"$dir/processes"
  } >"$dir/haproxy.cfg"
  "$FLEET_HAPROXY_BIN" -c -q -f "$dir/haproxy.cfg" || { log "fleet: haproxy refused $dir/haproxy.cfg"; exit 1; }
  pid="$(fleet_identity "$(EXTRUN_FLEET_TOKEN="$(cat "$dir/token")" FLEET_LOG="$dir/haproxy.log" fleet_spawn "$FLEET_HAPROXY_BIN" -db -f "$dir/haproxy.cfg")")"
  echo "haproxy balancer $pid 127.0.0.1:$balancer_port" >>"$dir/processes"
  # Through the balancer, once every host is up in HAProxy's eyes (rise 2: about 2 s).
  for _ in $(seq 300); do
    [ "$(fleet_haproxy_states "$dir" | grep -c ' UP$')" = "$count" ] && break
    fleet_alive "$pid" || { log "fleet: haproxy exited; its log:"; tail -20 "$dir/haproxy.log" >&2; exit 1; }
    sleep 0.1
  done
  fleet_curl "$dir" "http://127.0.0.1:$balancer_port/v1/health" -o /dev/null -f || { log "fleet: the balancer does not answer /v1/health"; exit 1; }

  fleet_write_json "$dir" "$store"
  trap - EXIT
  cat "$dir/fleet.json"
}

# "NAME STATUS" per server, as HAProxy's admin socket shows them (UP, DOWN, "UP 1/2"...).
fleet_haproxy_states() {
  local dir="$1"
  [ -S "$dir/haproxy.sock" ] || return 0
  python3 - "$dir/haproxy.sock" <<'EOF' 2>/dev/null || true
import csv, io, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(b"show stat\n")
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
rows = csv.DictReader(io.StringIO(data.decode().lstrip("# ")))
for row in rows:
    if row["pxname"] == "hosts" and row["svname"] not in ("BACKEND", "FRONTEND"):
        print(row["svname"], row["status"])
EOF
}

fleet_write_json() {
  local dir="$1" store="$2"
  python3 - "$dir" "$store" >"$dir/fleet.json" <<'EOF'
import json, sys
folder, store = sys.argv[1], sys.argv[2]
hosts, url = [], None
for line in open(folder + "/processes"):
    role, name, pid, address = line.split()
    if role == "host":
        hosts.append({"name": name, "pid": int(pid.split("@")[0]), "url": "http://" + address})
    elif role == "haproxy":
        url = "http://" + address
network = open(folder + "/network").read().split()
print(json.dumps({
    "url": url,
    "tokenFile": folder + "/token",
    "store": store or None,
    "network": {"kind": "netns", "subnet": "10.231.%s.0/24" % network[1]} if network[0] == "netns" else {"kind": "loopback"},
    "hosts": hosts,
}, indent=2))
EOF
}

# Stops a process `up` started: SIGTERM, up to 10 s, then SIGKILL; its descendants (plugins,
# their supervisors) must be gone within 5 s more. Checks the pid is still the process started
# (its command line names extrun or haproxy) before signalling it.
fleet_stop_process() {
  local pid="$1" what="$2"
  fleet_alive "$pid" || return 0
  local descendants
  descendants="$(fleet_descendants "${pid%@*}")"
  kill -TERM "${pid%@*}" 2>/dev/null || true
  for _ in $(seq 100); do fleet_alive "$pid" || break; sleep 0.1; done
  if fleet_alive "$pid"; then
    log "fleet: $what ($pid) still running 10 s after SIGTERM: SIGKILL"
    kill -KILL "${pid%@*}" 2>/dev/null || true
  fi
  local p
  for _ in $(seq 50); do
    local left=""
    for p in $descendants; do fleet_alive "$p" && left="$left $p"; done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  log "fleet: processes of $what left after it ended:$left; SIGKILL"
  for p in $left; do fleet_alive "$p" && kill -KILL "${p%@*}" 2>/dev/null || true; done
}

fleet_down() {
  local dir="$1"
  [ -d "$dir" ] || { log "fleet: no fleet in $dir"; return 0; }
  dir="$(cd "$dir" && pwd)"
  [ -f "$dir/.extrun-fleet" ] || { log "fleet: $dir is not a fleet's directory (no .extrun-fleet): left alone"; return 1; }
  local role name pid address
  if [ -f "$dir/processes" ]; then
    # The balancer first (no new calls), then the hosts, together.
    while read -r role name pid address; do
      [ "$role" = haproxy ] && fleet_stop_process "$pid" "haproxy"
    done <"$dir/processes"
    local stoppers=()
    while read -r role name pid address; do
      if [ "$role" != haproxy ]; then
        fleet_stop_process "$pid" "$role $name" &
        stoppers+=($!)
      fi
    done <"$dir/processes"
    local s
    for s in ${stoppers[@]+"${stoppers[@]}"}; do wait "$s" || true; done
  fi
  if [ -d "$dir/postgres" ]; then
    if [ -f "$ROOT/Scripts/lib/postgres.sh" ]; then
      source "$ROOT/Scripts/lib/postgres.sh"
      postgres_stop "$dir/postgres"
    else
      log "fleet: $dir/postgres is there but Scripts/lib/postgres.sh is not: stop its server by hand (pg_ctl -D $dir/postgres/data stop)"
    fi
  fi
  if [ -f "$dir/network" ]; then
    local kind k
    read -r kind k <"$dir/network"
    if [ "$kind" = netns ]; then
      local ns
      for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^extrun-f$k-" || true); do
        ip netns del "$ns" 2>/dev/null || true # its veth end goes with it, and so the pair
      done
      ip link del "xf$k-br" 2>/dev/null || true
    fi
  fi
  rm -rf "$dir"
  log "fleet: down ($dir removed)"
}

fleet_status() {
  local dir="$1"
  [ -f "$dir/processes" ] || { log "fleet: no fleet in $dir"; exit 1; }
  dir="$(cd "$dir" && pwd)"
  local states role name pid address health
  states="$(fleet_haproxy_states "$dir")"
  printf '%-6s %-8s %-22s %-8s %-10s %s\n' HOST PID URL PROCESS HAPROXY HEALTH
  while read -r role name pid address; do
    [ "$role" = host ] || continue
    local alive=dead
    fleet_alive "$pid" && alive=running
    health="$( (FLEET_CURL_TIMEOUT=3 fleet_curl "$dir" "http://$address/v1/health" 2>&1 || true) | python3 -c '
import json, sys
text = sys.stdin.read()
try:
    h = json.loads(text)
    print("%s running=%s queued=%s warm=%s launches=%s" % (h.get("status"), h.get("running"), h.get("queued"), h.get("warmProcesses"), h.get("launches")))
except ValueError:
    print("unreachable: " + text.strip().splitlines()[-1] if text.strip() else "unreachable")
' || true)"
    printf '%-6s %-8s %-22s %-8s %-10s %s\n' "$name" "${pid%@*}" "$address" "$alive" "$(awk -v n="$name" '$1 == n {$1 = ""; print substr($0, 2)}' <<<"$states")" "$health"
  done <"$dir/processes"
  while read -r role name pid address; do
    [ "$role" = haproxy ] || continue
    local alive=dead
    fleet_alive "$pid" && alive=running
    printf 'balancer http://%s (haproxy %s, %s): ' "$address" "${pid%@*}" "$alive"
    FLEET_CURL_TIMEOUT=3 fleet_curl "$dir" "http://$address/v1/health" -o /dev/null -w '%{http_code}\n' 2>/dev/null || echo unreachable
  done <"$dir/processes"
}

# Sends COMMAND to HAProxy's admin socket (e.g. "disable server hosts/h2").
fleet_haproxy_command() {
  python3 - "$1/haproxy.sock" "$2" <<'EOF' >/dev/null
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
while s.recv(65536):
    pass
EOF
}

# Throughput (Scripts/fleet check, not --short): 8 clients incrementing for
# EXTRUN_FLEET_THROUGHPUT_SECONDS (15) each, after 3 s of the same to warm up:
#   oneHostInFleet  through HAProxy to host h1 alone (the others in maintenance), on the fleet's store;
#   fleet           through HAProxy to every host;
#   aloneSQLite     straight to one host like h1 (the same binaries, plugins and serve.json) on
#                   loopback, with a store.sqlite of its own: what the balancer and the shared
#                   store cost one host.
# Writes DIR/results/throughput.json; prints what failed.
fleet_throughput() {
  local dir="$1" url="$2" seconds="${EXTRUN_FLEET_THROUGHPUT_SECONDS:-15}" name others
  others="$(awk '$1 == "host" && $2 != "h1" {print $2}' "$dir/processes")"
  for name in $others; do fleet_haproxy_command "$dir" "disable server hosts/$name"; done
  python3 "$ROOT/Scripts/lib/fleet_load.py" "$url" "$dir/token" 8 for=3 fleet-warm >/dev/null 2>>"$dir/throughput.err" || echo "the warm-up load failed"
  python3 "$ROOT/Scripts/lib/fleet_load.py" "$url" "$dir/token" 8 "for=$seconds" fleet-one >"$dir/throughput-one.json" 2>>"$dir/throughput.err" || echo "the one-host load failed"
  for name in $others; do fleet_haproxy_command "$dir" "enable server hosts/$name"; done
  for _ in $(seq 100); do
    [ "$(fleet_haproxy_states "$dir" | grep -c ' UP$')" = "$(awk '$1 == "host"' "$dir/processes" | wc -l)" ] && break
    sleep 0.1
  done
  python3 "$ROOT/Scripts/lib/fleet_load.py" "$url" "$dir/token" 8 "for=$seconds" fleet-all >"$dir/throughput-all.json" 2>>"$dir/throughput.err" || echo "the fleet's load failed"

  # The same host alone, on SQLite.
  local alone="$dir/alone" address pid
  mkdir -m 711 "$alone"
  mkdir -m 700 "$alone/home"
  mkdir -m 1777 "$alone/tmp"
  (
    export EXTRUN_HOME="$alone/home"
    unset EXTRUN_STORE
    "$dir/bin/extrun" owners create EXAMPLETEAM >/dev/null 2>&1 || true
    "$dir/bin/extrun" owners trust EXAMPLETEAM --signing-key "$dir/plugins/EXAMPLETEAM.pub" >/dev/null
  )
  python3 - "$dir/request-state.key" >"$alone/serve.json" <<'EOF'
import json, sys
print(json.dumps({"hostName": "alone", "mcp": {"requestStateKeyFile": sys.argv[1]}, "audit": {"path": "audit.log"}}, indent=2))
EOF
  address="127.0.0.1:$(fleet_free_port)"
  pid="$(fleet_identity "$(FLEET_LOG="$alone/serve.log" fleet_spawn env -u EXTRUN_STORE EXTRUN_HOME="$alone/home" EXTRUN_PLUGIN_PATH="$dir/plugins" TMPDIR="$alone/tmp" \
    "$dir/bin/extrun" serve --socket "$alone/serve.sock" --listen "$address" --token-file "$dir/token" --config "$alone/serve.json")")"
  echo "alone alone $pid $address" >>"$dir/processes"
  if fleet_wait_host "$dir" alone "$pid" "$address" >&2; then
    python3 "$ROOT/Scripts/lib/fleet_load.py" "http://$address" "$dir/token" 8 for=3 fleet-warm >/dev/null 2>>"$dir/throughput.err" || echo "the warm-up load (alone) failed"
    python3 "$ROOT/Scripts/lib/fleet_load.py" "http://$address" "$dir/token" 8 "for=$seconds" fleet-alone >"$dir/throughput-alone.json" 2>>"$dir/throughput.err" || echo "the load of the host alone failed"
  else
    echo "the host alone (SQLite) did not start"
  fi
  fleet_stop_process "$pid" "the host alone" >&2
  python3 - "$dir" "$(awk '$1 == "host"' "$dir/processes" | wc -l)" <<'PY'
import json, os, sys
folder, hosts = sys.argv[1], int(sys.argv[2])
def load(name):
    try:
        out = json.load(open(os.path.join(folder, "throughput-%s.json" % name)))
    except (OSError, ValueError):
        return None
    return {k: out[k] for k in ("acknowledged", "failed", "latencyMs", "seconds", "perSecond")}
result = {"clients": 8, "hosts": hosts, "oneHostInFleet": load("one"), "fleet": load("all"), "aloneSQLite": load("alone"),
          "loadAverage": round(os.getloadavg()[0], 1)}
json.dump(result, open(os.path.join(folder, "results", "throughput.json"), "w"), indent=1)
def rate(r):
    return r["perSecond"] if r else None
print("  throughput, 8 clients: h1 alone in the fleet (HAProxy, shared store) %s/s; the fleet's %d hosts %s/s; h1's twin alone on SQLite, straight %s/s (load average %.1f)"
      % (rate(result["oneHostInFleet"]), hosts, rate(result["fleet"]), rate(result["aloneSQLite"]), result["loadAverage"]), file=sys.stderr)
for name in ("oneHostInFleet", "fleet", "aloneSQLite"):
    r = result[name]
    if r is None:
        print("no %s measurement" % name)
    elif r["failed"]:
        print("%s: calls failed %s" % (name, json.dumps(r["failed"])))
PY
}

# The fleet check (Scripts/fleet check): up, then
#   1. OrderSoup resolved over MCP (2026-07-28, the official Python SDK) through the balancer:
#      each input_required round a new POST, which round robin sends to the next host; the
#      hosts' audit logs must show the call's rounds on at least two hosts, and the call succeeded;
#   2. one host SIGKILLed under load (8 clients incrementing one counter): none of its processes
#      (plugins, supervisors) survives it, at most the calls in flight fail, and with a shared
#      store the counter holds every acknowledged increment; then calls through the balancer keep
#      succeeding (HAProxy retries the dead host's refused connections on another host until
#      its health checks take it out);
#   3. down: no process the fleet started, no namespace, link, socket or file is left.
# Exits non-zero saying what failed.
# fleet_check's change of owner, while the fleet serves (with a shared store): the example
# plugins' owner EXAMPLETEAM becomes FLEETNEW, as docs/migration.md ("Change of owner, end to
# end") has it, on a fleet.
#   1. 8 clients increment `fleet-migrate` through the balancer (EXAMPLETEAM's plugins), and
#      `extrun migrate --from EXAMPLETEAM --to FLEETNEW --remove-source` runs meanwhile, from
#      h1's home; the counter, changed while it ran, is kept in EXAMPLETEAM (exit 18, keptBecause).
#   2. The owner's writes stop (its plugins are about to be redeployed); the same command again
#      carries the counter's last value (0, clean), and EXAMPLETEAM is left with nothing.
#   3. The plugins are signed for FLEETNEW in a copy (DIR/plugins-FLEETNEW), FLEETNEW trusts
#      their signing key, its key and trust go to every host's keys/ (as the Secret does in
#      docs/scaling.md), and each host in turn is SIGTERMed and started on it, while 8 clients call
#      MakeUppercase through the balancer: none of those calls may fail.
#   4. 8 clients increment the counter again (FLEETNEW's plugins); then each host, asked
#      directly, reads it: every host sees FLEETNEW's counter, equal to every acknowledged
#      increment of both loads (none lost, none counted twice).
# Prints the problems, one per line; nothing when all held.
fleet_check_migrate() {
  local dir="$1" url="$2" store old=EXAMPLETEAM new=FLEETNEW
  store="$(cat "$dir/store")"
  local cli=(env EXTRUN_HOME="$dir/hosts/h1/home" EXTRUN_STORE="$store" "$dir/bin/extrun")
  # More for the migration to carry than the counters of the earlier steps: 200 globals.
  python3 - "$old" >"$dir/migrate-seed.json" <<'PY'
import json, sys
print(json.dumps({"format": "extrun-globals", "version": 1, "owner": sys.argv[1],
                  "globals": {"fleet-seed-%03d" % i: {"n": i, "text": "x" * 100} for i in range(200)}}))
PY
  "${cli[@]}" globals import "$dir/migrate-seed.json" --owner "$old" >/dev/null 2>"$dir/migrate-seed.err" ||
    { echo "globals import failed: $(tail -2 "$dir/migrate-seed.err")"; return; }

  rm -f "$dir/load.stop"
  python3 "$ROOT/Scripts/lib/fleet_load.py" "$url" "$dir/token" 8 "until=$dir/load.stop" fleet-migrate >"$dir/migrate-a.json" 2>"$dir/migrate-a.err" &
  local load_pid=$! first=0 second=0
  sleep 2
  "${cli[@]}" migrate --from "$old" --to "$new" --remove-source >"$dir/migrate-1.json" 2>"$dir/migrate-1.err" || first=$?
  sleep 1
  touch "$dir/load.stop"
  wait "$load_pid" || echo "the load during the migration failed: $(tail -3 "$dir/migrate-a.err")"
  "${cli[@]}" migrate --from "$old" --to "$new" --remove-source >"$dir/migrate-2.json" 2>"$dir/migrate-2.err" || second=$?
  "${cli[@]}" owners show "$old" >"$dir/migrate-old.json" 2>"$dir/migrate-old.err" || true

  # The switch: the plugins signed for FLEETNEW, its key and trust (keys/FLEETNEW.key and
  # .trusted, files of h1's home) on every host, the hosts started again on those plugins.
  local keys="$dir/hosts/h1/home/keys" host_dir plugins="$dir/plugins-$new" manifest
  if [ ! -f "$keys/$new.key" ]; then echo "the migration made no key file $keys/$new.key"; return; fi
  rm -rf "$plugins"
  cp -a "$dir/plugins" "$plugins"
  for manifest in "$plugins"/*/manifest.json; do
    python3 - "$manifest" "$old" "$new" <<'PY' || continue
import json, sys
path, old, new = sys.argv[1:4]
manifest = json.load(open(path))
if manifest.get("owner") != old:
    sys.exit(1)
manifest["owner"] = new
json.dump(manifest, open(path, "w"), indent=2)
PY
    EXTRUN_HOME="$dir/stage-home" "$dir/bin/extrun" plugins sign "$(dirname "$manifest")" --owner "$new" >/dev/null ||
      echo "signing $(dirname "$manifest") for $new failed"
  done
  EXTRUN_HOME="$dir/stage-home" "$dir/bin/extrun" owners pubkey "$new" >"$plugins/$new.pub"
  "${cli[@]}" owners trust "$new" --signing-key "$plugins/$new.pub" >/dev/null 2>"$dir/migrate-trust.err" ||
    echo "owners trust $new failed: $(tail -2 "$dir/migrate-trust.err")"
  for host_dir in "$dir"/hosts/*/; do
    [ "${host_dir%/}" = "$dir/hosts/h1" ] || cp -p "$keys/$new.key" "$keys/$new.trusted" "$host_dir/home/keys/"
  done
  echo "$plugins" >"$dir/plugin-path"
  rm -f "$dir/load.stop"
  FLEET_LOAD_INTENT=MakeUppercase python3 "$ROOT/Scripts/lib/fleet_load.py" "$url" "$dir/token" 8 "until=$dir/load.stop" "switching owner" >"$dir/migrate-switch.json" 2>"$dir/migrate-switch.err" &
  load_pid=$!
  sleep 1
  local name
  for name in $(awk '$1 == "host" {print $2}' "$dir/processes"); do
    fleet_restart "$dir" "$name" >/dev/null 2>"$dir/migrate-restart.err" || echo "starting $name on $new's plugins failed: $(tail -2 "$dir/migrate-restart.err")"
  done
  touch "$dir/load.stop"
  wait "$load_pid" || echo "the load during the switch failed: $(tail -3 "$dir/migrate-switch.err")"

  python3 "$ROOT/Scripts/lib/fleet_load.py" "$url" "$dir/token" 8 "for=${EXTRUN_FLEET_MIGRATE_AFTER:-3}" fleet-migrate >"$dir/migrate-b.json" 2>"$dir/migrate-b.err" ||
    echo "the load after the switch failed: $(tail -3 "$dir/migrate-b.err")"
  local role pid address reads=()
  while read -r role name pid address; do
    [ "$role" = host ] || continue
    reads+=("$name=$(fleet_curl "$dir" "http://$address/v1/handle" --data '{"intent": "GetGlobalVariable", "parameters": {"name": "fleet-migrate"}}' 2>&1 | tr -d '\n')")
  done <"$dir/processes"
  python3 - "$dir" "$first" "$second" "$old" "$new" "${reads[@]}" <<'PY'
import json, sys
folder, first, second, old, new = sys.argv[1:6]
reads = sys.argv[6:]
def load(name):
    try:
        return json.load(open("%s/%s" % (folder, name)))
    except (OSError, ValueError) as error:
        print("%s: %s" % (name, error))
        return {}
a, switch, b = load("migrate-a.json"), load("migrate-switch.json"), load("migrate-b.json")
one, two, old_owner = load("migrate-1.json"), load("migrate-2.json"), load("migrate-old.json")
print("  change of owner %s -> %s under load: %s increments acknowledged (failed %s) while `extrun migrate --remove-source` ran (exit %s: migrated %s, removed %s, kept %s); again after the load (exit %s: overwritten %s, removed %s, clean %s)"
      % (old, new, a.get("acknowledged"), json.dumps(a.get("failed")), first, one.get("migrated"), one.get("removed"), one.get("kept"),
         second, (two.get("globals") or {}).get("overwritten"), two.get("removed"), two.get("clean")), file=sys.stderr)
print("  the hosts started one by one on %s's plugins: %s MakeUppercase calls meanwhile, failed %s; then %s increments acknowledged (failed %s); each host reads the counter: %s"
      % (new, switch.get("acknowledged"), json.dumps(switch.get("failed")), b.get("acknowledged"), json.dumps(b.get("failed")),
         ", ".join(r.split("=", 1)[0] + " " + str(((json.loads(r.split("=", 1)[1] or "{}").get("report") or {}).get("response") or {}).get("properties", {}).get("value") if r.split("=", 1)[1].startswith("{") else r) for r in reads)), file=sys.stderr)
if first not in ("0", "18"):
    print("the migration under load ended with exit %s: %s" % (first, open(folder + "/migrate-1.err").read()[-300:]))
if second != "0" or two.get("clean") is not True:
    print("the migration run again after the load did not end clean (exit %s): %s" % (second, json.dumps(two.get("items", []))[:300]))
if old_owner.get("globals") != 0:
    print("%s still has %s globals after --remove-source" % (old, old_owner.get("globals")))
for name, load_out in (("during the migration", a), ("after the switch", b)):
    if load_out.get("failed"):
        print("increments %s failed: %s %s" % (name, json.dumps(load_out.get("failed")), json.dumps(load_out.get("failureMessages"))[:300]))
others = {k: v for k, v in (switch.get("failed") or {}).items() if k != "504 timeout"}
if others:
    print("calls during the switch failed: %s %s" % (json.dumps(others), json.dumps(switch.get("failureMessages"))[:300]))
expected = (a.get("acknowledged") or 0) + (b.get("acknowledged") or 0)
failures = sum((a.get("failed") or {}).values()) + sum((b.get("failed") or {}).values())
values = {}
for read in reads:
    name, text = read.split("=", 1)
    try:
        value = ((json.loads(text).get("report") or {}).get("response") or {}).get("properties", {}).get("value")
    except ValueError:
        value = None
    values[name] = value
    if not isinstance(value, int) or not expected <= value <= expected + failures:
        print("host %s reads %s's counter as %s, for %d acknowledged increments (%d failed)" % (name, new, value if value is not None else text[:200], expected, failures))
# For the check's JSON (Benchmarks/fleet-table.py).
json.dump({
    "during": {k: a.get(k) for k in ("acknowledged", "failed")},
    "firstRun": {"exit": int(first), "migrated": one.get("migrated"), "removed": one.get("removed"), "kept": one.get("kept")},
    "secondRun": {"exit": int(second), "overwritten": (two.get("globals") or {}).get("overwritten"), "removed": two.get("removed"), "clean": two.get("clean")},
    "switch": {k: switch.get(k) for k in ("acknowledged", "failed")},
    "after": {k: b.get(k) for k in ("acknowledged", "failed")},
    "reads": values,
}, open(folder + "/results/migrate.json", "w"), indent=1)
PY
}

fleet_check() {
  local dir="$1" count="$2" short="${3:-0}" json_out="${4:-}" failed=() check_began
  check_began="$(date +%s)"
  [ "$count" -ge 2 ] || { log "fleet check: needs at least 2 hosts"; exit 64; }
  local python
  python="$(ensure_python_venv)"
  [ ! -e "$dir" ] || fleet_down "$dir" >/dev/null 2>&1 || true
  trap 'fleet_down "'"$dir"'" >/dev/null 2>&1 || true' EXIT
  "$ROOT/Scripts/fleet" up --hosts "$count" --dir "$dir" >/dev/null
  dir="$(cd "$dir" && pwd)"
  local url token network
  url="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["url"])' "$dir/fleet.json")"
  token="$(cat "$dir/token")"
  network="$(cat "$dir/network")"
  log "fleet check: $count hosts ($network), balancer $url$([ "$short" = 1 ] && echo ', short: no throughput, no rolling restart')"
  mkdir -p "$dir/results"

  # 1. MCP rounds through the balancer.
  local rounds_out
  rounds_out="$("$python" "$ROOT/Tests/ExtrunCLITests/Fixtures/mcp_http_client.py" rounds \
    "{\"endpoints\": [{\"url\": \"$url/mcp\", \"bearer\": \"$token\"}], \"plan\": \"first,yes\"}" 2>"$dir/rounds.err")" ||
    { failed+=("the MCP client failed: $(tail -3 "$dir/rounds.err")"); rounds_out="{}"; }
  local verdict
  verdict="$(python3 - "$dir" "$rounds_out" <<'PY'
import glob, json, os, sys
folder, out = sys.argv[1], json.loads(sys.argv[2] or "{}")
rounds = out.get("rounds", [])
final = (out.get("end") or {}).get("final") or {}
calls = []
for path in glob.glob(folder + "/hosts/*/audit.log"):
    host = os.path.basename(os.path.dirname(path))
    for line in open(path):
        entry = json.loads(line)
        if entry.get("transport") == "mcp" and entry.get("intent") == "OrderSoup":
            calls.append((entry["time"], host, entry["outcome"]))
calls.sort()
for time, host, outcome in calls:
    print("  %s %s OrderSoup %s" % (time, host, outcome), file=sys.stderr)
problems = []
if len(rounds) != 2:
    problems.append("OrderSoup asked %d questions, not 2 (soup, confirmation)" % len(rounds))
if final.get("isError") is not False:
    problems.append("OrderSoup did not succeed: %s" % json.dumps(out.get("end"))[:300])
if len(calls) != len(rounds) + 1:
    problems.append("the hosts' audit logs have %d OrderSoup calls, not %d" % (len(calls), len(rounds) + 1))
if len({host for _, host, _ in calls}) < 2:
    problems.append("every round ran on one host")
if [outcome for _, _, outcome in calls][-1:] != ["success"]:
    problems.append("the last round's outcome is not success")
print("; ".join(problems))
PY
)"
  if [ -n "$verdict" ]; then failed+=("MCP rounds: $verdict"); else log "fleet check: OrderSoup resolved through the balancer, its rounds on different hosts (above)"; fi

  # 1b. An MCP session of the handshake era (2025-11-25): initialize, a listing, two calls
  # (OrderSoup's questions in band), DELETE; every request naming the session reaches its host.
  local handshake_out
  handshake_out="$("$python" "$ROOT/Tests/ExtrunCLITests/Fixtures/mcp_http_client.py" handshake \
    "{\"endpoints\": [{\"url\": \"$url/mcp\", \"bearer\": \"$token\"}]}" 2>"$dir/handshake.err")" ||
    { failed+=("the MCP handshake-era session failed: $(tail -1 "$dir/handshake.err")"); handshake_out="{}"; }
  verdict="$(python3 - "$handshake_out" <<'PY'
import json, sys
out = json.loads(sys.argv[1] or "{}")
problems = []
if out.get("protocolVersion") != "2025-11-25":
    problems.append("protocol %s" % out.get("protocolVersion"))
for name in ("upper", "soup"):
    if (out.get(name) or {}).get("isError") is not False:
        problems.append("%s failed: %s" % (name, json.dumps(out.get(name))[:200]))
if len(out.get("asked", [])) != 2:
    problems.append("OrderSoup asked %d questions in band, not 2" % len(out.get("asked", [])))
print("; ".join(problems))
PY
)"
  if [ -n "$verdict" ]; then failed+=("MCP handshake session: $verdict"); else log "fleet check: an MCP 2025-11-25 session (initialize, tools/list, MakeUppercase, OrderSoup asking in band, DELETE) through the balancer, on one host"; fi

  local store load_pid
  store="$(cat "$dir/store")"

  # 1c. Interactive /v1 runs through the balancer, their prompts answered through it too.
  local prompts=() prompt_out
  for i in 1 2 3; do
    prompt_out="$(python3 "$ROOT/Scripts/lib/fleet_prompt.py" "$url" "$dir/token" 2>>"$dir/prompt.err")" || prompt_out='{"answerStatus": "client failed"}'
    prompts+=("$prompt_out")
  done
  verdict="$(python3 - "${prompts[@]}" <<'PY'
import json, sys
runs = [json.loads(a) for a in sys.argv[1:]]
reached = [r for r in runs if r.get("answerStatus") == 200 and r.get("result") == "HELLO, FLEET"]
print("  interactive runs: %s" % ", ".join("%s answer %s" % (r.get("run"), r.get("answerStatus")) for r in runs), file=sys.stderr)
problems = []
unnamed = [r.get("run") for r in runs if not r.get("hostNamed")]
if unnamed:
    problems.append("run ids without their host's name (serve.json hostName): %s" % ", ".join(map(str, unnamed)))
if len(reached) != len(runs):
    problems.append("%d of %d answers did not reach their run (through the balancer)" % (len(runs) - len(reached), len(runs)))
print("; ".join(problems))
PY
)"
  if [ -n "$verdict" ]; then failed+=("interactive runs: $verdict"); else log "fleet check: 3 interactive /v1 runs through the balancer, each answer routed to the host its run id names"; fi

  # 1d. A rolling restart under load: each host in turn SIGTERMed (it finishes what runs and
  # refuses what waits, `overloaded` 503, which HAProxy retries), started again, back UP in
  # HAProxy, while 8 clients increment; no call may fail.
  # (Before it, with the full check: the throughput, fleet_throughput.)
  if [ "$short" != 1 ]; then
    verdict="$(fleet_throughput "$dir" "$url")"
    [ -z "$verdict" ] || failed+=("throughput: $(tr '\n' ';' <<<"$verdict")")
    local name
    rm -f "$dir/load.stop"
    python3 "$ROOT/Scripts/lib/fleet_load.py" "$url" "$dir/token" 8 "until=$dir/load.stop" fleet-rolling >"$dir/rolling.json" 2>"$dir/rolling.err" &
    load_pid=$!
    sleep 1
    for name in $(awk '$1 == "host" {print $2}' "$dir/processes"); do
      fleet_restart "$dir" "$name" 2>&1 | sed 's/^/  /' >&2 || failed+=("the rolling restart of $name failed")
    done
    touch "$dir/load.stop"
    wait "$load_pid" || failed+=("the load failed: $(tail -3 "$dir/rolling.err")")
    verdict="$(python3 - "$dir/rolling.json" "$store" "$dir/results/rolling.json" <<'PY'
import json, sys
out, store = json.load(open(sys.argv[1])), sys.argv[2]
json.dump({k: out[k] for k in ("acknowledged", "failed", "failureMessages", "value", "latencyMs", "seconds", "perSecond")}, open(sys.argv[3], "w"), indent=1)
print("  rolling restart, 8 clients: %d increments acknowledged, failed %s, the counter %s, latency p50 %s ms p99 %s ms max %s ms, %s s"
      % (out["acknowledged"], json.dumps(out["failed"]), out["value"], out["latencyMs"]["p50"], out["latencyMs"]["p99"], out["latencyMs"]["max"], out["seconds"]), file=sys.stderr)
problems = []
# An intent over its own deadline on the loaded machine (504 timeout) is the plugin's, not the
# restart's; any other failure is one the balancer could have spared the caller.
others = {k: v for k, v in out["failed"].items() if k != "504 timeout"}
if others:
    problems.append("calls failed: %s" % json.dumps(others))
if store and out["failed"]:
    failures = sum(out["failed"].values())
    if not out["acknowledged"] <= (out["value"] if isinstance(out["value"], int) else -1) <= out["acknowledged"] + failures:
        problems.append("the counter is %s for %d acknowledged increments and %d failed calls" % (out["value"], out["acknowledged"], failures))
elif store and out["value"] != out["acknowledged"]:
    problems.append("the counter is %s for %d acknowledged increments" % (out["value"], out["acknowledged"]))
print("; ".join(problems))
PY
    )" || verdict="the load's output: $(head -c 300 "$dir/rolling.json")"
    if [ -n "$verdict" ]; then failed+=("rolling restart: $verdict"); fi
  fi

  # 1e. PostgreSQL restarted under load (with a shared store): stopped at once (`immediate`,
  # as a crash) 2 s in, started again 3 s later; the calls meanwhile fail with the store's
  # typed errors, never the balancer's or a connection's; then every call succeeds again,
  # on the same hosts (none restarted), and the counter holds every acknowledged increment.
  if [ -n "$store" ]; then
    local hosts_before pgbin pguser
    hosts_before="$(awk '$1 == "host" {print $3}' "$dir/processes" | tr '\n' ' ')"
    source "$ROOT/Scripts/lib/postgres.sh"
    pgbin="$(postgres_bin_dir)"
    pguser="$(cat "$dir/postgres/user")"
    rm -f "$dir/load.stop"
    python3 "$ROOT/Scripts/lib/fleet_load.py" "$url" "$dir/token" 8 "until=$dir/load.stop" fleet-pg-restart >"$dir/pgrestart.json" 2>"$dir/pgrestart.err" &
    load_pid=$!
    sleep 2
    local stopped_at
    stopped_at="$(date +%s.%N)"
    postgres_as "$pguser" "$pgbin/pg_ctl" -D "$dir/postgres/data" -m immediate -w stop >/dev/null 2>&1 || failed+=("PostgreSQL did not stop")
    sleep 3
    postgres_run "$dir/postgres" || failed+=("PostgreSQL did not start again")
    local started_at
    started_at="$(date +%s.%N)"
    log "fleet check: PostgreSQL stopped (immediate) and started again after $(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$stopped_at" "$started_at") s, under load"
    sleep "${EXTRUN_FLEET_PG_AFTER:-8}"
    touch "$dir/load.stop"
    wait "$load_pid" || failed+=("the load failed: $(tail -3 "$dir/pgrestart.err")")
    local after_codes=()
    for i in $(seq 1 6); do
      after_codes+=("$(fleet_curl "$dir" "$url/v1/handle" -o /dev/null -w '%{http_code}' --data '{"intent": "IncrementGlobalVariable", "parameters": {"name": "fleet-pg-after"}}' 2>/dev/null || true)")
    done
    log "fleet check: 6 calls after PostgreSQL came back: statuses ${after_codes[*]}"
    [ "$(printf '%s\n' "${after_codes[@]}" | grep -vc '^200$' || true)" = 0 ] || failed+=("calls after PostgreSQL came back failed: ${after_codes[*]}")
    [ "$(awk '$1 == "host" {print $3}' "$dir/processes" | tr '\n' ' ')" = "$hosts_before" ] || failed+=("the hosts changed during the PostgreSQL restart")
    for p in $hosts_before; do fleet_alive "$p" || failed+=("host $p died during the PostgreSQL restart"); done
    verdict="$(python3 - "$dir/pgrestart.json" "$stopped_at" "$started_at" "$dir/results/pgRestart.json" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
stopped, started = float(sys.argv[2]), float(sys.argv[3])
print("  PostgreSQL restart, 8 clients: %d increments acknowledged, failed %s, the counter %s, latency p50 %s ms p99 %s ms max %s ms, %s s"
      % (out["acknowledged"], json.dumps(out["failed"]), out["value"], out["latencyMs"]["p50"], out["latencyMs"]["p99"], out["latencyMs"]["max"], out["seconds"]), file=sys.stderr)
# Recovered: the first acknowledged increment after the server is back with no failure after it
# (calls = [start, end, ok], by start). Its end, from the server's start (pg_ctl -w returned).
calls = sorted(out["calls"], key=lambda c: c[1])
last_failure = max([c[1] for c in calls if not c[2]], default=stopped)
recovered = min([c[1] for c in calls if c[2] and c[1] > max(last_failure, started)], default=None)
first_ok = min([c[1] for c in calls if c[2] and c[1] > started], default=None)
result = {k: out[k] for k in ("acknowledged", "failed", "failureMessages", "value", "latencyMs", "seconds")}
result.update({
    "downSeconds": round(started - stopped, 2),
    "firstAcknowledgedAfterStartSeconds": round(first_ok - started, 2) if first_ok else None,
    "recoverySeconds": round(recovered - started, 2) if recovered else None,
    "lastFailureAfterStartSeconds": round(last_failure - started, 2),
})
json.dump(result, open(sys.argv[4], "w"), indent=1)
print("  PostgreSQL down %.1f s; back at +0: first acknowledged call at +%s s, last failed call at %+.2f s, recovered (no failure after) at +%s s"
      % (started - stopped, result["firstAcknowledgedAfterStartSeconds"], result["lastFailureAfterStartSeconds"], result["recoverySeconds"]), file=sys.stderr)
problems = []
if recovered is None:
    problems.append("no call was acknowledged after the last failure: not recovered within the load")
# Typed: the store's own error, or a plugin's failure that names it (error.store.kind); not the
# balancer's page, a broken or timed-out connection, or a plugin error without the store's reason.
untyped = {k: v for k, v in out["failed"].items() if "balancer" in k or k.startswith("connection") or ("pluginError" in k and "(store: " not in k)}
if untyped:
    problems.append("calls failed without the store's typed error: %s" % json.dumps(untyped))
failures = sum(out["failed"].values())
value = out["value"] if isinstance(out["value"], int) else -1
if not out["acknowledged"] <= value <= out["acknowledged"] + failures:
    problems.append("the counter is %s for %d acknowledged increments and %d failed calls" % (out["value"], out["acknowledged"], failures))
print("; ".join(problems))
PY
)" || verdict="the load's output: $(head -c 300 "$dir/pgrestart.json")"
    if [ -n "$verdict" ]; then failed+=("PostgreSQL restart: $verdict"); fi
  fi

  # 1f. `extrun migrate` of the plugins' owner while the fleet serves it (fleet_check_migrate).
  if [ -n "$store" ]; then
    verdict="$(fleet_check_migrate "$dir" "$url")"
    if [ -n "$verdict" ]; then failed+=("change of owner: $(tr '\n' ';' <<<"$verdict")"); else log "fleet check: EXAMPLETEAM's data migrated to FLEETNEW while the fleet served it, every host started on FLEETNEW's plugins, every host reads the counter with every acknowledged increment (above)"; fi
  fi

  # 2. One host SIGKILLed under load: 8 clients incrementing one counter through the balancer
  # (Scripts/lib/fleet_load.py), the host killed 2 s in.
  local victim_name victim_pid
  read -r _ victim_name victim_pid _ < <(grep '^host ' "$dir/processes" | sed -n "${EXTRUN_FLEET_VICTIM:-2}p")
  local i
  for i in $(seq 1 $((2 * count))); do
    fleet_curl "$dir" "$url/v1/handle" -o /dev/null -f --data '{"intent": "MakeUppercase", "parameters": {"text": "warm"}}' ||
      failed+=("a call before the kill failed")
  done
  python3 "$ROOT/Scripts/lib/fleet_load.py" "$url" "$dir/token" 8 "${EXTRUN_FLEET_CHECK_CALLS:-$([ "$short" = 1 ] && echo 15 || echo 25)}" fleet-check >"$dir/load.json" 2>"$dir/load.err" &
  load_pid=$!
  sleep 2
  local descendants
  descendants="$(fleet_descendants "${victim_pid%@*}" | tr '\n' ' ')"
  log "fleet check: SIGKILL to host $victim_name (${victim_pid%@*}) under load, with $(wc -w <<<"$descendants") processes of its own: $(sed 's/@[0-9]*//g' <<<"$descendants")"
  fleet_alive "$victim_pid" && kill -KILL "${victim_pid%@*}"
  wait "$load_pid" || failed+=("the load failed: $(tail -3 "$dir/load.err")")
  verdict="$(python3 - "$dir/load.json" "$store" "$dir/results/kill.json" <<'PY'
import json, sys
out, store = json.load(open(sys.argv[1])), sys.argv[2]
json.dump({k: out[k] for k in ("acknowledged", "failed", "failureMessages", "value", "latencyMs", "seconds", "perSecond")}, open(sys.argv[3], "w"), indent=1)
print("  8 clients: %d increments acknowledged, failed %s, the counter %s, latency p50 %s ms p99 %s ms max %s ms, %s s"
      % (out["acknowledged"], json.dumps(out["failed"]), out["value"], out["latencyMs"]["p50"], out["latencyMs"]["p99"], out["latencyMs"]["max"], out["seconds"]), file=sys.stderr)
problems = []
failures = sum(out["failed"].values())
# Only the calls in flight on the killed host may fail: at most one per client.
if failures > 8:
    problems.append("%d calls failed (at most the 8 in flight may)" % failures)
if store:
    # One counter in the shared store: every acknowledged increment is in it; a failed call
    # may have committed before its host died (its answer lost), so at most that many more.
    value = out["value"] if isinstance(out["value"], int) else -1
    if not out["acknowledged"] <= value <= out["acknowledged"] + failures:
        problems.append("the counter is %s for %d acknowledged increments and %d failed calls" % (out["value"], out["acknowledged"], failures))
print("; ".join(problems))
PY
)" || verdict="the load's output: $(head -c 300 "$dir/load.json")"
  if [ -n "$verdict" ]; then failed+=("under the kill: $verdict"); fi
  if [ -z "$store" ]; then log "fleet check: (no shared store: each host counts in its own SQLite store, so the counter is not checked)"; fi
  local codes=() code
  for i in $(seq 1 $((4 * count))); do
    code="$(fleet_curl "$dir" "$url/v1/handle" -o /dev/null -w '%{http_code}' --data "{\"intent\": \"MakeUppercase\", \"parameters\": {\"text\": \"after $i\"}}" 2>/dev/null || true)"
    codes+=("$code")
  done
  local bad
  bad="$(printf '%s\n' "${codes[@]}" | grep -vc '^200$' || true)"
  log "fleet check: $((4 * count)) calls through the balancer after the kill: statuses ${codes[*]}"
  [ "$bad" = 0 ] || failed+=("$bad of $((4 * count)) calls after the kill did not answer 200")
  local retried
  # HAProxy's log: field 6 the status, field 11 "actconn/feconn/beconn/srv_conn/retries" (+N: redispatched).
  retried="$(grep 'POST /v1/handle' "$dir/haproxy.log" | tail -n $((4 * count)) | awk '$6 == 200 { n = split($11, f, "/"); if (f[n] != "0") print }' | wc -l)"
  local retried_all
  retried_all="$(grep 'POST /v1/handle' "$dir/haproxy.log" | awk '{ n = split($11, f, "/"); if (f[n] != "0") print }' | wc -l)"
  log "fleet check: HAProxy retried $retried of them on another host after a refused connection ($retried_all calls retried in all, with the load's)"
  local left="" p
  for _ in $(seq 50); do
    left=""
    for p in $descendants; do fleet_alive "$p" && left="$left $p"; done
    [ -z "$left" ] && break
    sleep 0.1
  done
  [ -z "$left" ] || failed+=("processes of the killed host survive it:$left")
  for _ in $(seq 100); do
    fleet_haproxy_states "$dir" | grep -q "^$victim_name DOWN" && break
    sleep 0.1
  done
  "$ROOT/Scripts/fleet" status --dir "$dir" >&2 || true
  fleet_haproxy_states "$dir" | grep -q "^$victim_name DOWN" || failed+=("HAProxy did not mark $victim_name DOWN within 10 s")

  # 3. Down, and nothing left.
  local all_pids kind k
  all_pids="$(awk '{print $3}' "$dir/processes" | tr '\n' ' ')"
  read -r kind k <"$dir/network"
  # The logs outlive the fleet, in DIR-logs: HAProxy's (a request a line, with its host and
  # retries), each host's serve.log and audit.log, the MCP clients' stderr.
  rm -rf "$dir-logs"
  mkdir -p "$dir-logs"
  cp "$dir/haproxy.log" "$dir"/*.err "$dir-logs/" 2>/dev/null || true
  cp -r "$dir/results" "$dir-logs/results" 2>/dev/null || true
  for p in "$dir"/hosts/*/; do
    p="${p%/}"
    cp "$p/serve.log" "$dir-logs/${p##*/}.serve.log" 2>/dev/null || true
    cp "$p/audit.log" "$dir-logs/${p##*/}.audit.log" 2>/dev/null || true
  done
  trap - EXIT
  "$ROOT/Scripts/fleet" down --dir "$dir" 2>/dev/null
  for p in $all_pids; do fleet_alive "$p" && failed+=("process $p is left after down"); done
  if [ "$kind" = netns ]; then
    ip netns list | grep -q "^extrun-f$k-" && failed+=("network namespaces left: $(ip netns list | grep "^extrun-f$k-" | tr '\n' ' ')")
    ip -o link show | grep -q " xf$k-" && failed+=("links left: $(ip -o link show | grep " xf$k-" | awk '{print $2}' | tr '\n' ' ')")
  fi
  [ ! -e "$dir" ] || failed+=("$dir is left")
  local strays
  strays="$(python3 - "$dir" <<'PY'
import os, sys
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            line = open("/proc/%s/cmdline" % entry, "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if sys.argv[1] + "/" in line:
            print(entry, line[:120])
PY
)"
  [ -z "$strays" ] || failed+=("processes naming $dir are left: $strays")

  # The results, one JSON object (Benchmarks/fleet-table.py writes docs/benchmarks.md's fleet
  # table from it): DIR-logs/check.json, and --json FILE.
  printf '%s\n' ${failed[@]+"${failed[@]}"} >"$dir-logs/failures.txt"
  python3 - "$dir-logs" "$count" "$short" "$network" "$store" "$check_began" "$BIN_DIR" "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$([ -z "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] || echo '+uncommitted changes')" <<'PY' >"$dir-logs/check.json"
import datetime, json, os, sys, time
logs, count, short, network, store, began, bin_dir, commit = sys.argv[1:9]
results = {}
for name in ("throughput", "rolling", "pgRestart", "migrate", "kill"):
    try:
        results[name] = json.load(open(os.path.join(logs, "results", name + ".json")))
    except (OSError, ValueError):
        results[name] = None
failures = [line for line in open(os.path.join(logs, "failures.txt")).read().splitlines() if line]
print(json.dumps({
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "commit": commit,
    "build": os.path.basename(os.path.realpath(bin_dir)),
    "short": short == "1",
    "hosts": int(count),
    "network": network.split()[0],
    "store": "postgresql" if store else "sqlite",
    "cpus": os.cpu_count(),
    "loadAverageAtEnd": round(os.getloadavg()[0], 1),
    "seconds": int(time.time() - float(began)),
    "passed": not failures,
    "failures": failures,
    "results": results,
}, indent=1))
PY
  if [ -n "$json_out" ]; then cp "$dir-logs/check.json" "$json_out"; fi
  if [ ${#failed[@]} -gt 0 ]; then
    log "fleet check FAILED (the logs are in $dir-logs):"
    printf '  %s\n' "${failed[@]}" >&2
    exit 1
  fi
  log "fleet check: passed (down left no process, namespace, link, socket or file; the logs are in $dir-logs)"
}
