# Sourced by scripts/test-all.sh (make test, .ci/run) and bench/run.sh (make bench).
# When SLY_DIR is not set and a pinned copy of SLY's source sits beside the checkout
# (../shared/vendor/sly-*.tar.gz, as in CI), unpack it into the ignored .deps/sly/ and export
# SLY_DIR, so that the SLY halves of the suites run. Without either, SLY_DIR stays unset and
# the suites name their SLY runs as skipped. Nothing of SLY goes into tracked files.
if [ -z "${SLY_DIR:-}" ]; then
  vendor_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  # SAQ_VENDOR_DIR names another vendor directory (a checkout laid out differently).
  vendor_tar="$(ls "${SAQ_VENDOR_DIR:-$vendor_root/../shared/vendor}"/sly-*.tar.gz 2>/dev/null | tail -n 1)"
  if [ -n "$vendor_tar" ]; then
    vendor_dest="$vendor_root/.deps/sly"
    # Unpack again only when the tarball changed (its name carries the pinned commit).
    if [ "$(cat "$vendor_dest/.from" 2>/dev/null)" != "$(basename "$vendor_tar")" ] ||
       [ ! -f "$vendor_dest/sly/sly.el" ]; then
      rm -rf "$vendor_dest" && mkdir -p "$vendor_dest" &&
        tar -xzf "$vendor_tar" -C "$vendor_dest" &&
        basename "$vendor_tar" >"$vendor_dest/.from"
    fi
    if [ -f "$vendor_dest/sly/sly.el" ]; then
      export SLY_DIR="$vendor_dest/sly"
      echo "SLY: $(basename "$vendor_tar"), unpacked into .deps/sly/ (set SLY_DIR to use another)"
    fi
  fi
fi
