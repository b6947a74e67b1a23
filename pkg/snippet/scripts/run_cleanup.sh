# shellcheck shell=bash
# The cleanup of a snippet run that was killed before it could remove its directory (snippet.go,
# Run), run as: bash -c SCRIPT sbx-script DIR.
rm -rf -- "$1"
