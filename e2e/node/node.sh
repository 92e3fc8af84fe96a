# The test cluster's real node, sourced by e2e/cluster: a kubelet backed by
# containerd and runc, with a CNI bridge and kube-proxy, beside the kwok
# nodes. It is tainted, so only pods that tolerate the taint (the chart's
# operators, when asked) land on it; Kubeflow's own pods keep landing on kwok.
#
# Network: everything host-only. A /32 on the loopback interface (this
# kernel has no dummy driver) holds the address the API server listens on and
# advertises (pods reach it through the `kubernetes`
# Service via kube-proxy); the pods' bridge has its own private range and no
# masquerade, and IP forwarding stays as it was (off on a fresh machine), so
# nothing from a pod is routed off the machine. containerd may not pull: every
# registry resolves to a closed port on loopback.
#
# `down` stops every process by recorded pid (the shims by the pid files
# containerd writes) and removes every mount, network namespace, interface,
# iptables chain and cgroup the node made, and restores the kernel settings
# the kubelet changes.

CONTAINERD_VERSION=v2.4.2
NODE_BIN_DIR=$CACHE_ROOT/bin/node.containerd-$CONTAINERD_VERSION.k8s-$K8S_VERSION.$GO_VERSION
NODE_BINARIES=(containerd containerd-shim-runc-v2 ctr kubelet kube-proxy pause.oci.tar)
NODE_DIR=$STATE_DIR/node
NODE_RUN=/run/kubeflow-e2e
NODE_NAME=kubeflow-e2e-node
NODE_TAINT=kubeflow.org/e2e-real-node
HOST_IP=10.216.0.1
BRIDGE_IF=kfe2e-br0
POD_CIDR=10.217.0.0/24
POD_GATEWAY=10.217.0.1
SERVICE_IP=10.96.0.1
PAUSE_IMAGE=localhost/kubeflow-e2e/pause:1
KUBELET_PORT=$((PORT_BASE + 50))
KUBELET_HEALTHZ_PORT=$((PORT_BASE + 48))
PROXY_METRICS_PORT=$((PORT_BASE + 49))
PROXY_HEALTHZ_PORT=$((PORT_BASE + 51))
# What the kubelet sets at start (protectKernelDefaults: false); `down` puts
# back the values found before the first `up`.
KERNEL_TUNABLES=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

# The real node runs when asked (KUBEFLOW_E2E_REAL_NODE=1), or by default
# when this runs as root; KUBEFLOW_E2E_REAL_NODE=0 keeps the cluster
# process-only (no root needed).
node_enabled() {
  case "${KUBEFLOW_E2E_REAL_NODE:-auto}" in
    0 | false) return 1 ;;
    1 | true) return 0 ;;
    *) [ "$(id -u)" = 0 ] ;;
  esac
}

# Where the API server listens: the host-only address with a real node (pods
# must reach it), loopback otherwise. Fixed per state folder at first `up`.
api_host() {
  if [ -s "$STATE_DIR/api-host" ]; then cat "$STATE_DIR/api-host"; return; fi
  if node_enabled; then echo "$HOST_IP"; else echo 127.0.0.1; fi
}

node_build() {
  local missing=0
  for b in "${NODE_BINARIES[@]}"; do [ -e "$NODE_BIN_DIR/$b" ] || missing=1; done
  [ $missing = 0 ] && return
  for tool in runc umoci musl-gcc iptables; do
    command -v "$tool" >/dev/null || { log "the real node needs $tool (Debian: runc umoci musl-tools iptables containernetworking-plugins)"; exit 1; }
  done
  [ -x /usr/lib/cni/bridge ] || { log "the real node needs the CNI plugins (Debian: containernetworking-plugins)"; exit 1; }
  mkdir -p "$NODE_BIN_DIR"
  if [ ! -x "$NODE_BIN_DIR/containerd" ] || [ ! -x "$NODE_BIN_DIR/ctr" ]; then
    local work=$CACHE_ROOT/build/containerd-$CONTAINERD_VERSION
    mkdir -p "$work"
    printf 'module kubeflow-e2e/containerd\n\ngo 1.26\n\nrequire github.com/containerd/containerd/v2 %s\n' \
      "$CONTAINERD_VERSION" >"$work/go.mod"
    log "building containerd $CONTAINERD_VERSION"
    # No cgo: the btrfs, devmapper and zfs snapshotters (cgo) are left out;
    # overlayfs is what the node uses.
    (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
      -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
      -o "$NODE_BIN_DIR/" \
      github.com/containerd/containerd/v2/cmd/containerd \
      github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
      github.com/containerd/containerd/v2/cmd/ctr)
  fi
  if [ ! -x "$NODE_BIN_DIR/kubelet" ] || [ ! -x "$NODE_BIN_DIR/kube-proxy" ]; then
    kubernetes_module >/dev/null
    log "building kubelet and kube-proxy $K8S_VERSION"
    (cd "$CACHE_ROOT/build/kubernetes-$K8S_VERSION" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath \
      -ldflags "$(kubernetes_ldflags)" -o "$NODE_BIN_DIR/" \
      k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
  fi
  if [ ! -e "$NODE_BIN_DIR/pause.oci.tar" ]; then
    log "building the pause image"
    local work; work=$(mktemp -d)
    # The workload test's stand-in: with no ports or init commands listed in
    # its image, it only holds the pod's namespaces and reaps orphans.
    musl-gcc -static -Os -s -o "$work/pause" "$ROOT_DIR/e2e/node/stand-in.c"
    "$ROOT_DIR/images/pack" "$work" "$NODE_BIN_DIR/pause.oci.tar" 1 65535:65535 /pause
    rm -rf "$work"
  fi
}

node_certs() {
  local d=$STATE_DIR/pki
  [ -f "$d/node.crt" ] && return
  (
    cd "$d"
    sign() {
      local name=$1 subject=$2 ext=$3
      printf '%s\n' "$ext" >"$name.ext"
      openssl req -newkey rsa:2048 -nodes -subj "$subject" -keyout "$name.key" -out "$name.csr" 2>/dev/null
      openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -extfile "$name.ext" -out "$name.crt" 2>/dev/null
    }
    # The kubelet as the Node authorizer knows it, and kube-proxy as the
    # default system:node-proxier binding names it.
    sign node "/O=system:nodes/CN=system:node:$NODE_NAME" "extendedKeyUsage=clientAuth"
    sign kube-proxy "/CN=system:kube-proxy" "extendedKeyUsage=clientAuth"
    sign kubelet-serving "/CN=$NODE_NAME" \
      "subjectAltName=IP:$HOST_IP,DNS:$NODE_NAME
extendedKeyUsage=serverAuth"
  )
}

node_kubeconfig() {
  local user=$1 file=$2 d=$STATE_DIR/pki
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kubeflow-e2e
  cluster: {server: "https://$(api_host):$APISERVER_PORT", certificate-authority: "$d/ca.crt"}
users:
- name: $user
  user: {client-certificate: "$d/$user.crt", client-key: "$d/$user.key"}
contexts:
- name: $user
  context: {cluster: kubeflow-e2e, user: $user}
current-context: $user
EOF
}

# The host-only addresses: the API server's before it starts.
node_network_up() {
  mkdir -p "$NODE_DIR"
  if [ ! -f "$NODE_DIR/kernel.saved" ]; then
    for t in "${KERNEL_TUNABLES[@]}"; do echo "$t $(cat "/proc/sys/$t")"; done >"$NODE_DIR/kernel.saved"
  fi
  if ! ip -4 addr show dev lo | grep -q "inet $HOST_IP/32"; then
    ip addr add "$HOST_IP/32" dev lo
    # This state folder's cluster made the host-only network, so its `down`
    # removes it; another cluster's (a test's throwaway one) must not.
    touch "$STATE_DIR/host-network"
  fi
  if ! ip link show "$BRIDGE_IF" >/dev/null 2>&1; then
    ip link add "$BRIDGE_IF" type bridge
    ip addr add "$POD_GATEWAY/24" dev "$BRIDGE_IF"
    ip link set "$BRIDGE_IF" up
  fi
}

node_configs() {
  local d=$STATE_DIR/pki
  mkdir -p "$NODE_DIR/cni" "$NODE_DIR/hosts/_default" "$NODE_DIR/kubelet" "$NODE_DIR/pod-logs" "$NODE_RUN"
  # No pulls: every registry is a closed port on loopback, so an image that
  # is not imported fails at once instead of reaching for the internet.
  printf 'server = "https://127.0.0.1:9"\n\n[host."https://127.0.0.1:9"]\n  capabilities = ["pull", "resolve"]\n' \
    >"$NODE_DIR/hosts/_default/hosts.toml"
  cat >"$NODE_DIR/containerd.toml" <<EOF
version = 3
root = "$NODE_DIR/containerd"
state = "$NODE_RUN/containerd"
imports = []
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "$NODE_RUN/containerd.sock"

[ttrpc]
  address = "$NODE_RUN/containerd.sock.ttrpc"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$NODE_DIR/hosts"

[plugins.'io.containerd.cri.v1.runtime']
  netns_mounts_under_state_dir = true
  # This machine's root lacks CAP_SYS_RESOURCE, so no process may lower its
  # oom_score_adj (the kubelet asks -998 for sandboxes): clamp to ours.
  restrict_oom_score_adj = true
  cdi_spec_dirs = []
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    BinaryName = "$(command -v runc)"
    SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$NODE_DIR/cni"

[plugins.'io.containerd.internal.v1.opt']
  path = "$NODE_DIR/opt"

[plugins.'io.containerd.transfer.v1.local']
  config_path = "$NODE_DIR/hosts"
EOF
  # No masquerade and no gateway role for the plugin (isGateway would turn
  # IP forwarding on): the bridge already holds the gateway address.
  cat >"$NODE_DIR/cni/10-kubeflow-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "kubeflow-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE_IF",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$NODE_DIR/ipam"
      }
    }
  ]
}
EOF
  cat >"$NODE_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $HOST_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $d/kubelet-serving.crt
tlsPrivateKeyFile: $d/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $d/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$NODE_RUN/containerd.sock
cgroupDriver: cgroupfs
# This machine mounts cgroups v1 (hybrid).
failCgroupV1: false
failSwapOn: false
podLogsDir: $NODE_DIR/pod-logs
# No cluster DNS and no host resolver: pods reach the API server by the
# kubernetes Service's address and nothing else.
resolvConf: ""
# Every workload of every component fits (e2e/tests/workloads.rs).
maxPods: 150
registerWithTaints:
- {key: $NODE_TAINT, value: "true", effect: NoSchedule}
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
  node_kubeconfig node "$NODE_DIR/kubelet.kubeconfig"
  node_kubeconfig kube-proxy "$NODE_DIR/kube-proxy.kubeconfig"
}

node_ctr() { "$NODE_BIN_DIR/ctr" --address "$NODE_RUN/containerd.sock" -n k8s.io "$@"; }

# Imports OCI archives into the node's containerd: `import NAME ARCHIVE`
# gives the archive's image the name NAME (its ref name is the tag).
node_import() {
  local name=$1 archive=$2
  node_ctr images import --base-name "$name" --platform linux/amd64 "$archive" >/dev/null
}

node_ready() {
  [ "$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

node_up() {
  running kubelet && return
  node_network_up
  node_configs
  start containerd "$NODE_BIN_DIR/containerd" --config "$NODE_DIR/containerd.toml"
  wait_for containerd 120 node_ctr version
  node_import localhost/kubeflow-e2e/pause "$NODE_BIN_DIR/pause.oci.tar"
  start kubelet "$NODE_BIN_DIR/kubelet" --config "$NODE_DIR/kubelet.yaml" \
    --kubeconfig "$NODE_DIR/kubelet.kubeconfig" --root-dir "$NODE_DIR/kubelet" \
    --hostname-override "$NODE_NAME" --node-ip "$HOST_IP" \
    --node-labels "type=real,kubeflow.org/e2e-node=real"
  # No conntrack or route_localnet changes: the machine's settings stay.
  start kube-proxy "$NODE_BIN_DIR/kube-proxy" --kubeconfig "$NODE_DIR/kube-proxy.kubeconfig" \
    --hostname-override "$NODE_NAME" --proxy-mode iptables --cluster-cidr "$POD_CIDR" \
    --nodeport-addresses "$HOST_IP/32" --iptables-localhost-nodeports=false \
    --conntrack-max-per-core 0 --conntrack-tcp-timeout-established 0 --conntrack-tcp-timeout-close-wait 0 \
    --metrics-bind-address "127.0.0.1:$PROXY_METRICS_PORT" --healthz-bind-address "127.0.0.1:$PROXY_HEALTHZ_PORT"
  wait_for "the real node Ready" 240 node_ready
  # DaemonSets that select Linux nodes and tolerate every taint (Istio's CNI
  # agent) land here too, where their upstream images cannot be pulled: the
  # demo keeps that one off (e2e/demo). No label can: the kubelet puts
  # `kubernetes.io/os` back at its next status update.
}

# Mount points under a prefix, deepest first.
mounts_under() {
  awk -v p="$1" '$5 == p || index($5, p "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

stop_pid_file() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  [ -z "$pid" ] || stop_pids "$pid"
}

# Stops the node (processes, mounts, chains, cgroups, bridge, kernel
# settings) and removes its Node object when the API server answers; the
# API server's address stays until `down`.
node_stop() {
  # The kubelet first: while it runs it starts again what is killed (CI run
  # 47: a sandbox it restarted during the kills outlived the node, with its
  # shim, in the kubepods cgroups).
  stop_pid_file "$STATE_DIR/pids/kubelet"
  rm -f "$STATE_DIR/pids/kubelet"
  # Then the containers, while containerd still answers: killing a task
  # ends its shim once the task is deleted.
  if running containerd; then
    local t tries
    for tries in 1 2 3 4 5; do
      [ -z "$(node_ctr tasks ls -q 2>/dev/null)" ] && break
      for t in $(node_ctr tasks ls -q 2>/dev/null); do
        node_ctr tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
      done
      sleep 0.5
      for t in $(node_ctr tasks ls -q 2>/dev/null); do node_ctr tasks rm -f "$t" >/dev/null 2>&1 || true; done
    done
  fi
  local name
  for name in kube-proxy containerd; do stop_pid_file "$STATE_DIR/pids/$name"; rm -f "$STATE_DIR/pids/$name"; done
  # Shims left (a task containerd could not delete) by the pid files they wrote.
  if [ -d "$NODE_RUN" ]; then
    local f
    while IFS= read -r f; do stop_pid_file "$f"; done < <(find "$NODE_RUN" -name shim.pid 2>/dev/null)
  fi
  if [ -x "$NODE_BIN_DIR/kube-proxy" ] && command -v iptables >/dev/null; then
    "$NODE_BIN_DIR/kube-proxy" --cleanup >/dev/null 2>&1 || true
  fi
  # What --cleanup leaves (the kubelet's canaries and hint, kube-proxy's
  # firewall chain): the jumps into KUBE-* chains, then the chains. Nothing
  # else on a test machine makes KUBE-* chains.
  local ipt table line chain
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for table in mangle nat filter; do
      while IFS= read -r line; do
        eval "$ipt -t $table -D ${line#-A }" 2>/dev/null || true
      done < <("$ipt-save" -t "$table" 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' || true)
      while IFS= read -r chain; do
        "$ipt" -t "$table" -F "$chain" 2>/dev/null || true
      done < <("$ipt-save" -t "$table" 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p')
      while IFS= read -r chain; do
        "$ipt" -t "$table" -X "$chain" 2>/dev/null || true
      done < <("$ipt-save" -t "$table" 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p')
    done
  done
  # Mounts: container root filesystems, pod volumes, network namespaces.
  local m
  for prefix in "$NODE_RUN" "$NODE_DIR"; do
    while IFS= read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done < <(mounts_under "$prefix")
  done
  if ip link show "$BRIDGE_IF" >/dev/null 2>&1; then ip link del "$BRIDGE_IF"; fi
  # The kubelet's cgroups, empty now that their processes are gone. A
  # container process its shim's end left behind is still in one: the
  # kubepods cgroups hold only this node's containers, so their members
  # are processes this node started.
  local dir pid
  for pid in $(find /sys/fs/cgroup/pids/kubepods /sys/fs/cgroup/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  [ -d /sys/fs/cgroup/pids/kubepods ] && sleep 0.2
  for dir in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$dir" ] && find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  if [ -f "$NODE_DIR/kernel.saved" ]; then
    local key value
    while read -r key value; do echo "$value" >"/proc/sys/$key" 2>/dev/null || true; done <"$NODE_DIR/kernel.saved"
  fi
  # The kubelet links each container's log from /var/log/containers.
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$NODE_DIR/*" -delete 2>/dev/null || true
  fi
  rm -rf "$NODE_RUN" "$NODE_DIR"
  kc delete node "$NODE_NAME" --ignore-not-found --wait=false >/dev/null 2>&1 || true
}

node_down() {
  node_stop
  if ip -4 addr show dev lo | grep -q "inet $HOST_IP/32"; then ip addr del "$HOST_IP/32" dev lo; fi
}

node_status() {
  for name in containerd kubelet kube-proxy; do
    if running "$name"; then echo "$name running (pid $(cat "$STATE_DIR/pids/$name"))"; else echo "$name stopped"; fi
  done
}

# After `down`: fails, naming it, on anything the real node leaves behind.
node_check_clean() {
  local left=()
  for name in containerd kubelet kube-proxy; do
    [ -f "$STATE_DIR/pids/$name" ] && left+=("pid file of $name")
  done
  [ -n "$(mounts_under "$NODE_RUN")$(mounts_under "$NODE_DIR")" ] && left+=("mounts: $(mounts_under "$NODE_RUN") $(mounts_under "$NODE_DIR")")
  ip link show "$BRIDGE_IF" >/dev/null 2>&1 && left+=("interface $BRIDGE_IF")
  ip -o link show type veth 2>/dev/null | grep -q "master $BRIDGE_IF" && left+=("veth on $BRIDGE_IF")
  ip -4 addr show dev lo | grep -q "inet $HOST_IP/" && left+=("address $HOST_IP on lo")
  local ipt
  for ipt in iptables-save ip6tables-save; do
    command -v "$ipt" >/dev/null || continue
    "$ipt" 2>/dev/null | grep -q 'KUBE-' && left+=("$ipt: KUBE-* chains or rules")
  done
  local dir
  for dir in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$dir" ] && left+=("cgroup $dir")
  done
  [ -e "$NODE_RUN" ] && left+=("folder $NODE_RUN")
  [ -e "$NODE_DIR" ] && left+=("folder $NODE_DIR")
  if [ ${#left[@]} -gt 0 ]; then
    printf 'left behind: %s\n' "${left[@]}" >&2
    return 1
  fi
  log "the real node left nothing behind"
}
