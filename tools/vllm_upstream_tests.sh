#!/usr/bin/env bash
# vLLM's own V1 scheduler unit tests (from its source distribution), run offline on a CPU machine
# against RPSScheduler / RPSAsyncScheduler, or against vLLM's stock schedulers for reference.
#
# Usage: tools/vllm_upstream_tests.sh [--rps | --stock | --both] [--no-xfail] [-- PYTEST_ARGS...]
#   --rps       (default) the tests build the RPS classes (tests/vllm_upstream/plugin.py swaps them in)
#   --stock     vLLM's Scheduler / AsyncScheduler: what fails here fails from the offline set-up
#   --both      stock, then rps, and both result lines at the end
#   --no-xfail  do not mark the expected failures (tests/vllm_upstream/expected.py) as xfail
#   PYTEST_ARGS replace the default test files (paths relative to vLLM's source tree) or add options
#               (`-k EXPR` with the default files).
#
# Environment:
#   VENV          venv with vllm (the version below) and rps_serve installed   [build/venv-vllm-0.33.0]
#   VLLM_VERSION  the vLLM release whose tests to run                         [0.33.0]
#   VLLM_SDIST    an sdist already on disk (else it is fetched from PyPI into WORK_DIR)
#   WORK_DIR      where the sdists, their tests, the fake hubs and the logs go [build/vllm-upstream]
#   PYPI_SIMPLE   the package index's simple API                              [https://pypi.org/simple]
#
# Logs and JUnit XML go to WORK_DIR/logs/VLLM_VERSION/SCHEDULER.{log,xml}, one folder per version.
# Expected failures are per release (tests/vllm_upstream/expected.py, BY_VERSION): a release not listed
# there runs only with --no-xfail.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-build/venv-vllm-0.33.0}"
VLLM_VERSION="${VLLM_VERSION:-0.33.0}"
WORK_DIR="${WORK_DIR:-build/vllm-upstream}"
PYPI_SIMPLE="${PYPI_SIMPLE:-https://pypi.org/simple}"
[[ "$VENV" = /* ]] || VENV="$REPO/$VENV"
[[ "$WORK_DIR" = /* ]] || WORK_DIR="$REPO/$WORK_DIR"
PYTHON="$VENV/bin/python"
SRC="$WORK_DIR/vllm-$VLLM_VERSION"
LOG_DIR="$WORK_DIR/logs/$VLLM_VERSION"

# The default files; one that a version's tree lacks is left out with a note (see existing_tests).
# (The plug-in's own contract checks need no source tree: tests/unit/vllm_plugin/test_scheduler_contract.py.)
DEFAULT_TESTS=(
    tests/v1/core/test_scheduler.py
    tests/v1/core/test_async_scheduler.py
    tests/v1/core/test_priority_scheduler_random.py
    tests/v1/core/test_priority_preemption_bug.py
    tests/v1/core/test_deferred_block_free.py
    tests/v1/core/test_prefix_replay.py
    tests/v1/core/test_swa_inflight_window_free.py
    tests/v1/core/test_worker_slot_overflow.py
)

die() { echo "vllm_upstream_tests: $*" >&2; exit 1; }

# The DEFAULT_TESTS files that this version's tree has, one a line; each missing one noted on stderr,
# so that one list serves releases that added or dropped a file.
existing_tests() {
    local file
    for file in "${DEFAULT_TESTS[@]}"; do
        if [[ -f "$SRC/$file" ]]; then
            echo "$file"
        else
            echo "vllm_upstream_tests: vLLM $VLLM_VERSION has no $file: left out" >&2
        fi
    done
}

# The sdist's URL and sha256 from the index's JSON simple API (PEP 691), as "URL SHA256".
sdist_url() {
    local name="vllm-$VLLM_VERSION.tar.gz"
    curl -fsSL -H 'Accept: application/vnd.pypi.simple.v1+json' "$PYPI_SIMPLE/vllm/" |
        "$PYTHON" -c '
import json, sys
name = sys.argv[1]
for entry in json.load(sys.stdin)["files"]:
    if entry["filename"] == name:
        print(entry["url"], entry["hashes"]["sha256"])
        break
else:
    sys.exit(f"{name} is not on the index")
' "$name"
}

fetch_sdist() {
    local target="$WORK_DIR/vllm-$VLLM_VERSION.tar.gz" url sha
    if [[ -n "${VLLM_SDIST:-}" ]]; then
        [[ -f "$VLLM_SDIST" ]] || die "VLLM_SDIST=$VLLM_SDIST does not exist"
        echo "$VLLM_SDIST"
        return
    fi
    if [[ ! -f "$target" ]]; then
        read -r url sha < <(sdist_url) || die "could not find vllm-$VLLM_VERSION.tar.gz on $PYPI_SIMPLE"
        echo "vllm_upstream_tests: fetching $url" >&2
        curl -fsSL -o "$target.part" "$url"
        echo "$sha  $target.part" | sha256sum --check --quiet || die "sha256 mismatch for $url"
        mv "$target.part" "$target"
    fi
    echo "$target"
}

# vLLM's tests/ and pyproject.toml (its pytest markers), once per version.
extract_tests() {
    local sdist="$1" stamp="$SRC/.extracted"
    [[ -f "$stamp" ]] && return
    rm -rf "$SRC"
    mkdir -p "$SRC"
    tar -xzf "$sdist" -C "$SRC" --strip-components=1 \
        "vllm-$VLLM_VERSION/tests" "vllm-$VLLM_VERSION/pyproject.toml"
    touch "$stamp"
}

# One pytest run; its exit status is returned, its last line kept for the summary.
run_pytest() {
    local scheduler="$1"; shift
    local log="$LOG_DIR/$scheduler.log"
    echo "=== vLLM $VLLM_VERSION scheduler tests against the $scheduler scheduler (log: $log)"
    set +e
    (
        cd "$SRC"
        # --noconftest: vLLM's root conftest needs its full test requirements; the plug-in has the
        # fixtures these tests use. This repository's tests/ on the path makes `vllm_upstream` importable.
        # A fake hub (and the caches beside it) per release: `make test` runs both releases at once.
        PYTHONPATH="$REPO/tests${PYTHONPATH:+:$PYTHONPATH}" VLLM_TARGET_DEVICE=cpu \
            RPS_UPSTREAM_HUB="$WORK_DIR/$VLLM_VERSION/hub" \
            "$PYTHON" -m pytest -p no:cacheprovider --noconftest -p vllm_upstream.plugin \
            --rps-scheduler="$scheduler" "${XFAIL_ARGS[@]}" -q -rfEsxX --tb=short \
            --junitxml="$LOG_DIR/$scheduler.xml" "$@"
    ) 2>&1 | tee "$log"
    local status="${PIPESTATUS[0]}"
    set -e
    RESULTS+=("$scheduler: $(tail -n 1 "$log")")
    return "$status"
}

main() {
    local mode=rps
    XFAIL_ARGS=()
    local args=()
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --rps) mode=rps ;;
            --stock) mode=stock ;;
            --both) mode=both ;;
            --no-xfail) XFAIL_ARGS=(--rps-no-xfail) ;;
            --) shift; args=("$@"); break ;;
            *) die "unknown option $1 (see the header of $0)" ;;
        esac
        shift
    done
    [[ -x "$PYTHON" ]] || die "no venv at $VENV (make it first)"
    "$PYTHON" -c "import vllm, sys; sys.exit(vllm.__version__ != '$VLLM_VERSION')" ||
        die "$VENV does not have vllm $VLLM_VERSION"
    mkdir -p "$LOG_DIR"
    extract_tests "$(fetch_sdist)"
    # Default files unless the extra arguments name tests: a path in vLLM's tree (`file.py::test` too).
    # Checking the path, not just "not an option", keeps an option's value (`-k "a or b"`) an option's.
    local tests=() arg
    mapfile -t tests < <(existing_tests)
    for arg in "${args[@]}"; do
        [[ "$arg" != -* && -e "$SRC/${arg%%::*}" ]] && { tests=(); break; }
    done
    RESULTS=()
    local status=0 scheduler
    local schedulers=("$mode")
    [[ "$mode" == both ]] && schedulers=(stock rps)
    for scheduler in "${schedulers[@]}"; do
        run_pytest "$scheduler" "${tests[@]}" "${args[@]}" || status=$?
    done
    echo "=== summary (vLLM $VLLM_VERSION, tests/v1/core)"
    printf '%s\n' "${RESULTS[@]}"
    return "$status"
}

main "$@"
