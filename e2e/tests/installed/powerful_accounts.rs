//! Which ServiceAccounts of the install hold cluster-wide power, asked of
//! the API server for every account the install made, and
//! compared with the table in docs/security.md
//! ("ServiceAccounts with cluster-wide power"): an account that gains such
//! a right, or a row the install no longer bears out, fails the test. The
//! table is the promise: only the accounts it lists, for the reasons it
//! gives.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kubeflow_e2e::access::{Request, can_user};
use kubeflow_e2e::demo::OPERATOR_NAMESPACE;
use kubeflow_e2e::repo_root;

/// The namespace whose accounts are the cluster's own controllers': a pod
/// or a token there is theirs.
const SYSTEM: &str = "kube-system";

/// What makes an account powerful, as the docs' table names it, and the
/// requests any one of which grants it (all cluster-wide but for `SYSTEM`).
fn powers() -> Vec<(&'static str, Vec<Request<'static>>)> {
    let r = |verb, group, resource, subresource, name, namespace| Request {
        verb,
        group,
        resource,
        subresource,
        name,
        namespace,
    };
    let rbac = "rbac.authorization.k8s.io";
    let hooks = "admissionregistration.k8s.io";
    vec![
        ("everything", vec![r("*", "*", "*", "", "", "")]),
        (
            "bind or escalate cluster-admin",
            vec![
                r("bind", rbac, "clusterroles", "", "cluster-admin", ""),
                r("escalate", rbac, "clusterroles", "", "cluster-admin", ""),
            ],
        ),
        (
            "impersonate",
            vec![
                r("impersonate", "", "users", "", "", ""),
                r("impersonate", "", "groups", "", "system:masters", ""),
                r("impersonate", "", "serviceaccounts", "", "", SYSTEM),
            ],
        ),
        (
            "pods in kube-system",
            vec![
                r("create", "", "pods", "", "", SYSTEM),
                r("create", "apps", "deployments", "", "", SYSTEM),
                r("create", "apps", "daemonsets", "", "", SYSTEM),
                r("create", "apps", "statefulsets", "", "", SYSTEM),
                r("create", "apps", "replicasets", "", "", SYSTEM),
                r("create", "batch", "jobs", "", "", SYSTEM),
                r("create", "batch", "cronjobs", "", "", SYSTEM),
                r("create", "", "pods", "exec", "", SYSTEM),
            ],
        ),
        (
            "tokens in kube-system",
            vec![r("create", "", "serviceaccounts", "token", "", SYSTEM)],
        ),
        (
            "mutating webhooks",
            vec![
                r("create", hooks, "mutatingwebhookconfigurations", "", "", ""),
                r("update", hooks, "mutatingwebhookconfigurations", "", "", ""),
                r("patch", hooks, "mutatingwebhookconfigurations", "", "", ""),
            ],
        ),
        (
            "kubelets",
            vec![
                r("get", "", "nodes", "proxy", "", ""),
                r("create", "", "nodes", "proxy", "", ""),
            ],
        ),
        (
            "every Secret",
            vec![
                r("get", "", "secrets", "", "", SYSTEM),
                r("list", "", "secrets", "", "", SYSTEM),
            ],
        ),
    ]
}

/// The docs' table, `namespace/name` -> the powers it lists. Rows are
/// `| `ns/name` | `power`, `power` | why |` between the table's head and
/// the first line that is not a row.
fn documented(markdown: &str) -> BTreeMap<String, BTreeSet<String>> {
    let code = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    markdown
        .lines()
        .skip_while(|l| !l.starts_with("| ServiceAccount | may |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let account = code(cells.get(1)?).into_iter().next()?;
            Some((account, code(cells.get(2)?).into_iter().collect()))
        })
        .collect()
}

/// Every account the install made, asked for every power: the operators'
/// (the chart's, in the operators' namespace) and those the operators
/// installed from the bundles (their component label).
pub async fn check(client: &kube::Client) {
    let all = Api::<ServiceAccount>::all(client.clone());
    let installed = all
        .list(&ListParams::default().labels("components.kubeflow.org/component"))
        .await
        .expect("the installed ServiceAccounts");
    let operators = Api::<ServiceAccount>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .list(&ListParams::default())
        .await
        .expect("the operators' ServiceAccounts");
    let accounts: Vec<String> = installed
        .items
        .iter()
        .chain(&operators.items)
        .map(|sa| format!("{}/{}", sa.namespace().unwrap_or_default(), sa.name_any()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(
        installed.items.len() >= 30 && operators.items.len() >= 15,
        "too few accounts to judge: {} installed, {} of operators",
        installed.items.len(),
        operators.items.len()
    );
    let powers = powers();
    let questions: Vec<(String, &'static str, Request<'static>)> = accounts
        .iter()
        .flat_map(|account| {
            powers.iter().flat_map(move |(power, requests)| {
                requests.iter().map(move |r| (account.clone(), *power, *r))
            })
        })
        .collect();
    let asked = questions.len();
    // Side by side: about 2,000 reviews, each answered on its own.
    let answers: Vec<(String, &'static str, Request<'static>, bool)> = futures::stream::iter(
        questions
            .into_iter()
            .map(|(account, power, what)| async move {
                let (ns, name) = account.split_once('/').unwrap_or_default();
                let user = format!("system:serviceaccount:{ns}:{name}");
                let may = can_user(client, &user, what)
                    .await
                    .unwrap_or_else(|e| panic!("{e:#}"));
                (account, power, what, may)
            }),
    )
    .buffer_unordered(16)
    .collect()
    .await;
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut allowed: Answers = BTreeMap::new();
    for (account, power, what, may) in answers {
        if may {
            found
                .entry(account.clone())
                .or_default()
                .insert(power.to_string());
        }
        allowed.insert((account, what), may);
    }
    let docs = repo_root().join("docs/security.md");
    let table = documented(&std::fs::read_to_string(&docs).expect("docs/security.md"));
    eprintln!(
        "powerful accounts: {} of {} accounts ({asked} reviews)",
        found.len(),
        accounts.len()
    );
    let mut wrong = Vec::new();
    for account in found.keys().chain(table.keys()).collect::<BTreeSet<_>>() {
        let (has, listed) = (found.get(account), table.get(account));
        if has != listed {
            wrong.push(format!(
                "{account}: the install grants {has:?}, the docs list {listed:?}"
            ));
        }
    }
    // What the table's first two columns should say, to compare by eye.
    let rows: Vec<String> = found
        .iter()
        .map(|(account, powers)| {
            let powers: Vec<String> = powers.iter().map(|p| format!("`{p}`")).collect();
            format!("| `{account}` | {} |", powers.join(", "))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "docs/security.md's powerful accounts differ from the install:\n{}\nas found:\n{}",
        wrong.join("\n"),
        rows.join("\n")
    );
    // A table cut short would pass with a broken parser and an empty
    // install; the install has at least the upstream controllers that
    // create pods everywhere (the profile controller is no longer among
    // them: it holds only what it uses).
    assert!(found.len() >= 10, "too few powerful accounts: {found:?}");
    kept_out_of_the_system_namespaces(&found, &allowed).await;
}

/// The API server's answer to each request of [`powers`], by account
/// (`namespace/name`).
type Answers = BTreeMap<(String, Request<'static>), bool>;

/// Every controller account that RBAC lets make pods, workloads or tokens
/// in `kube-system` tries each it may, as itself, and is refused by the
/// chart's `system-namespaces` policy. Which kinds it may make is the
/// first pass's answers (`allowed`): the same requests, not asked again.
async fn kept_out_of_the_system_namespaces(
    found: &BTreeMap<String, BTreeSet<String>>,
    allowed: &Answers,
) {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
    // Valid objects, so that what refuses them is admission, not validation
    // (which runs first): a Job's pods may not restart always, a
    // Deployment's must.
    let template = serde_json::json!({
        "metadata": {"labels": {"app": "reach"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    });
    let mut once = template.clone();
    once["spec"]["restartPolicy"] = serde_json::json!("Never");
    // (group, version, kind, plural, spec): each kind that runs pods.
    let workloads = [
        ("", "v1", "Pod", "pods", once["spec"].clone()),
        (
            "apps",
            "v1",
            "Deployment",
            "deployments",
            serde_json::json!({"selector": {"matchLabels": {"app": "reach"}}, "template": template}),
        ),
        (
            "apps",
            "v1",
            "DaemonSet",
            "daemonsets",
            serde_json::json!({"selector": {"matchLabels": {"app": "reach"}}, "template": template}),
        ),
        (
            "apps",
            "v1",
            "StatefulSet",
            "statefulsets",
            serde_json::json!({"selector": {"matchLabels": {"app": "reach"}}, "serviceName": "reach", "template": template}),
        ),
        (
            "batch",
            "v1",
            "Job",
            "jobs",
            serde_json::json!({"template": once}),
        ),
    ];
    let admin = kubeflow_e2e::client().await;
    let (mut tried, mut tokens, mut reused) = (BTreeMap::<&str, usize>::new(), 0, 0);
    for (account, powers) in found {
        let (ns, name) = account.split_once('/').unwrap_or_default();
        if ns == OPERATOR_NAMESPACE {
            continue;
        }
        let user = format!("system:serviceaccount:{ns}:{name}");
        let client = kubeflow_e2e::client_as(&user)
            .await
            .unwrap_or_else(|e| panic!("a client as {user}: {e:#}"));
        let refused = |what: &str, result: Result<(), kube::Error>| match result {
            Err(kube::Error::Api(e)) if e.message.contains("system-namespaces") => {}
            other => panic!("{user}: {what} in {SYSTEM} was not refused by the policy: {other:?}"),
        };
        if powers.contains("pods in kube-system") {
            let mut any = false;
            for (group, version, kind, plural, spec) in &workloads {
                let what = Request {
                    verb: "create",
                    group,
                    resource: plural,
                    subresource: "",
                    name: "",
                    namespace: SYSTEM,
                };
                let may = allowed
                    .get(&(account.clone(), what))
                    .unwrap_or_else(|| panic!("{user}: {what:?} was not asked with the powers"));
                reused += 1;
                if !may {
                    continue;
                }
                let resource = ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk(group, version, kind),
                    plural,
                );
                let mut object = DynamicObject::new("reach-system-namespaces", &resource);
                object.data = serde_json::json!({"spec": spec});
                let made = Api::<DynamicObject>::namespaced_with(client.clone(), SYSTEM, &resource)
                    .create(&PostParams::default(), &object)
                    .await;
                if made.is_ok() {
                    let _ = Api::<DynamicObject>::namespaced_with(admin.clone(), SYSTEM, &resource)
                        .delete("reach-system-namespaces", &DeleteParams::background())
                        .await;
                }
                refused(kind, made.map(|_| ()));
                *tried.entry(kind).or_default() += 1;
                any = true;
            }
            if !any {
                // Only a kind not tried here (a ReplicaSet, a CronJob,
                // exec): counted, so the minimum below sees it.
                *tried.entry("other").or_default() += 1;
            }
        }
        if powers.contains("tokens in kube-system") {
            let minted = Api::<ServiceAccount>::namespaced(client.clone(), SYSTEM)
                .create_token_request("default", &PostParams::default(), &TokenRequest::default())
                .await;
            refused("a token", minted.map(|_| ()));
            tokens += 1;
        }
    }
    eprintln!(
        "controller accounts refused in {SYSTEM}: {tried:?}, {tokens} tokens \
         ({reused} answers of the first pass reused)"
    );
    // Seventeen controller accounts may make pods or workloads there by
    // RBAC, four may mint tokens (docs/security.md's table).
    let accounts_tried = tried.values().copied().max().unwrap_or(0);
    assert!(
        tried.get("Pod").copied().unwrap_or(0) >= 5 && accounts_tried >= 5 && tokens >= 3,
        "too few tried: {tried:?}, {tokens} tokens"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_docs_table_is_read_row_by_row() {
        let md = "text\n| ServiceAccount | may | why |\n| --- | --- | --- |\n| `kubeflow/a` | `every Secret`, `kubelets` | x `y` |\n| `istio-system/b` | `everything` | z |\n\nafter\n| `c/d` | `impersonate` | no |\n";
        let t = documented(md);
        assert_eq!(t.len(), 2, "{t:?}");
        assert_eq!(
            t["kubeflow/a"],
            ["every Secret", "kubelets"].map(String::from).into()
        );
        assert_eq!(t["istio-system/b"], ["everything"].map(String::from).into());
    }
}
