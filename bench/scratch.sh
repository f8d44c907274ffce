# Sourced by the bench shell scripts, from the repository root: `. bench/scratch.sh NAME`.
# Sets MSFS (as given in the environment, to compare two builds; else the release build if there
# is one, else the debug one), WORK (a scratch directory
# /tmp/msfs-NAME.XXXXXX), M (the mountpoint path inside it) and DAEMON (empty: the script puts
# the PID of the msfs it starts there), and at exit unmounts M, waits for DAEMON and removes
# WORK, so that a script stops only what it started.
MSFS=${MSFS:-$PWD/target/release/msfs}
[ -x "$MSFS" ] || MSFS=$PWD/target/debug/msfs
WORK=$(mktemp -d "/tmp/msfs-$1.XXXXXX")
M=$WORK/mnt
DAEMON=""

cleanup() {
    if grep -qs " $M " /proc/self/mounts; then umount "$M" || umount -l "$M"; fi
    if [ -n "$DAEMON" ]; then wait "$DAEMON" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
