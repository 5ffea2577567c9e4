# Sourced by test/cl/run.sh and test/e2e/run.sh: ECL's one cache for both suites.
# ECL compiles through gcc: SWANK, the helpers and FiveAM take minutes on a cold cache (as in CI).
# The CL suite's ECL run and the end-to-end ECL group used a cache each and so compiled everything
# twice; they share $ecl_cache (their XDG_CACHE_HOME, test/.work/ecl/xdg-cache/; the end-to-end
# tests' helper names the same directory) now. SWANK's loader compiles a fasl in place, not aside:
# two ECLs at once (make test runs two suites at once) could load a half-written one, so one ECL
# run at a time holds the cache (ecl_cache_lock, ecl_cache_unlock), the other waiting for it.
ecl_cache="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/test/.work/ecl/xdg-cache"

# ecl_cache_lock: wait until no other ECL run of the tests holds the cache, then hold it; says how
# long it waited when it did.
ecl_cache_lock() {
  local asked
  mkdir -p "$ecl_cache"
  exec {ecl_cache_fd}>"$ecl_cache/../lock"
  if ! flock -n "$ecl_cache_fd"; then
    asked="$(date +%s)"
    # Bounded: a process left holding the lock must not hang the suite (each ECL run has its own
    # watchdog of 900 s).
    if flock -w 1200 "$ecl_cache_fd"; then
      echo "ECL's cache: waited $(( $(date +%s) - asked )) s for the other suite's ECL run"
    else
      echo "ECL's cache: still held after $(( $(date +%s) - asked )) s; going on without waiting"
    fi
  fi
}

# ecl_cache_unlock: let the other suite's ECL run have the cache.
ecl_cache_unlock() {
  [ -n "${ecl_cache_fd:-}" ] && exec {ecl_cache_fd}>&-
  ecl_cache_fd=""
}
