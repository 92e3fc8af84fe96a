//! Upstream controllers run as processes on what the operators installed:
//! built by `e2e/upstream-controllers`, run with a kubeconfig holding the
//! token of the ServiceAccount the bundle gives them (so their installed
//! RBAC is what they get), and stopped by their own pid.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject};
use serde_json::Value;

use crate::component::{REMOVAL_TIMEOUT, delete_and_wait, wait_gone};
use crate::operator::{OperatorProcess, stop_child};
use crate::{Serial, repo_root, run_tool};

/// The folder of links, by program name, to what `e2e/upstream-controllers`
/// built for its versions (built on first use; each program is built once
/// per version and Go version, into a folder of its own).
pub fn bin_dir() -> PathBuf {
    let script = repo_root().join("e2e/upstream-controllers");
    let built = Command::new(&script)
        .arg("build")
        .status()
        .expect("e2e/upstream-controllers");
    assert!(built.success(), "e2e/upstream-controllers build failed");
    let out = Command::new(&script)
        .arg("bin-dir")
        .output()
        .expect("e2e/upstream-controllers bin-dir");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Upstream program `name` (`katib-controller`, `training-operator`), built
/// on first use. Fails when the script does not build it: a test started on
/// a missing program would fail later, less clearly.
pub fn program(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "e2e/upstream-controllers builds no {name} ({})",
        path.display()
    );
    path
}

/// The Spark distribution (`bin/`, `jars/`) the Spark operator's image
/// carries and its controller runs `bin/spark-submit` from, fetched by
/// `e2e/upstream-controllers` on first use. Fails when it is missing.
pub fn spark_home() -> PathBuf {
    bin_dir();
    let out = Command::new(repo_root().join("e2e/upstream-controllers"))
        .arg("spark-home")
        .output()
        .expect("e2e/upstream-controllers spark-home");
    let home = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        home.join("bin/spark-submit").is_file(),
        "e2e/upstream-controllers fetched no Spark ({})",
        home.display()
    );
    home
}

/// A folder for one controller run's files (its configuration, kubeconfig
/// and certificate), under the e2e cache rather than the build folder: a
/// clone may live under /tmp, which a controller given a private /tmp (see
/// [`Controller::start`]) no longer sees.
pub fn run_dir(name: &str) -> PathBuf {
    let dir = crate::cache_dir().join("upstream-runs").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("run folder");
    dir
}

/// Writes a kubeconfig for `namespace/account` (a one-hour token from the
/// TokenRequest API) at `path`, for the test cluster's API server.
pub fn service_account_kubeconfig(namespace: &str, account: &str, path: &Path) {
    let token = run_tool(
        "kubectl",
        &["-n", namespace, "create", "token", account, "--duration=1h"],
    );
    assert!(
        token.status.success(),
        "token for {namespace}/{account}: {}",
        String::from_utf8_lossy(&token.stderr)
    );
    let view = run_tool(
        "kubectl",
        &[
            "config",
            "view",
            "--raw",
            "--minify",
            "--flatten",
            "-o",
            "json",
        ],
    );
    let config: Value = serde_json::from_slice(&view.stdout).expect("kubeconfig json");
    let cluster = &config["clusters"][0]["cluster"];
    let config = serde_json::json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "test", "cluster": cluster}],
        "users": [{"name": account, "user": {"token": String::from_utf8_lossy(&token.stdout).trim()}}],
        "contexts": [{"name": "sa", "context": {"cluster": "test", "user": account, "namespace": namespace}}],
    });
    std::fs::write(path, config.to_string()).expect("write kubeconfig");
}

/// A self-signed serving certificate (`tls.crt`, `tls.key`) in `dir`, for a
/// webhook server that will not start without one (nothing calls it: the
/// test cluster's admission webhooks are off).
pub fn serving_certificate(dir: &Path) {
    let ok = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost"])
        .arg("-keyout")
        .arg(dir.join("tls.key"))
        .arg("-out")
        .arg(dir.join("tls.crt"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "openssl could not make a certificate");
}

/// What an installed Deployment's container runs with: its arguments, its
/// environment, the files its ConfigMap volumes mount (by mount path, read
/// from the live ConfigMaps) and the folders its Secret volumes mount (by
/// mount path, the Secret's name).
pub struct Installed {
    /// The container's `args` (its `command` is the program itself).
    pub args: Vec<String>,
    /// The container's `env`, with the pod's namespace and name resolved.
    pub env: Vec<(String, String)>,
    /// Mount path -> the ConfigMap key's text, for `subPath` mounts of a
    /// ConfigMap volume: the configuration files the program reads.
    pub files: BTreeMap<String, String>,
    /// Mount path -> Secret name, for Secret volumes.
    pub secrets: BTreeMap<String, String>,
    /// The mount paths of emptyDir volumes: folders the program writes,
    /// empty when it starts.
    pub empty_dirs: Vec<String>,
    /// The pod's ServiceAccount.
    pub service_account: String,
}

/// Reads what container `container` of the live Deployment `ns/name` runs
/// with, resolving its ConfigMap-mounted files from the live ConfigMaps:
/// the run then uses what the operator installed, not a copy of upstream's
/// defaults. A mount or variable this cannot resolve fails the test rather
/// than being dropped, which would run the program on something else.
pub async fn installed(client: &kube::Client, ns: &str, name: &str, container: &str) -> Installed {
    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("Deployment {ns}/{name}: {e}"));
    let pod = d
        .spec
        .and_then(|s| s.template.spec)
        .unwrap_or_else(|| panic!("Deployment {ns}/{name} has no pod template"));
    let c = pod
        .containers
        .iter()
        .find(|c| c.name == container)
        .unwrap_or_else(|| panic!("Deployment {ns}/{name} has no container {container}"));
    let volumes = pod.volumes.clone().unwrap_or_default();
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let mut files = BTreeMap::new();
    let mut secrets = BTreeMap::new();
    let mut empty_dirs = Vec::new();
    for m in c.volume_mounts.clone().unwrap_or_default() {
        let Some(v) = volumes.iter().find(|v| v.name == m.name) else {
            panic!("{name}: mount {} names no volume", m.mount_path)
        };
        if let Some(cm) = &v.config_map {
            let key = m.sub_path.clone().unwrap_or_else(|| {
                panic!("{name}: {} mounts a whole ConfigMap folder", m.mount_path)
            });
            let data = configs
                .get(&cm.name)
                .await
                .unwrap_or_else(|e| panic!("ConfigMap {ns}/{}: {e}", cm.name))
                .data
                .unwrap_or_default();
            let text = data
                .get(&key)
                .unwrap_or_else(|| panic!("ConfigMap {ns}/{} has no key {key}", cm.name));
            files.insert(m.mount_path.clone(), text.clone());
        } else if let Some(secret) = &v.secret {
            secrets.insert(
                m.mount_path.clone(),
                secret.secret_name.clone().unwrap_or_default(),
            );
        } else if v.empty_dir.is_some() {
            empty_dirs.push(m.mount_path.clone());
        } else {
            panic!(
                "{name}: volume {} is neither a ConfigMap, a Secret nor an emptyDir",
                v.name
            )
        }
    }
    let env = c
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            let value = match (e.value, e.value_from) {
                (Some(v), None) => v,
                (None, Some(from))
                    if from.field_ref.as_ref().map(|f| f.field_path.as_str())
                        == Some("metadata.namespace") =>
                {
                    ns.to_string()
                }
                // A pod of the Deployment would have a generated name; the
                // process gets one no pod has.
                (None, Some(from))
                    if from.field_ref.as_ref().map(|f| f.field_path.as_str())
                        == Some("metadata.name") =>
                {
                    format!("{name}-process")
                }
                (None, None) => String::new(),
                (_, from) => panic!("{name}: env {} from {from:?} is not resolved here", e.name),
            };
            (e.name, value)
        })
        .collect();
    Installed {
        args: c.args.clone().unwrap_or_default(),
        env,
        files,
        secrets,
        empty_dirs,
        service_account: pod.service_account_name.clone().unwrap_or_default(),
    }
}

impl Installed {
    /// The container's environment with `KUBECONFIG` added: what a
    /// program run here as the installed ServiceAccount (its token in
    /// `kubeconfig`) starts with.
    pub fn env_with_kubeconfig(&self, kubeconfig: &Path) -> Vec<(&str, String)> {
        let mut env: Vec<(&str, String)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        env.push(("KUBECONFIG", kubeconfig.display().to_string()));
        env
    }

    /// Writes each mounted file (as `edit` leaves it: listener ports moved)
    /// into `dir` and returns the arguments with each mount path replaced
    /// by its file there (`--config=/controller_manager_config.yaml`).
    pub fn args_with_files(&self, dir: &Path, edit: impl Fn(&str, &str) -> String) -> Vec<String> {
        let mut args = self.args.clone();
        for (mount, text) in &self.files {
            let local = dir.join(mount.trim_start_matches('/').replace('/', "_"));
            std::fs::write(&local, edit(mount, text)).expect("write a mounted file");
            let local = local.display().to_string();
            for a in &mut args {
                *a = a.replace(mount.as_str(), &local);
            }
        }
        args
    }
}

/// A folder a controller sees in a private mount namespace: the files of
/// `from` copied to `at`, on a tmpfs mounted at `tmpfs` (which hides what
/// the host has there, for that process only).
pub struct PrivateFolder<'a> {
    /// The folder on the host whose files are copied.
    pub from: &'a Path,
    /// Where the tmpfs goes (`/tmp`, `/run`): an existing folder.
    pub tmpfs: String,
    /// Where the files appear, under `tmpfs`.
    pub at: String,
}

impl<'a> PrivateFolder<'a> {
    /// The ServiceAccount folder a pod has
    /// (`/var/run/secrets/kubernetes.io/serviceaccount`), holding only its
    /// `namespace` file, written into `dir`: controller-runtime's leader
    /// election and the certificate rotators of Trainer and JobSet take
    /// their namespace from it (with no such file they fall back to
    /// `kubeflow-system` / `jobset-system`, where nothing was installed).
    /// The credentials stay the kubeconfig's (KUBECONFIG comes first).
    pub fn service_account_namespace(dir: &'a Path, namespace: &str) -> Self {
        std::fs::create_dir_all(dir).expect("folder");
        std::fs::write(dir.join("namespace"), namespace).expect("namespace file");
        // /var/run is a link to /run on the machines this runs on; the
        // tmpfs goes where the link leads, so the path resolves into it.
        let run = std::fs::canonicalize("/var/run")
            .unwrap_or_else(|_| PathBuf::from("/var/run"))
            .display()
            .to_string();
        PrivateFolder {
            from: dir,
            at: format!("{run}/secrets/kubernetes.io/serviceaccount"),
            tmpfs: run,
        }
    }

    /// `from`'s files at `/tmp/<name>`, on a private /tmp.
    pub fn tmp(from: &'a Path, name: &str) -> Self {
        PrivateFolder {
            from,
            tmpfs: "/tmp".to_string(),
            at: format!("/tmp/{name}"),
        }
    }
}

/// An upstream controller's process, stopped when dropped, with the relays
/// that carry its API requests when it runs in a network of its own.
pub struct Controller {
    child: Child,
    log: PathBuf,
    /// The relay on the host side (a unix socket to the API server).
    host_relay: Option<Child>,
    /// The file holding the pid of the relay inside its network.
    inner_relay: Option<PathBuf>,
}

/// The API server's `host:port`, as the test kubeconfig names it (what a
/// pod's `KUBERNETES_SERVICE_HOST` and `_PORT` would say).
pub fn api_server_address() -> String {
    let view = run_tool(
        "kubectl",
        &[
            "config",
            "view",
            "--raw",
            "--minify",
            "--flatten",
            "-o",
            "json",
        ],
    );
    let config: Value = serde_json::from_slice(&view.stdout).expect("kubeconfig json");
    let server = config["clusters"][0]["cluster"]["server"]
        .as_str()
        .expect("the kubeconfig's server")
        .to_string();
    server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string()
}

impl Controller {
    /// Starts `program` with `args` and `env` (KUBECONFIG among them), its
    /// output in `log`. `private_tmp`: a controller that reads a fixed path
    /// under /tmp (Katib's webhook certificates) gets a /tmp of its own, a
    /// tmpfs in a private mount namespace that goes with the process, with
    /// the files of that folder copied to `/tmp/<name>` (read before the
    /// tmpfs hides /tmp, wherever the folder is).
    pub fn start(
        program: &Path,
        args: &[String],
        env: &[(&str, String)],
        private_tmp: Option<(&Path, &str)>,
        log: PathBuf,
    ) -> Self {
        let folders: Vec<PrivateFolder> = private_tmp
            .map(|(from, name)| PrivateFolder::tmp(from, name))
            .into_iter()
            .collect();
        Self::start_with(program, args, env, &folders, log)
    }

    /// [`Controller::start`] with any number of private folders: each
    /// tmpfs mounted once, in a private mount namespace that goes with the
    /// process, every source read before any tmpfs can hide it.
    pub fn start_with(
        program: &Path,
        args: &[String],
        env: &[(&str, String)],
        folders: &[PrivateFolder],
        log: PathBuf,
    ) -> Self {
        Self::launch(program, args, env, folders, log, false)
    }

    /// [`Controller::start_with`] in a network namespace of its own, for a
    /// program that listens on every interface at a port no flag moves
    /// (KServe's webhook server): there it has only a loopback interface,
    /// so nothing it opens is reachable from outside the machine or from
    /// the host. Its requests to the API server reach it through two
    /// relays (socat): inside, the API server's loopback address, relayed
    /// to a unix socket in the run folder; outside, that socket relayed to
    /// the API server. The kubeconfig stays as it is.
    pub fn start_isolated(
        program: &Path,
        args: &[String],
        env: &[(&str, String)],
        folders: &[PrivateFolder],
        log: PathBuf,
    ) -> Self {
        Self::launch(program, args, env, folders, log, true)
    }

    fn launch(
        program: &Path,
        args: &[String],
        env: &[(&str, String)],
        folders: &[PrivateFolder],
        log: PathBuf,
        isolated: bool,
    ) -> Self {
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let (mut host_relay, mut inner_relay) = (None, None);
        let mut script = String::from("set -e\n");
        if isolated {
            let dir = log.parent().expect("the log's folder").to_path_buf();
            let socket = dir.join("api.sock");
            let pid_file = dir.join("relay.pid");
            let _ = std::fs::remove_file(&socket);
            let api = api_server_address();
            let relay_log = std::fs::File::create(dir.join("relay.log")).expect("relay log");
            host_relay = Some(
                Command::new("socat")
                    .arg(format!("UNIX-LISTEN:{},fork,mode=600", socket.display()))
                    .arg(format!("TCP:{api}"))
                    .stdout(Stdio::null())
                    .stderr(relay_log)
                    .spawn()
                    .expect("socat (Debian's socat)"),
            );
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !socket.exists() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the API server relay did not start"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            let (host, port) = api.rsplit_once(':').expect("host:port");
            // The inner relay listens where the kubeconfig says the API
            // server is (loopback, or the host-only address when the real
            // node runs: given to the namespace's own loopback interface).
            // It starts before any tmpfs hides a folder, and the program
            // only once it accepts connections.
            if host != "127.0.0.1" {
                script += &format!("ip addr add {host}/32 dev lo\n");
            }
            script += &format!(
                "ip link set lo up\n\
                 socat TCP-LISTEN:{port},bind={host},reuseaddr,fork UNIX-CONNECT:'{sock}' &\n\
                 echo $! > '{pid}'\n\
                 i=0; until socat -u OPEN:/dev/null TCP:{host}:{port} 2>/dev/null; do \
                 i=$((i+1)); [ $i -lt 200 ] || exit 1; sleep 0.05; done\n",
                sock = socket.display(),
                pid = pid_file.display(),
            );
            inner_relay = Some(pid_file);
        }
        // Folder i's source, tmpfs and target are positional arguments
        // 3i+1..3i+3 of the script.
        for i in 0..folders.len() {
            script += &format!(
                "f{i}=$(tar -C \"${{{}}}\" -cf - . | base64 -w0)\n",
                3 * i + 1
            );
        }
        let mut mounted: Vec<&str> = Vec::new();
        for (i, f) in folders.iter().enumerate() {
            if !mounted.contains(&f.tmpfs.as_str()) {
                script += &format!(
                    "mount -t tmpfs -o size=16m,mode=1777 tmpfs \"${{{}}}\"\n",
                    3 * i + 2
                );
                mounted.push(&f.tmpfs);
            }
            script += &format!(
                "mkdir -p \"${{{0}}}\"; printf %s \"$f{i}\" | base64 -d | tar -C \"${{{0}}}\" -xf -\n",
                3 * i + 3
            );
        }
        script += &format!("shift {}; exec \"$@\"", 3 * folders.len());
        let mut cmd = if folders.is_empty() && !isolated {
            let mut c = Command::new(program);
            c.args(args);
            c
        } else {
            // unshare execs the shell, which execs the controller: one
            // pid from start to end, the one recorded here.
            let mut c = Command::new("unshare");
            if isolated {
                c.arg("--net");
            }
            c.args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg(script)
                .arg("private-folders");
            for f in folders {
                c.arg(f.from).arg(&f.tmpfs).arg(&f.at);
            }
            c.arg(program).args(args);
            c
        };
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        Controller {
            child,
            log,
            host_relay,
            inner_relay,
        }
    }

    /// What it has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Fails when its log is missing or empty (a check of an unwritten log
    /// proves nothing) or has any "forbidden" in it: an API request its
    /// installed RBAC refused, whatever the program then did about it.
    pub fn assert_nothing_forbidden(&self, what: &str) {
        let text = std::fs::read_to_string(&self.log)
            .unwrap_or_else(|e| panic!("{what}'s log {}: {e}", self.log.display()));
        assert!(
            !text.trim().is_empty(),
            "{what}'s log {} is empty",
            self.log.display()
        );
        let refused: Vec<&str> = text
            .lines()
            .filter(|l| l.to_ascii_lowercase().contains("forbidden"))
            .collect();
        assert!(
            refused.is_empty(),
            "{what} was refused by its installed RBAC:\n{}",
            refused.join("\n")
        );
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        stop_child(&mut self.child);
        // The relay inside the network namespace, by the pid it recorded
        // (its namespace goes with it).
        if let Some(pid) = self
            .inner_relay
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        if let Some(relay) = self.host_relay.as_mut() {
            stop_child(relay);
        }
    }
}

/// What must hold while upstream controllers work on what an operator
/// installed: no controller is refused anything by its installed RBAC, and
/// the operator writes nothing (the controllers' certificates, caBundles
/// and objects are theirs).
pub struct Quiet<'a> {
    /// The component's operator.
    pub operator: &'a OperatorProcess,
    /// Its write count when the controllers started
    /// ([`OperatorProcess::settled_writes`]).
    pub writes: f64,
    /// Each controller, with what the messages call it.
    pub controllers: &'a [(&'a Controller, &'a str)],
}

impl Quiet<'_> {
    /// Fails when a controller was refused anything or the operator wrote;
    /// `message` says when. The write count is read so that a missing
    /// metrics endpoint fails rather than passing for no writes.
    pub async fn assert(&self, message: &str) {
        for (controller, what) in self.controllers {
            controller.assert_nothing_forbidden(what);
        }
        assert_eq!(self.operator.writes().await, self.writes, "{message}");
    }
}

/// A user's object the controllers worked on.
pub struct UserObject<'a> {
    /// Its API.
    pub api: &'a Api<DynamicObject>,
    /// Its name.
    pub name: &'a str,
    /// Its kind, as the messages name it (`TrainJob`).
    pub kind: &'a str,
}

impl UserObject<'_> {
    /// Deletes it in the background, as a user would, and waits until it
    /// is gone: what the controllers made for it goes after it, by its
    /// owner.
    pub async fn delete(&self, timeout: Duration) {
        self.api
            .delete(self.name, &DeleteParams::background())
            .await
            .unwrap_or_else(|e| panic!("delete the {}: {e}", self.kind));
        wait_gone(self.api, self.name, timeout).await;
    }
}

/// The end the real-controller tests share: the user's object goes while
/// the controllers run, with nothing refused and nothing written
/// meanwhile; then the component (its resource `kubeflow`, of kind
/// `component_kind`) goes while they still run, as a user removes it: what
/// the removal waits on (a finalizer of theirs) they must still be allowed
/// to finish.
pub async fn delete_object_then_component(
    phases: &mut Serial,
    object: UserObject<'_>,
    quiet: &Quiet<'_>,
    components: &Api<DynamicObject>,
    component_kind: &str,
) {
    object.delete(Duration::from_secs(60)).await;
    quiet
        .assert(&format!("nor while the {} went", object.kind))
        .await;
    phases.phase(&format!("the {} deleted", object.kind));
    delete_and_wait(components, "kubeflow", REMOVAL_TIMEOUT).await;
    phases.phase(&format!("{component_kind} removed"));
}
