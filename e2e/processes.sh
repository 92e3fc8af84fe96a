# Stopping the processes the e2e scripts started, by their recorded pids
# (sourced by e2e/cluster, e2e/node/node.sh and e2e/demo).

# Whether a process still runs. A zombie has stopped: the scripts that
# started these processes have exited, so the init that adopted them reaps
# them, on this machine about every 2 s, and `kill -0` still finds a zombie
# (a cluster's `down` waited 2 s per process for nothing).
alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# Stops the given pids: SIGTERM to each, then waits for each up to 10 s and
# kills what is left. Pass several to stop them side by side.
stop_pids() {
  local pid i
  for pid in "$@"; do
    if alive "$pid"; then kill "$pid" 2>/dev/null || true; fi
  done
  for pid in "$@"; do
    for ((i = 0; i < 40; i++)); do alive "$pid" || break; sleep 0.25; done
    if alive "$pid"; then kill -9 "$pid" 2>/dev/null || true; fi
  done
  return 0
}
