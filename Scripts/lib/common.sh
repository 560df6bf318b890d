# Shared by the scripts in Scripts/. Source it; it sets ROOT and defines helpers.
set -euo pipefail
# ROOT without subshells (this runs before every Scripts/extrun call).
__extrun_here=$PWD
case "${BASH_SOURCE[0]}" in */*) cd -P "${BASH_SOURCE[0]%/*}/../.." ;; *) cd -P ../.. ;; esac
ROOT=$PWD
cd "$__extrun_here"
unset __extrun_here
export PATH="/opt/swift/usr/bin:$PATH"

log() { printf '%s\n' "$*" >&2; }

# The compiler flags of every release build the scripts make (Scripts/install, Scripts/bench,
# Scripts/serve-ab), the same for each so that one build serves them all: the code names each
# concrete generic type's metadata through its accessor instead of by its mangled name, which
# the Swift runtime resolves at first use by scanning every protocol conformance record of the
# binary (~7,900 in the static CLI). A cold `extrun handle` ran ~11% faster with them, and
# 18% fewer instructions up to the catalog's answer (docs/benchmarks.md, "The cold path,
# attributed"). Command-line flags reach the dependencies too; Package.swift cannot give
# them to a library product without barring it from versioned dependents (unsafeFlags).
SWIFT_RELEASE_FLAGS=(-Xswiftc -Xfrontend -Xswiftc -disable-concrete-type-metadata-mangled-name-accessors)

# Debian packages the build and the tests need.
REQUIRED_PACKAGES=(libseccomp-dev libsqlite3-dev python3)

# Prints the packages of "$@" that are not installed.
missing_packages() {
  local missing=()
  for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done
  printf '%s\n' "${missing[@]}"
}

# Installs the packages of "$@" that are missing (apt-get update first, only when needed).
ensure_packages() {
  local missing
  missing=$(missing_packages "$@" | tr '\n' ' ' | sed 's/ *$//')
  [ -z "$missing" ] && return 0
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      log "extrun needs these Debian packages: $missing"
      log "Install them as root: apt-get update && apt-get install -y $missing"
      exit 1
    fi
  fi
  log "Installing missing packages: $missing"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >&2
}

# The user plugins run as when extrun runs as root (docs/sandbox.md, "Privileges").
PLUGIN_USER=extrun-plugin

# Creates the plugin user (a system user and group, no home, no shell) when
# running as root and it is missing. Without root there is nothing to do:
# plugins then run as the host's own user.
ensure_plugin_user() {
  [ "$(id -u)" = 0 ] || return 0
  getent passwd "$PLUGIN_USER" >/dev/null 2>&1 && return 0
  log "Creating the system user $PLUGIN_USER that plugins run as"
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$PLUGIN_USER" >&2
}

# The debug build products directory.
BIN_DIR="$ROOT/.build/debug"

# Where Scripts/extrun stages the example plugins.
STAGED_PLUGINS="$ROOT/.build/extrun-plugins"
STAMP="$ROOT/.build/extrun-build.stamp"

# Whether a source file changed since the last build through these scripts.
build_is_stale() {
  [ -f "$STAMP" ] && [ -x "$BIN_DIR/extrun" ] || return 0
  # Bash's own globbing and -nt: no process is started (this runs before every Scripts/extrun call).
  local f
  shopt -s globstar nullglob
  for f in "$ROOT/Package.swift" "$ROOT"/Sources/** "$ROOT"/Examples/** "$ROOT"/Plugins/**; do
    [[ "$f" -nt "$STAMP" ]] && return 0
  done
  return 1
}

# Builds with swift build, quietly: the whole output goes to .build/build.log; what is
# shown is the progress (every tenth), errors, and the warnings of extrun's own files.
# Warnings from dependencies are only counted: they are theirs. With CI=true (or
# EXTRUN_WARNINGS_AS_ERRORS=1) a warning in extrun's own files fails the build.
build_debug() {
  mkdir -p "$ROOT/.build"
  local build_log="$ROOT/.build/build.log"
  if [ ! -x "$BIN_DIR/extrun" ]; then
    log "Building extrun (swift build $*). The first build compiles every dependency: 10 to 20 minutes on 2 cores; later ones take seconds to a few minutes. Its whole output: .build/build.log"
  else
    log "Building (swift build $*; output in .build/build.log)..."
  fi
  local statuses=()
  {
    (cd "$ROOT" && swift build "$@" 2>&1) | tee "$build_log" | awk '
      /^\[[0-9]+\/[0-9]+\]/ {
        split(substr($1, 2, length($1) - 2), n, "/")
        if (2 * n[2] < total) shown = 0
        total = n[2] + 0
        if (total >= 20) { step = int(10 * n[1] / total); if (step > shown) { shown = step; printf "  built %d%% (%s of %s steps)\n", 10 * step, n[1], total; fflush() } }
        next
      }
      /^error:|^[^ ].*: error:/ && !seen[$0]++ { print; fflush() }
    ' >&2
    statuses=("${PIPESTATUS[@]}")
  } || true
  local status=${statuses[0]:-1}
  local own dependency
  # A warning inside a macro's expansion (#expect) names the macro first and our file on
  # the next line ("`- FILE:LINE:COL: note: expanded code originates here").
  own=$( {
    grep -E "^$ROOT/(Sources|Tests|Examples|Plugins|Benchmarks|Fuzz|Package\.swift)[^:]*:[0-9]+:([0-9]+:)? warning:" "$build_log" || true
    awk -v root="$ROOT" '
      /^macro expansion .*: warning: / { warning = $0; sub(/^macro expansion [^ ]*: warning: /, "", warning); next }
      warning != "" && index($0, "`- " root "/") == 1 && /: note: expanded code originates here/ {
        place = substr($0, 4); sub(/: note: expanded code originates here.*/, "", place)
        print place ": warning: (in a macro expansion) " warning
      }
      { warning = "" }
    ' "$build_log"
  } | sort -u)
  dependency=$(grep -E "warning:" "$build_log" | grep -vE "^$ROOT/(Sources|Tests|Examples|Plugins|Benchmarks|Fuzz|Package\.swift)" | grep -v "macro expansion" | grep -cvE '^ +[|`]' || true)
  if [ "$status" != 0 ]; then
    log "The build FAILED (exit $status). Its errors are above; the whole output is in .build/build.log."
    exit "$status"
  fi
  if [ -n "$own" ]; then
    log "Warnings in extrun's own files:"
    printf '%s\n' "$own" >&2
    if [ "${CI:-}" = true ] || [ "${EXTRUN_WARNINGS_AS_ERRORS:-0}" = 1 ]; then
      log "Warnings in extrun's own files fail the build here (CI=true or EXTRUN_WARNINGS_AS_ERRORS=1): fix them."
      exit 1
    fi
  fi
  log "Built. Warnings from dependencies (not extrun's code; in .build/build.log): ${dependency:-0}."
  "$ROOT/Scripts/stage-plugins" "$BIN_DIR" "$STAGED_PLUGINS"
  touch "$STAMP"
}

# The scripts' own Python environment (never the system Python's packages): a venv in
# .build/python-venv with the packages the tests use, made or completed on first need.
# Prints the venv's python. Today: jsonschema, the reference validator SchemaTests holds
# extrun's own JSON Schema validator against (docs/schemas/README.md); mcp, the official
# Python MCP SDK, the real client MCPClientTests drive `extrun mcp` with (docs/mcp.md).
PYTHON_TEST_PACKAGES=(jsonschema==4.26.0 mcp==2.3.0)
ensure_python_venv() {
  ensure_venv "$ROOT/.build/python-venv" "${PYTHON_TEST_PACKAGES[@]}"
}

# Scripts/serve-conformance's own venv: schemathesis, which checks the running service
# against docs/serve-openapi.json. Apart from the tests' venv, which it would make much
# larger (hypothesis and its dependencies) for a check the suite does not run.
CONFORMANCE_PACKAGES=(schemathesis==4.32.5)
ensure_conformance_venv() {
  ensure_venv "$ROOT/.build/conformance-venv" "${CONFORMANCE_PACKAGES[@]}"
}

# A venv at DIR with exactly the packages PACKAGES... (pinned), made or remade on first
# need; prints its python.
ensure_venv() {
  local venv="$1"
  shift
  local stamp="$venv/.extrun-packages"
  if [ ! -x "$venv/bin/python" ] || [ "$(readlink -f "$venv/bin/python")" != "$(readlink -f /usr/bin/python3)" ] ||
    [ "$(cat "$stamp" 2>/dev/null)" != "$*" ]; then
    ensure_packages python3-venv
    log "Setting up $venv ($*)"
    # On Debian's python3, which every user can run (the tests run again as extrun-test;
    # a python3 found first on root's PATH, such as pyenv's under /root, is not theirs).
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" >&2
    printf '%s' "$*" > "$stamp"
    chmod -R o+rX "$venv"
  fi
  printf '%s\n' "$venv/bin/python"
}
