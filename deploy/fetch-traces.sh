#!/usr/bin/env bash
# Fetches the public job traces that baton's trace tests and benchmarks read, into DIR
# (default: $BATON_TRACE_DIR, else ../shared/traces beside the source tree), and checks them against
# the checksums of the copies the project is tested with. The traces are not part of the project.
#
#   BATON_LS6_URL      download address of ls6-a100.log, the Lonestar6 A100 trace published with the
#                      Mirage paper (arXiv 2306.14086, CC BY 4.0)
#   BATON_LUBLIN_URL   download address of lublin_256.swf (Lublin-Feitelson model, 256 nodes, 10,000 jobs)
#   BATON_EAGLE_SAMPLE_URL
#                      download address of sample_eagle_data.csv, 1,000 jobs of NREL's Eagle cluster
#                      (Slurm, January 2019) from github.com/NREL/eagle-jobs (BSD-3-Clause); default:
#                      that repository's file at a pinned commit
#   BATON_EAGLE_URL    optional: your own copy of the full Eagle dataset (11 million jobs, Nov 2018 -
#                      Feb 2023, same columns; Open Energy Data Initiative, submission 5860), a .csv,
#                      .csv.gz or .csv.bz2; saved as eagle-jobs.csv unpacked. It has no checksum here:
#                      the script prints the file's, and BATON_EAGLE_SHA256 makes it check one.
#
# A file already present with the right checksum is kept; a download with the wrong one is refused.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-${BATON_TRACE_DIR:-$here/../shared/traces}}

declare -A sha256=(
    [ls6-a100.log]=e1ff7c8e9fde480a21ea698c56e1e874a1f0179ecf007e03c63d9d3d78a6a942
    [lublin_256.swf]=a394ab3d81179ebcf645a1cbd593a60b6dff7f11a510e1e6285c45f43310c962
    [sample_eagle_data.csv]=848e8dd418dfd5efcb4897c054489c21e0022ced637a6954216aa878e03bb513
)
eagle_commit=ef34f9fa5edabb04b460dcf58929b841555a2e2d
declare -A url=(
    [ls6-a100.log]=${BATON_LS6_URL:-}
    [lublin_256.swf]=${BATON_LUBLIN_URL:-}
    [sample_eagle_data.csv]=${BATON_EAGLE_SAMPLE_URL:-https://raw.githubusercontent.com/NREL/eagle-jobs/$eagle_commit/data/sample_eagle_data.csv}
)

mkdir -p "$dir"
status=0
for name in "${!sha256[@]}"; do
    target=$dir/$name
    if [ -f "$target" ] && echo "${sha256[$name]}  $target" | sha256sum -c --status; then
        echo "fetch-traces: $name present and verified"
        continue
    fi
    if [ -z "${url[$name]}" ]; then
        echo "fetch-traces: $name missing; set its download address (see the top of this script)" >&2
        status=1
        continue
    fi
    tmp=$(mktemp "$dir/.$name.XXXXXX")
    if ! curl --fail --location --silent --show-error --max-time 600 -o "$tmp" -- "${url[$name]}"; then
        rm -f "$tmp"; status=1; continue
    fi
    case ${url[$name]} in *.gz) gunzip -c "$tmp" > "$tmp.unpacked" && mv "$tmp.unpacked" "$tmp" ;; esac
    if echo "${sha256[$name]}  $tmp" | sha256sum -c --status; then
        mv "$tmp" "$target"
        echo "fetch-traces: $name fetched and verified"
    else
        rm -f "$tmp"
        echo "fetch-traces: $name from ${url[$name]} does not match the expected checksum; not kept" >&2
        status=1
    fi
done
# The full Eagle dataset, when the user points at a copy: unpacked to eagle-jobs.csv.
if [ -n "${BATON_EAGLE_URL:-}" ]; then
    target=$dir/eagle-jobs.csv
    tmp=$(mktemp "$dir/.eagle-jobs.XXXXXX")
    if ! curl --fail --location --silent --show-error --max-time 7200 -o "$tmp" -- "$BATON_EAGLE_URL"; then
        rm -f "$tmp"; exit 1
    fi
    case $BATON_EAGLE_URL in
        *.gz) gunzip -c "$tmp" > "$tmp.unpacked" && mv "$tmp.unpacked" "$tmp" ;;
        *.bz2) bunzip2 -c "$tmp" > "$tmp.unpacked" && mv "$tmp.unpacked" "$tmp" ;;
    esac
    sum=$(sha256sum "$tmp" | cut -d' ' -f1)
    if [ -n "${BATON_EAGLE_SHA256:-}" ] && [ "$sum" != "$BATON_EAGLE_SHA256" ]; then
        rm -f "$tmp"
        echo "fetch-traces: eagle-jobs.csv from $BATON_EAGLE_URL has sha256 $sum, not $BATON_EAGLE_SHA256; not kept" >&2
        exit 1
    fi
    mv "$tmp" "$target"
    echo "fetch-traces: eagle-jobs.csv fetched (sha256 $sum)"
fi
exit $status
