//! Upstream controllers run as processes on what the operators installed:
//! built by `e2e/upstream-controllers`, run with a kubeconfig holding the
//! token of the ServiceAccount the bundle gives them (so their installed
//! RBAC is what they get), and stopped by their own pid.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::operator::stop_child;
use crate::{repo_root, run_tool};

/// The folder `e2e/upstream-controllers` builds into (built on first use).
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
        &["config", "view", "--raw", "--minify", "-o", "json"],
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

/// An upstream controller's process, stopped when dropped.
pub struct Controller {
    child: Child,
    log: PathBuf,
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
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut cmd = match private_tmp {
            Some((from, name)) => {
                // unshare execs the shell, which execs the controller: one
                // pid from start to end, the one recorded here.
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private", "sh", "-c"])
                    .arg(
                        "set -e; files=$(tar -C \"$1\" -cf - . | base64 -w0); \
                         mount -t tmpfs -o size=16m,mode=1777 tmpfs /tmp; mkdir -p \"/tmp/$2\"; \
                         printf %s \"$files\" | base64 -d | tar -C \"/tmp/$2\" -xf -; \
                         shift 2; exec \"$@\"",
                    )
                    .arg("private-tmp")
                    .arg(from)
                    .arg(name)
                    .arg(program)
                    .args(args);
                c
            }
            None => {
                let mut c = Command::new(program);
                c.args(args);
                c
            }
        };
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        Controller { child, log }
    }

    /// What it has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        stop_child(&mut self.child);
    }
}
