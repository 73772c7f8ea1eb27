#!/usr/bin/env bash
# Installs what building and testing VKML needs on a Debian or Ubuntu machine, and nothing that
# is already there: a C++ compiler (glslang is built from source by its crate), the Vulkan
# loader, Mesa's lavapipe (Vulkan on the CPU, so the GPU tests run anywhere), and a Rust
# toolchain with rustfmt and clippy. Safe to run again; sourced by test.sh and run-example.sh.
#
# Environment: VKML_SKIP_VULKAN=1 to go on without any Vulkan driver (the Vulkan tests then
# skip instead of failing); VKML_NO_INSTALL=1 to check only, never install.

# Edition 2024 needs Rust 1.85.
VKML_MIN_RUST="1.85.0"

step() {
    printf '\n==> %s\n' "$*"
}

die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

# Runs a command as root: directly when we are root, through sudo when it is there.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root to run: $* (run as root, install sudo, or install it yourself)"
    fi
}

missing_debs() {
    local pkg
    for pkg in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
            printf '%s ' "$pkg"
        fi
    done
}

install_system_packages() {
    step "System packages"
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "no apt-get: not a Debian system; make sure a C++ compiler, libvulkan.so.1 and a Vulkan driver are installed"
        return 0
    fi
    local want=(build-essential libvulkan1 mesa-vulkan-drivers ca-certificates)
    if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
        want+=(curl)
    fi
    local missing
    missing=$(missing_debs "${want[@]}")
    if [ -z "$missing" ]; then
        echo "all present: ${want[*]}"
        return 0
    fi
    if [ "${VKML_NO_INSTALL:-}" = 1 ]; then
        die "missing packages: $missing (VKML_NO_INSTALL=1)"
    fi
    echo "installing: $missing"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq
    # shellcheck disable=SC2086 # one word per package
    as_root apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

# Installs Debian packages a later step needs (`why` says which), or says they are missing
# where there is no apt or installing is off. Returns non-zero when they are not there.
apt_install_for() {
    local why=$1
    shift
    if [ "${VKML_NO_INSTALL:-}" = 1 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "error: $why needs these packages: $* (install them, or run on Debian without VKML_NO_INSTALL=1)" >&2
        return 1
    fi
    echo "installing $* ($why)"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq
    as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

version_at_least() {
    # True when $1 >= $2 (dotted versions).
    [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

ensure_rust() {
    step "Rust toolchain"
    if [ -f "$HOME/.cargo/env" ]; then
        # shellcheck disable=SC1091
        . "$HOME/.cargo/env"
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        [ "${VKML_NO_INSTALL:-}" = 1 ] && die "no cargo (VKML_NO_INSTALL=1)"
        echo "no cargo: installing rustup's stable toolchain (minimal profile)"
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
            sh -s -- -y -q --profile minimal --default-toolchain stable -c rustfmt -c clippy
        # shellcheck disable=SC1091
        . "$HOME/.cargo/env"
    fi
    local version
    version=$(rustc --version | awk '{print $2}')
    if ! version_at_least "${version%%-*}" "$VKML_MIN_RUST"; then
        if command -v rustup >/dev/null 2>&1 && [ "${VKML_NO_INSTALL:-}" != 1 ]; then
            echo "rustc $version is older than $VKML_MIN_RUST: updating stable"
            rustup -q update stable
            rustup -q default stable
        else
            die "rustc $version is older than $VKML_MIN_RUST"
        fi
    fi
    local component
    for component in rustfmt clippy; do
        if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
            command -v rustup >/dev/null 2>&1 || die "cargo $component is missing and there is no rustup to add it"
            rustup -q component add "$component"
        fi
    done
    echo "$(rustc --version), $(cargo fmt --version), $(cargo clippy --version)"
}

check_vulkan() {
    step "Vulkan driver"
    if [ "${VKML_SKIP_VULKAN:-}" = 1 ]; then
        echo "VKML_SKIP_VULKAN=1: Vulkan tests will skip"
        return 0
    fi
    local icd
    for dir in /usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/share/vulkan/icd.d; do
        for icd in "$dir"/*.json; do
            if [ -e "$icd" ]; then
                echo "found $(ls "$dir"/*.json | xargs -n1 basename | tr '\n' ' ')"
                return 0
            fi
        done
    done
    if [ -n "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ]; then
        echo "driver given by VK_ICD_FILENAMES/VK_DRIVER_FILES"
        return 0
    fi
    die "no Vulkan driver (ICD) found; install mesa-vulkan-drivers, or set VKML_SKIP_VULKAN=1 to skip the Vulkan tests"
}

vkml_setup() {
    install_system_packages
    ensure_rust
    check_vulkan
}
