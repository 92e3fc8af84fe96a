//! The OLM bundle (`bundle/`, written by `bundle/generate`):
//! - it names every image: the operators' and every image every supported
//!   release runs (`kubeflow-meta-operator images --version all`), so a
//!   disconnected mirror of the bundle takes them all;
//! - it grants each operator exactly the rules the chart grants it;
//! - OLM itself (its olm and catalog controllers, built from the Go module
//!   proxy by `e2e/olm build`) installs it on the test cluster from a
//!   file-based catalog, through a Subscription, to a Succeeded CSV.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kubeflow_e2e::component::prepare;
use kubeflow_e2e::demo::COMPONENTS;
use kubeflow_e2e::operator::{binary, free_port, stop_child};
use kubeflow_e2e::{
    TestNamespace, apply_yaml, kubeconfig_path, manifests_dir, repo_root, run_tool, wait_for,
};
use serde_json::Value;

fn yaml_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn csv() -> Value {
    yaml_file(&repo_root().join("bundle/manifests/kubeflow-operator.clusterserviceversion.yaml"))
}

fn strategy(csv: &Value) -> &Value {
    &csv["spec"]["install"]["spec"]
}

fn rules_of<'a>(list: &'a Value, service_account: &str) -> &'a Value {
    list.as_array()
        .into_iter()
        .flatten()
        .find(|p| p["serviceAccountName"] == service_account)
        .map(|p| &p["rules"])
        .unwrap_or_else(|| panic!("the CSV grants {service_account} nothing"))
}

fn list(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

#[test]
fn related_images_are_the_operators_and_every_releases_images() {
    let csv = csv();
    let out = Command::new(binary("kubeflow-meta-operator"))
        .args(["images", "--version", "all", "--manifests-dir"])
        .arg(manifests_dir())
        .output()
        .unwrap_or_else(|e| panic!("cannot run the meta-operator: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut expected: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    // Four releases' worth: a short list would mean a release went missing.
    assert!(
        expected.len() > 100,
        "only {} release images",
        expected.len()
    );
    let deployments = list(&strategy(&csv)["deployments"]);
    assert_eq!(deployments.len(), COMPONENTS.len());
    for d in &deployments {
        for c in list(&d["spec"]["template"]["spec"]["containers"]) {
            expected.insert(c["image"].as_str().unwrap_or_default().to_string());
        }
    }
    let related: Vec<String> = list(&csv["spec"]["relatedImages"])
        .iter()
        .map(|r| r["image"].as_str().unwrap_or_default().to_string())
        .collect();
    let related_set: BTreeSet<String> = related.iter().cloned().collect();
    assert_eq!(related.len(), related_set.len(), "an image is listed twice");
    let missing: Vec<_> = expected.difference(&related_set).collect();
    let extra: Vec<_> = related_set.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "relatedImages lacks {missing:?} and has extra {extra:?}"
    );
}

#[test]
fn each_operator_gets_the_rules_the_chart_grants_it() {
    let csv = csv();
    for &component in COMPONENTS.iter() {
        let sa = format!("kubeflow-{component}-operator");
        let rules =
            yaml_file(&repo_root().join(format!("charts/kubeflow/files/rbac/{component}.yaml")));
        let mut cluster = list(&rules["cluster"]);
        // Rules on objects named after a namespace, once per allowed one
        // (the chart's defaults, which the bundle is rendered with).
        for r in list(&rules["clusterPerNamespace"]) {
            for ns in kubeflow_e2e::component::chart_namespaces() {
                let mut r = r.clone();
                if let Some(names) = r["resourceNames"].as_array_mut() {
                    for n in names {
                        *n = n
                            .as_str()
                            .unwrap_or_default()
                            .replace("{namespace}", ns)
                            .into();
                    }
                }
                cluster.push(r);
            }
        }
        assert_eq!(
            list(rules_of(&strategy(&csv)["clusterPermissions"], &sa)),
            cluster,
            "{sa}: the CSV's cluster rules differ from the chart's"
        );
        // The Roles the chart puts in each allowed namespace, then the leader
        // Lease's Role (the chart's, and create: OLM cannot create the Lease).
        let mut namespaced = list(&rules["namespaced"]);
        namespaced.push(serde_json::json!({
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [sa],
            "verbs": ["get", "list", "watch", "patch"],
        }));
        namespaced.push(serde_json::json!({
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["create"],
        }));
        assert_eq!(
            list(rules_of(&strategy(&csv)["permissions"], &sa)),
            namespaced,
            "{sa}: the CSV's namespaced rules differ from the chart's"
        );
    }
}

/// A process of OLM's, stopped by its own pid.
struct Proc(Child, PathBuf);

impl Proc {
    fn start(bin: &Path, args: &[&str], log: PathBuf) -> Proc {
        let file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = file.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let child = Command::new(bin)
            .args(args)
            .env("KUBECONFIG", kubeconfig_path())
            // OLM's client refuses unlabelled creates when CI is set (its
            // own test mode), which is not what a cluster runs.
            .env_remove("CI")
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        Proc(child, log)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.1).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        stop_child(&mut self.0);
    }
}

fn olm_script(arg: &str) -> String {
    let out = Command::new(repo_root().join("e2e/olm"))
        .arg(arg)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run e2e/olm {arg}: {e}"));
    assert!(out.status.success(), "e2e/olm {arg} failed");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

async fn api(client: &kube::Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = kube::core::GroupVersionKind::gvk("operators.coreos.com", "v1alpha1", kind);
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("{kind} is not served: {e}"));
    Api::namespaced_with(client.clone(), ns, &ar)
}

#[tokio::test]
async fn olm_installs_the_bundle_from_a_file_based_catalog() {
    // OLM's programs, built once and cached (the first build takes minutes).
    olm_script("build");
    let bin = PathBuf::from(olm_script("bin-dir"));
    let crds = olm_script("crds");
    let (client, _g) = prepare(&[], &[]).await;

    let out = run_tool("kubectl", &["apply", "--server-side", "-f", &crds]);
    assert!(
        out.status.success(),
        "OLM's CRDs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run_tool(
        "kubectl",
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            &crds,
        ],
    );
    assert!(
        out.status.success(),
        "OLM's CRDs: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The catalog: the bundle directory rendered by opm (its objects inline,
    // so OLM installs from them with no bundle image to pull), one channel.
    let work = std::env::temp_dir().join(format!("kubeflow-olm-{}", std::process::id()));
    let catalog = work.join("catalog");
    std::fs::create_dir_all(&catalog).unwrap_or_else(|e| panic!("{e}"));
    let opm = bin.join("opm");
    let rendered = kubeflow_e2e::run_ok(
        &opm,
        &[
            "render",
            &repo_root().join("bundle").display().to_string(),
            "-o",
            "json",
        ],
    );
    let csv = csv();
    let csv_name = csv["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let package = serde_json::json!({"schema": "olm.package", "name": "kubeflow-operator", "defaultChannel": "stable"});
    let channel = serde_json::json!({"schema": "olm.channel", "package": "kubeflow-operator", "name": "stable", "entries": [{"name": csv_name}]});
    std::fs::write(
        catalog.join("catalog.json"),
        format!("{package}\n{channel}\n{rendered}"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    kubeflow_e2e::run_ok(&opm, &["validate", &catalog.display().to_string()]);

    // OLM's controllers serve metrics on :8080 when they can: a loopback
    // listener held here keeps them from binding every interface (they
    // carry on without metrics).
    let _metrics_port_held = std::net::TcpListener::bind(("127.0.0.1", 8080)).ok();
    let port = free_port();
    let serve = Proc::start(
        &opm,
        &[
            "serve",
            &catalog.display().to_string(),
            "-p",
            &port.to_string(),
            "--pprof-addr",
            "",
            "-t",
            &work.join("termination-log").display().to_string(),
        ],
        work.join("opm.log"),
    );
    let ns = TestNamespace::new(&client, "olm").await;
    let olm = Proc::start(&bin.join("olm"), &[], work.join("olm.log"));
    let catalog_operator = Proc::start(
        &bin.join("catalog"),
        &["--namespace", &ns.name],
        work.join("catalog.log"),
    );

    // AllNamespaces (an OperatorGroup without target namespaces), as the
    // OpenShift console installs it.
    apply_yaml(
        &client,
        &ns.name,
        &format!(
            r#"
apiVersion: operators.coreos.com/v1
kind: OperatorGroup
metadata: {{name: kubeflow}}
spec: {{}}
---
apiVersion: operators.coreos.com/v1alpha1
kind: CatalogSource
metadata: {{name: kubeflow}}
spec:
  sourceType: grpc
  address: 127.0.0.1:{port}
  displayName: Kubeflow (test)
---
apiVersion: operators.coreos.com/v1alpha1
kind: Subscription
metadata: {{name: kubeflow-operator}}
spec:
  channel: stable
  name: kubeflow-operator
  source: kubeflow
  sourceNamespace: {ns}
  installPlanApproval: Automatic
"#,
            ns = ns.name
        ),
    )
    .await;

    let csvs = api(&client, &ns.name, "ClusterServiceVersion").await;
    let logs = || {
        format!(
            "\n--- olm:\n{}\n--- catalog:\n{}\n--- opm:\n{}",
            tail(&olm.log()),
            tail(&catalog_operator.log()),
            tail(&serve.log())
        )
    };
    let phase = {
        let csvs = csvs.clone();
        let name = csv_name.clone();
        move || {
            let csvs = csvs.clone();
            let name = name.clone();
            async move {
                csvs.get_opt(&name)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|c| c.data["status"]["phase"].as_str().map(String::from))
            }
        }
    };
    let reached = tokio::time::timeout(Duration::from_secs(240), async {
        loop {
            if phase().await.as_deref() == Some("Succeeded") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    let csv_status = csvs
        .get_opt(&csv_name)
        .await
        .ok()
        .flatten()
        .map(|c| c.data["status"].clone());
    assert!(
        reached.is_ok(),
        "CSV {csv_name} did not succeed: {csv_status:?}{}",
        logs()
    );

    // What OLM made of it: the operator Deployments, each told that
    // every namespace is allowed (AllNamespaces), and ClusterRoles with the
    // chart's rules (OLM lifts the namespaced ones cluster-wide here).
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &ns.name);
    let names: BTreeSet<String> = deployments
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .items
        .into_iter()
        .filter_map(|d| d.metadata.name)
        .collect();
    let want: BTreeSet<String> = COMPONENTS
        .iter()
        .map(|c| format!("kubeflow-{c}-operator"))
        .collect();
    assert_eq!(names, want);
    let serving = deployments
        .get("kubeflow-serving-operator")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let annotations = serving
        .spec
        .and_then(|s| s.template.metadata)
        .and_then(|m| m.annotations)
        .unwrap_or_default();
    assert_eq!(
        annotations.get("olm.targetNamespaces").map(String::as_str),
        Some("")
    );

    // Uninstall as a user does: the Subscription, the CSV and the
    // OperatorGroup. OLM removes the Deployments and every cluster-scoped
    // object it made for them (its ClusterRoles and bindings, labelled with
    // the namespace), and lets go of the CSV (its finalizer); the CRDs stay
    // (OLM never deletes them). All of it before OLM stops.
    let subs = api(&client, &ns.name, "Subscription").await;
    let _ = subs
        .delete("kubeflow-operator", &DeleteParams::default())
        .await;
    let _ = csvs.delete(&csv_name, &DeleteParams::default()).await;
    let groups = {
        let gvk = kube::core::GroupVersionKind::gvk("operators.coreos.com", "v1", "OperatorGroup");
        let (ar, _) = kube::discovery::pinned_kind(&client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("OperatorGroup is not served: {e}"));
        Api::<DynamicObject>::namespaced_with(client.clone(), &ns.name, &ar)
    };
    let _ = groups.delete("kubeflow", &DeleteParams::default()).await;
    wait_for(
        "OLM to remove the operator Deployments and the CSV",
        Duration::from_secs(90),
        || {
            let (deployments, csvs, name) = (deployments.clone(), csvs.clone(), csv_name.clone());
            async move {
                let left = deployments.list(&ListParams::default()).await.ok()?;
                let csv = csvs.get_opt(&name).await.ok()?;
                (left.items.is_empty() && csv.is_none()).then_some(())
            }
        },
    )
    .await;
    let owned = format!("olm.owner.namespace={}", ns.name);
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client.clone());
    let left = tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            let lp = ListParams::default().labels(&owned);
            let r = roles
                .list_metadata(&lp)
                .await
                .map(|l| l.items.len())
                .unwrap_or(1);
            let b = bindings
                .list_metadata(&lp)
                .await
                .map(|l| l.items.len())
                .unwrap_or(1);
            if r + b == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    // What may stay cluster-wide: OLM's roles for the kinds
    // (`<plural>.<group>-v1alpha1-{admin,edit,view,crdview}`), which OLM
    // removes some time after the uninstall (under load, not before this
    // test stops it: docs/uninstall.md says to check), and nothing of the
    // bundle's own (OLM leaves what it created from a bundle without an
    // owner: the bundle must hold none). The test removes OLM's leftovers:
    // they would let namespace admins write the kinds in later tests.
    let managed = ListParams::default().labels("olm.managed=true");
    let crd_names: Vec<String> = kubeflow_api::crds::all()
        .into_iter()
        .filter_map(|(_, c)| c.metadata.name)
        .collect();
    let kept: Vec<String> = roles
        .list_metadata(&managed)
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|r| r.metadata.name)
                .collect()
        })
        .unwrap_or_default();
    let (per_kind, ours): (Vec<String>, Vec<String>) = kept.into_iter().partition(|n| {
        crd_names
            .iter()
            .any(|c| n.starts_with(&format!("{c}-v1alpha1-")))
    });
    for name in &per_kind {
        let _ = roles.delete(name, &DeleteParams::default()).await;
    }
    drop(catalog_operator);
    drop(olm);
    drop(serve);
    ns.delete().await;
    // OLM's own CRDs go with the test (they are the test's, not the project's).
    let out = run_tool(
        "kubectl",
        &["delete", "--wait=true", "--timeout=60s", "-f", &crds],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        left.is_ok(),
        "OLM left cluster roles or bindings labelled {owned} after the uninstall"
    );
    assert!(
        ours.is_empty(),
        "the bundle left cluster roles behind: {ours:?}"
    );
    let _ = std::fs::remove_dir_all(&work);
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
