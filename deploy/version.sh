#!/usr/bin/env bash
# version.sh — prints the release version: $1 when given, else the VERSION file
# at the repository root, the one source of truth for the chart's version and
# appVersion, the image tag and `--version`. A leading "v" (git tag style,
# v1.2.3) is dropped: image tags, chart versions and --version never carry it,
# so `make release VERSION=v1.2.3` and VERSION=1.2.3 build the same thing.
#
# usage: deploy/version.sh [VERSION]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
v=${1:-}
if [ -z "$v" ]; then
  v=$(tr -d ' \t\r\n' <"$here/../VERSION")
fi
[[ $v =~ ^v[0-9] ]] && v=${v#v}
# SemVer 2 (what `helm package --version` accepts), also a valid OCI tag once
# "+" is mapped to "_" (build-oci.sh does that).
re='^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$'
[[ $v =~ $re ]] || { echo "version.sh: version '$v' is not SemVer x.y.z[-pre][+build]" >&2; exit 1; }
printf '%s\n' "$v"
