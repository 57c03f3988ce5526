#!/usr/bin/env bash
# The no-op scores of ClawGym tasks as ClawGym's own setup computes them, without any Stepwise code:
# test/fixtures/clawgym-noop-scores.json, which test/gym-rootfs.test.ts compares `gym validate` with.
#
# ClawGym (RL/clawgym_rl_rollout.py, RL/README.md) runs a verifier as root in its OpenClaw image
# (Debian 12, CPython 3.11, `ln -sf /usr/bin/python3 /usr/bin/python`): it copies reward/ into
# /root/.openclaw/workspace, runs `bash /root/.openclaw/workspace/reward/reward.sh` with
# PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 from
# the root directory (its chroot backend), and scores the last non-empty stdout line as a float, 0 on
# a non-zero exit. The no-op is the untouched workspace: input_files/ as published, no agent.
# This script does the same on a Debian 12 host's own /usr, in a private mount namespace
# (`unshare --user --map-root-user --mount`, as ClawGym's chroot backend): a tmpfs over /root holds
# the workspace, and one over /usr/local/sbin holds the `python` link ClawGym's image adds. Nothing is
# written outside a temporary folder.
#
# Usage: bench/clawgym-noop-reference.sh TASKS_DIR > test/fixtures/clawgym-noop-scores.json
set -euo pipefail
tasks="${1:?usage: $0 TASKS_DIR}"
grep -q 'VERSION_ID="12"' /etc/os-release || { echo "needs a Debian 12 host (ClawGym's image is Debian 12)" >&2; exit 1; }
pyver="$(/usr/bin/python3 -c 'import platform; print(platform.python_version())')"
case "$pyver" in 3.11.*) ;; *) echo "needs CPython 3.11 at /usr/bin/python3, found $pyver" >&2; exit 1 ;; esac
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

score_task() {
  local dir="$1" ws="$work/ws"
  rm -rf "$ws" && mkdir -p "$ws"
  [ -d "$dir/input_files" ] && cp -a "$dir/input_files/." "$ws/"
  cp -a "$dir/reward" "$ws/reward"
  local out
  out="$(unshare --user --map-root-user --mount bash -c '
      mount -t tmpfs tmpfs /root && mkdir -p /root/.openclaw/workspace &&
      mount --bind "$1" /root/.openclaw/workspace &&
      mount -t tmpfs tmpfs /usr/local/sbin && ln -s /usr/bin/python3 /usr/local/sbin/python &&
      cd / && exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LC_ALL=C.UTF-8 timeout 600 bash /root/.openclaw/workspace/reward/reward.sh
    ' _ "$ws" 2>/dev/null)" || { echo 0; return; }
  # ClawGym's _parse_reward_stdout: the last non-empty line as a float, else 0.
  printf '%s\n' "$out" | /usr/bin/python3 -c '
import sys
lines = [l.strip() for l in sys.stdin.read().splitlines() if l.strip()]
try:
    print(repr(float(lines[-1])) if lines else "0.0")
except ValueError:
    print("0.0")'
}

{
  printf '{\n  "derivation": "bench/clawgym-noop-reference.sh: ClawGym'"'"'s reward run (root, /root/.openclaw/workspace, PATH with python -> python3, HOME=/root, LC_ALL=C.UTF-8, cwd /) on the untouched workspace",\n'
  printf '  "python": "%s",\n  "scores": {\n' "$pyver"
  first=1
  for dir in "$tasks"/*/; do
    [ -f "$dir/data_entry.json" ] || continue
    id="$(basename "$dir")"
    s="$(score_task "$dir")"
    [ "$first" = 1 ] || printf ',\n'
    first=0
    printf '    "%s": %s' "$id" "$s"
  done
  printf '\n  }\n}\n'
}
