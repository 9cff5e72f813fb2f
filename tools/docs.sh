#!/usr/bin/env bash
# tools/docs.sh BIN write|check - the documentation generated from the
# binary's tables (make docs writes it, make docs-check checks it):
#
#   doc/configuration.md   between <!-- config:begin --> and <!-- config:end -->: BIN --config-doc
#   doc/metrics.md         between <!-- metrics:begin --> and <!-- metrics:end -->: BIN --metrics-doc
#   doc/promptcache.1      BIN --man 1
#   doc/promptcache.conf.5 BIN --man 5
#   conf/promptcache.conf  BIN --sample-config
#
# check also runs every Markdown file's relative links and anchors through
# tools/doclinks.js and the manual pages through groff with every warning on
# (-ww); it prints what differs and exits 1 if anything does.
set -euo pipefail
bin=$1 mode=$2
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

# compare FILE NEW WHAT: write mode replaces FILE with NEW, check mode reports a difference.
compare() {
    if cmp -s "$1" "$2"; then
        return 0
    fi
    if [ "$mode" = write ]; then
        cp "$2" "$1"
        echo "docs: wrote $1"
    else
        echo "docs: $1 differs from $3 (run make docs):"
        diff -u "$1" "$2" | head -n 20 || true
        status=1
    fi
}

# block FILE NAME OPTION: the lines between FILE's markers are BIN OPTION's output.
block() {
    local file=$1 begin="<!-- $2:begin -->" end="<!-- $2:end -->"
    if ! grep -qxF "$begin" "$file" || ! grep -qxF "$end" "$file"; then
        echo "docs: $file has no $begin ... $end"
        status=1
        return
    fi
    "$bin" "$3" > "$tmp/gen"
    awk -v gen="$tmp/gen" -v b="$begin" -v e="$end" '
        $0 == e { while ((getline l < gen) > 0) print l; skip = 0 }
        !skip { print }
        $0 == b { skip = 1 }' "$file" > "$tmp/new"
    compare "$file" "$tmp/new" "promptcache $3"
}

# whole FILE ARGS...: FILE is BIN ARGS's output.
whole() {
    local file=$1
    shift
    "$bin" "$@" > "$tmp/new"
    compare "$file" "$tmp/new" "promptcache $*"
}

block doc/configuration.md config --config-doc
block doc/metrics.md metrics --metrics-doc
whole doc/promptcache.1 --man 1
whole doc/promptcache.conf.5 --man 5
whole conf/promptcache.conf --sample-config

if [ "$mode" = check ]; then
    mapfile -t md < <(git ls-files --cached --others --exclude-standard '*.md' 2>/dev/null | grep -v node_modules || true)
    [ ${#md[@]} -gt 0 ] || mapfile -t md < <(ls README.md doc/*.md)
    node tools/doclinks.js "${md[@]}" || status=1
    command -v groff >/dev/null || { echo "docs: groff missing (make deps-test)"; exit 1; }
    for page in doc/promptcache.1 doc/promptcache.conf.5; do
        if groff -man -Tutf8 -ww -z "$page" 2>&1 | grep .; then
            echo "docs: groff warns about $page"
            status=1
        fi
    done
fi
exit $status
