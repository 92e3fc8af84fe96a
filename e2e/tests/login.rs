//! A person logs in through what the Auth operator installs, with the real
//! oauth2-proxy (v7.15.2, Kubeflow 26.03.1's, built from the Go module proxy
//! by `e2e/login-tools`) run as a process with the installed Deployment's
//! arguments, environment (the generated cookie secret, the client secret
//! from the Secret the Auth resource names) and configuration file, against
//! an external OpenID Connect provider (`e2e/login`: a provider on loopback
//! over TLS). The test follows the browser's redirects: the person of an
//! allowed domain gets the session cookie, and the check Istio makes for
//! every request (`/oauth2/auth`) answers with their email and an ID token
//! whose issuer is the one the installed RequestAuthentication trusts and
//! whose `email` claim it turns into `kubeflow-userid`. A person of another
//! domain is turned away, a request without the cookie too, and the Auth
//! operator writes nothing meanwhile.
//!
//! dex itself is not run: its module (v2, with no `/v2` module path) is not
//! served by the Go module proxy here.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kubeflow_e2e::component::{component_api, delete_and_wait, wait_condition};
use kubeflow_e2e::login::prepare_auth;
use kubeflow_e2e::operator::{OperatorProcess, free_port};
use kubeflow_e2e::{TestNamespace, apply_yaml, repo_root, wait_for};
use serde_json::{Value, json};

const OPERATOR: &str = "kubeflow-auth-operator";
const TIMEOUT: Duration = Duration::from_secs(90);
const CLIENT_ID: &str = "kubeflow";

/// A child process killed when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs a program of this machine (curl, python3, the build script).
fn output(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

/// The folder `e2e/login-tools` builds oauth2-proxy and the provider into.
fn tools() -> PathBuf {
    let script = repo_root().join("e2e/login-tools");
    let built = Command::new(&script)
        .arg("build")
        .status()
        .expect("e2e/login-tools");
    assert!(built.success(), "e2e/login-tools build failed");
    let out = output(&script.display().to_string(), &["bin-dir"]);
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The provider, logging in `people` in order; its issuer URL.
fn provider(bin: &Path, secret_file: &Path, people: &[&str]) -> (Running, String) {
    let mut cmd = Command::new(bin.join("mock-idp"));
    cmd.args(["-client-id", CLIENT_ID, "-client-secret-file"])
        .arg(secret_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    for p in people {
        cmd.args(["-user", p]);
    }
    let mut child = cmd.spawn().expect("mock-idp");
    let stdout = child.stdout.take().expect("stdout");
    let running = Running(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("issuer line");
    let issuer = line
        .trim()
        .strip_prefix("issuer=")
        .unwrap_or_else(|| panic!("mock-idp said {line:?}"))
        .to_string();
    (running, issuer)
}

/// A value a container's env entry names (literal, Secret or ConfigMap key).
async fn resolve(client: &kube::Client, ns: &str, entry: &Value) -> String {
    if let Some(v) = entry["value"].as_str() {
        return v.to_string();
    }
    let from = &entry["valueFrom"];
    if let Some(r) = from.get("secretKeyRef") {
        let s = Api::<Secret>::namespaced(client.clone(), ns)
            .get(r["name"].as_str().expect("name"))
            .await
            .expect("the env's Secret");
        let bytes = s.data.unwrap_or_default()[r["key"].as_str().expect("key")]
            .0
            .clone();
        return String::from_utf8(bytes).expect("text");
    }
    if let Some(r) = from.get("configMapKeyRef") {
        let c = Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get(r["name"].as_str().expect("name"))
            .await
            .expect("the env's ConfigMap");
        return c.data.unwrap_or_default()[r["key"].as_str().expect("key")].clone();
    }
    panic!("an env entry of no kind the test knows: {entry}")
}

/// oauth2-proxy as installed: the Deployment's arguments (listening on a
/// loopback port, reading the installed configuration from `dir`) and
/// environment. Returns it and its address.
async fn oauth2_proxy(client: &kube::Client, bin: &Path, dir: &Path) -> (Running, String) {
    let ns = "oauth2-proxy";
    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get("oauth2-proxy")
        .await
        .expect("the installed oauth2-proxy");
    let pod =
        serde_json::to_value(d.spec.expect("spec").template.spec.expect("pod")).expect("json");
    let container = &pod["containers"][0];
    // Every file the pod mounts from a ConfigMap (the configuration, the
    // sign-in page's logo), under `dir` at its mount path; paths that name
    // a mount point there instead.
    let mut mounts: Vec<(String, PathBuf)> = Vec::new();
    for m in container["volumeMounts"].as_array().into_iter().flatten() {
        let volume = pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == m["name"])
            .expect("the mount's volume");
        let Some(name) = volume["configMap"]["name"].as_str() else {
            continue;
        };
        let data = Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get(name)
            .await
            .expect("a mounted ConfigMap")
            .data
            .unwrap_or_default();
        let at = m["mountPath"].as_str().expect("mountPath").to_string();
        let local = dir.join(at.trim_start_matches('/'));
        match m["subPath"].as_str() {
            Some(key) => {
                std::fs::create_dir_all(local.parent().expect("parent")).expect("dir");
                std::fs::write(&local, &data[key]).expect("write");
            }
            None => {
                std::fs::create_dir_all(&local).expect("dir");
                for (key, text) in &data {
                    std::fs::write(local.join(key), text).expect("write");
                }
            }
        }
        mounts.push((at, local));
    }
    let relocate = |text: &str| {
        mounts.iter().fold(text.to_string(), |t, (at, local)| {
            t.replace(at.as_str(), &local.display().to_string())
        })
    };
    for (_, local) in &mounts {
        if local.is_file() {
            let text = std::fs::read_to_string(local).expect("read");
            std::fs::write(local, relocate(&text)).expect("write");
        }
    }
    let address = format!("127.0.0.1:{}", free_port());
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| {
            let a = a.as_str().expect("arg");
            if a.starts_with("--http-address=") {
                format!("--http-address={address}")
            } else {
                relocate(a)
            }
        })
        .collect();
    let mut env = BTreeMap::new();
    for e in container["env"].as_array().into_iter().flatten() {
        env.insert(
            e["name"].as_str().expect("env name").to_string(),
            resolve(client, ns, e).await,
        );
    }
    assert_eq!(env["OAUTH2_PROXY_CLIENT_ID"], CLIENT_ID);
    let log = std::fs::File::create(dir.join("oauth2-proxy.log")).expect("log");
    let child = Command::new(bin.join("oauth2-proxy"))
        .args(&args)
        .env_clear()
        .envs(&env)
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("oauth2-proxy");
    let running = Running(child);
    let url = format!("http://{address}");
    wait_for("oauth2-proxy to answer", TIMEOUT, || async {
        let (code, _, _) = curl(&[&format!("{url}/ping")]);
        (code == 200).then_some(())
    })
    .await;
    (running, url)
}

/// curl (redirects followed, the provider's self-signed certificate taken,
/// extra `args`): the final status, the last response's headers, the URL
/// it ended at.
fn curl(args: &[&str]) -> (u16, String, String) {
    let mut all = vec![
        "-s",
        "-k",
        "-L",
        "--max-redirs",
        "10",
        "-o",
        "/dev/null",
        "-D",
        "-",
        "-w",
        "\n%{http_code} %{url_effective}",
    ];
    all.extend_from_slice(args);
    let out = output("curl", &all);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (headers, last) = text.rsplit_once('\n').unwrap_or(("", ""));
    let (code, url) = last.split_once(' ').unwrap_or(("0", ""));
    // Headers of the last response only (each redirect prints its own).
    let last_headers = headers
        .rsplit("HTTP/")
        .next()
        .unwrap_or_default()
        .to_string();
    (code.parse().unwrap_or(0), last_headers, url.to_string())
}

/// A header's value (names are case-insensitive).
fn header(headers: &str, name: &str) -> Option<String> {
    headers.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

/// A JWT's claims (the token's signature is the provider's; oauth2-proxy
/// verified it against the provider's keys before handing it out).
fn claims(token: &str) -> Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).expect("a JWT");
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .expect("base64url");
    serde_json::from_slice(&json).expect("claims")
}

/// A login from `/oauth2/start` through the provider's redirects, cookies
/// kept in `jar`: the final status and the URL it ended at.
fn log_in(url: &str, jar: &Path) -> (u16, String) {
    let jar = jar.display().to_string();
    let (code, _, landed) = curl(&[
        "-c",
        &jar,
        "-b",
        &jar,
        &format!("{url}/oauth2/start?rd=%2Fjupyter%2F"),
    ]);
    (code, landed)
}

#[tokio::test]
async fn a_person_logs_in_through_the_installed_oauth2_proxy_and_others_are_turned_away() {
    let bin = tools();
    let (client, _g) = prepare_auth().await;
    let ns = TestNamespace::new(&client, "login").await;
    let dir = std::env::temp_dir().join(format!("kubeflow-login-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");

    // The provider's client secret, random, in the Secret the Auth
    // resource names (and a file the provider reads it from).
    let secret_value = kubeflow_operator::secrets::random_hex(24).expect("random");
    std::fs::write(dir.join("client-secret"), &secret_value).expect("write");
    apply_yaml(
        &client,
        &ns.name,
        &format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: idp}}\nstringData: {{client-secret: \"{secret_value}\"}}\n"),
    )
    .await;
    let (_idp, issuer) = provider(
        &bin,
        &dir.join("client-secret"),
        &[
            "alice@example.com:ml-team",
            "mallory@elsewhere.test:ml-team",
        ],
    );
    assert!(issuer.starts_with("https://127.0.0.1:"), "{issuer}");

    let op = OperatorProcess::start(OPERATOR, &[]);
    let auths = component_api(&client, &ns.name, "Auth");
    apply_yaml(
        &client,
        &ns.name,
        &format!("apiVersion: components.kubeflow.org/v1alpha1\nkind: Auth\nmetadata: {{name: kubeflow}}\nspec:\n  version: v7.15.2\n  oidc: {{issuerUrl: \"{issuer}\", clientId: {CLIENT_ID}, clientSecret: {{name: idp, key: client-secret}}}}\n  allowedEmailDomains: [example.com]\n"),
    )
    .await;
    wait_condition(&auths, "kubeflow", "Ready", "True", TIMEOUT).await;
    let before = op.settled_writes().await;

    // The token Istio validates at the gateway: the installed
    // RequestAuthentication trusts this issuer and turns `email` into
    // kubeflow-userid.
    let ras = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("security.istio.io", "v1beta1", "RequestAuthentication"),
            "requestauthentications",
        ),
    );
    let ra = ras
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .find(|r| r.data["spec"]["jwtRules"][0]["issuer"] == json!(issuer))
        .expect("a RequestAuthentication trusting the provider");
    let to_headers = &ra.data["spec"]["jwtRules"][0]["outputClaimToHeaders"];
    assert!(
        to_headers
            .as_array()
            .into_iter()
            .flatten()
            .any(|h| h["claim"] == "email" && h["header"] == "kubeflow-userid"),
        "{to_headers}"
    );

    let (_proxy, url) = oauth2_proxy(&client, &bin, &dir).await;

    // Not logged in: the check Istio makes answers 401, and a browser is
    // sent to the provider.
    let (code, _, _) = curl(&[&format!("{url}/oauth2/auth")]);
    assert_eq!(code, 401, "no session, no entry");

    // Alice: through the provider's redirects and back with a session.
    let alice = dir.join("alice.jar");
    let jar = alice.display().to_string();
    let (code, landed) = log_in(&url, &alice);
    let log = || std::fs::read_to_string(dir.join("oauth2-proxy.log")).unwrap_or_default();
    assert_eq!(code, 200, "alice's login ended at {landed}: {}", log());
    assert!(
        landed.starts_with(&url) && landed.ends_with("/jupyter/"),
        "{landed}"
    );
    let (code, headers, _) = curl(&["-b", &jar, &format!("{url}/oauth2/auth")]);
    assert_eq!(code, 202, "{headers}");
    assert_eq!(
        header(&headers, "X-Auth-Request-Email").as_deref(),
        Some("alice@example.com")
    );
    let bearer = header(&headers, "Authorization").expect("the ID token for Istio");
    let token = bearer.strip_prefix("Bearer ").expect("a bearer token");
    let c = claims(token);
    assert_eq!(c["iss"], json!(issuer));
    assert_eq!(c["email"], "alice@example.com", "kubeflow-userid");
    // `aud` is a string or a list (this provider lists it).
    assert!(
        c["aud"] == CLIENT_ID
            || c["aud"]
                .as_array()
                .is_some_and(|a| a.contains(&json!(CLIENT_ID))),
        "{c}"
    );

    // Mallory, of a domain not allowed: the provider vouches for her, the
    // proxy turns her away and gives her no session.
    let mallory = dir.join("mallory.jar");
    let jar = mallory.display().to_string();
    let (code, _) = log_in(&url, &mallory);
    assert_eq!(code, 403, "{}", log());
    let (code, _, _) = curl(&["-b", &jar, &format!("{url}/oauth2/auth")]);
    assert_eq!(code, 401);

    // Nothing of ours moved while oauth2-proxy ran.
    assert_eq!(
        op.writes().await,
        before,
        "the Auth operator wrote meanwhile"
    );

    delete_and_wait(&auths, "kubeflow", TIMEOUT).await;
    drop(op);
    ns.delete().await;
    let _ = std::fs::remove_dir_all(&dir);
}
