//! The Auth operator, as a process, against the real control plane: dex
//! with the users of a Secret (random passwords, bcrypt hashes) behind
//! oauth2-proxy; the client and cookie secrets generated once and never
//! rotated by a reconcile, nor logged; upstream's demo user never
//! installed; every kind repaired; a malformed or missing users Secret
//! refused naming it with nothing written; the upgrade to 26.03.1's
//! versions; an external OIDC provider in dex's place; removal keeping the
//! CRD and the namespaces.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kubeflow_e2e::component::{
    component_api, condition, degraded, delete_and_wait, merge, wait_condition, wait_gone,
};
use kubeflow_e2e::login::{TestUser, USERS_SECRET, create_users_secret};
use kubeflow_e2e::objects::secret_data;
use kubeflow_e2e::operator::OperatorProcess;
use kubeflow_e2e::{TestNamespace, apply_yaml, wait_for};
use serde_json::json;

const OPERATOR: &str = "kubeflow-auth-operator";
const TIMEOUT: Duration = Duration::from_secs(90);
/// The CRDs dex stores its state in (its storage type `kubernetes`).
const DEX_CRDS: [&str; 10] = [
    "authcodes.dex.coreos.com",
    "authrequests.dex.coreos.com",
    "connectors.dex.coreos.com",
    "devicerequests.dex.coreos.com",
    "devicetokens.dex.coreos.com",
    "oauth2clients.dex.coreos.com",
    "offlinesessionses.dex.coreos.com",
    "passwords.dex.coreos.com",
    "refreshtokens.dex.coreos.com",
    "signingkeies.dex.coreos.com",
];

/// A Secret's text values.
async fn secret(client: &kube::Client, ns: &str, name: &str) -> BTreeMap<String, String> {
    secret_data(client, ns, name)
        .await
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).expect("text")))
        .collect()
}

/// The hash upstream's dex bundle publishes for its demo user.
fn published_hash() -> String {
    let text = kubeflow_e2e::bundle_text("dex/v2.45.1/dex.yaml");
    text.lines()
        .find_map(|l| l.trim().strip_prefix("DEX_USER_PASSWORD: "))
        .expect("the bundle's demo user")
        .trim()
        .to_string()
}

#[tokio::test]
async fn auth_logs_people_in_through_dex_keeps_its_secrets_repairs_refuses_upgrades_and_switches_to_oidc()
 {
    let (client, _g) = kubeflow_e2e::login::prepare_auth().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = TestNamespace::new(&client, "auth").await;
    let jane = TestUser::random("jane@example.com");
    create_users_secret(&client, &ns.name, std::slice::from_ref(&jane)).await;
    let op = OperatorProcess::start(OPERATOR, &[]);
    let auths = component_api(&client, &ns.name, "Auth");
    apply_yaml(
        &client,
        &ns.name,
        &format!("apiVersion: components.kubeflow.org/v1alpha1\nkind: Auth\nmetadata: {{name: kubeflow}}\nspec:\n  version: v7.14.3\n  dex: {{usersSecret: {USERS_SECRET}}}\n  allowedEmailDomains: [example.com]\n"),
    )
    .await;
    let cr = wait_condition(&auths, "kubeflow", "Ready", "True", TIMEOUT).await;
    assert_eq!(
        cr.data.pointer("/status/issuer"),
        Some(&json!("http://dex.auth.svc.cluster.local:5556/dex"))
    );
    assert_eq!(
        cr.data.pointer("/status/dexVersion"),
        Some(&json!("v2.45.0"))
    );
    // Every CRD dex keeps its state in is installed with the component,
    // labelled as its (dex would otherwise make nine of them itself at its
    // first start, known to no removal).
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in DEX_CRDS {
        let crd = crds
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            crd.labels()
                .get("components.kubeflow.org/component")
                .map(String::as_str),
            Some("auth"),
            "{name}"
        );
    }

    // Generated secrets: oauth2-proxy's and dex's client secret agree; the
    // cookie secret is an AES-256 key as oauth2-proxy takes it.
    let kept = secret(&client, "oauth2-proxy", "oauth2-proxy").await;
    let (cookie, client_secret) = (kept["cookie-secret"].clone(), kept["client-secret"].clone());
    assert_eq!(cookie.len(), 32);
    assert_eq!(client_secret.len(), 64);
    assert_eq!(
        secret(&client, "auth", "dex-oidc-client").await["OIDC_CLIENT_SECRET"],
        client_secret
    );
    // dex knows Jane by her hash; the bundle's demo user and its Secret are absent.
    let dex_config = secret(&client, "auth", "dex").await["config.yaml"].clone();
    assert!(dex_config.contains("jane@example.com"), "{dex_config}");
    assert!(
        bcrypt::verify(
            &jane.password,
            dex_config
                .split("hash: ")
                .nth(1)
                .and_then(|h| h.lines().next())
                .map(|h| h.trim().trim_matches('"'))
                .expect("a hash")
        )
        .expect("bcrypt")
    );
    assert!(!dex_config.contains(&published_hash()), "{dex_config}");
    assert!(!dex_config.contains("user@example.com"), "{dex_config}");
    assert!(
        Api::<Secret>::namespaced(client.clone(), "auth")
            .get_opt("dex-passwords")
            .await
            .expect("get")
            .is_none()
    );
    assert!(
        Api::<ConfigMap>::namespaced(client.clone(), "auth")
            .get_opt("dex")
            .await
            .expect("get")
            .is_none(),
        "dex's configuration holds hashes: a Secret, not a ConfigMap"
    );
    let proxy_config = Api::<ConfigMap>::namespaced(client.clone(), "oauth2-proxy")
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .find_map(|c| c.data?.get("oauth2_proxy.cfg").cloned())
        .expect("oauth2-proxy's configuration");
    assert!(
        proxy_config.contains("email_domains = [ \"example.com\" ]"),
        "{proxy_config}"
    );

    wait_condition(&auths, "kubeflow", "Ready", "True", TIMEOUT).await;

    // Settled: no reconcile rotated a secret (and the count the refusals
    // below compare with).
    let before = op.settled_writes().await;
    let still = secret(&client, "oauth2-proxy", "oauth2-proxy").await;
    assert_eq!(
        (&still["cookie-secret"], &still["client-secret"]),
        (&cookie, &client_secret),
        "never rotated by a reconcile"
    );

    // A hash that is not bcrypt: refused naming the Secret, nothing written.
    let dex_secret_version = |client: kube::Client| async move {
        Api::<Secret>::namespaced(client, "auth")
            .get("dex")
            .await
            .expect("dex config")
            .resource_version()
    };
    let dex_before = dex_secret_version(client.clone()).await;
    let digest = |client: kube::Client| async move {
        Api::<Deployment>::namespaced(client, "auth")
            .get("dex")
            .await
            .expect("dex")
            .spec
            .and_then(|s| s.template.metadata)
            .and_then(|m| m.annotations)
            .and_then(|a| a.get("components.kubeflow.org/config-digest").cloned())
    };
    let digest_before = digest(client.clone()).await;
    assert!(
        digest_before.is_some(),
        "dex's pod template carries its configuration's digest"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    secrets
        .patch(
            USERS_SECRET,
            &Default::default(),
            &kube::api::Patch::Merge(json!({"stringData": {"users.yaml": "- email: jane@example.com\n  hash: not-a-hash\n"}})),
        )
        .await
        .expect("edit the users Secret");
    let (reason, message) = degraded(&auths, TIMEOUT).await;
    assert_eq!(reason, "InvalidSpec", "{message}");
    assert!(
        message.contains(&format!("Secret {}/{USERS_SECRET}", ns.name)),
        "{message}"
    );
    assert!(message.contains("not a bcrypt hash"), "{message}");
    assert_eq!(op.writes().await, before, "nothing written");
    assert_eq!(dex_secret_version(client.clone()).await, dex_before);
    // A users Secret that does not exist: SecretMissing, naming it.
    merge(
        &auths,
        "kubeflow",
        json!({"spec": {"dex": {"usersSecret": "nobody"}}}),
    )
    .await;
    wait_for("SecretMissing naming the Secret", TIMEOUT, || async {
        let cr = auths.get("kubeflow").await.ok()?;
        let (_, reason, message, _) = condition(&cr, "Degraded")?;
        (reason == "SecretMissing" && message.contains("nobody")).then_some(())
    })
    .await;
    assert_eq!(op.writes().await, before, "nothing written");
    // A new hash (a new salt) for Jane: dex's configuration changes, and dex
    // rolls to read it.
    create_users_secret(&client, &ns.name, std::slice::from_ref(&jane)).await;
    merge(
        &auths,
        "kubeflow",
        json!({"spec": {"dex": {"usersSecret": USERS_SECRET}}}),
    )
    .await;
    wait_condition(&auths, "kubeflow", "Ready", "True", TIMEOUT).await;
    wait_for(
        "dex to roll onto its new configuration",
        TIMEOUT,
        || async { (digest(client.clone()).await != digest_before).then_some(()) },
    )
    .await;

    // Nothing secret in the operator's log or the Events it wrote.
    let log = op.log_text();
    let events: Vec<String> = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter_map(|e| e.message)
        .collect();
    for value in [&cookie, &client_secret, &jane.password] {
        assert!(!log.contains(value.as_str()), "a secret value in the log");
        assert!(
            !events.iter().any(|m| m.contains(value.as_str())),
            "a secret value in an Event"
        );
    }

    // 26.03.1's versions: oauth2-proxy v7.15.2 and dex v2.45.1 (two replicas).
    merge(&auths, "kubeflow", json!({"spec": {"version": "v7.15.2"}})).await;
    kubeflow_e2e::component::wait_version_ready(&auths, "kubeflow", "v7.15.2", TIMEOUT).await;
    let dex = Api::<Deployment>::namespaced(client.clone(), "auth")
        .get("dex")
        .await
        .expect("dex");
    let spec = dex.spec.expect("spec");
    assert_eq!(spec.replicas, Some(2));
    let image = spec
        .template
        .spec
        .and_then(|p| p.containers[0].image.clone())
        .unwrap_or_default();
    assert!(image.ends_with("dex:v2.45.1"), "{image}");
    let upgraded = secret(&client, "oauth2-proxy", "oauth2-proxy").await;
    assert_eq!(upgraded["cookie-secret"], cookie, "kept across the upgrade");

    // An external OIDC provider instead of dex: dex goes, oauth2-proxy
    // takes the provider's client, its issuer is reported.
    apply_yaml(&client, &ns.name, "apiVersion: v1\nkind: Secret\nmetadata: {name: idp}\nstringData: {client-secret: from-the-idp}\n").await;
    merge(
        &auths,
        "kubeflow",
        json!({"spec": {"dex": null, "oidc": {"issuerUrl": "https://idp.example.com/realms/kf", "clientId": "kubeflow", "clientSecret": {"name": "idp", "key": "client-secret"}}}}),
    )
    .await;
    wait_for("the external provider in use", TIMEOUT, || async {
        let cr = auths.get("kubeflow").await.ok()?;
        let (s, _, _, g) = condition(&cr, "Ready")?;
        (s == "True"
            && g == cr.metadata.generation
            && cr.data.pointer("/status/issuer")
                == Some(&json!("https://idp.example.com/realms/kf")))
        .then_some(())
    })
    .await;
    wait_gone(
        &Api::<Deployment>::namespaced(client.clone(), "auth"),
        "dex",
        TIMEOUT,
    )
    .await;
    let external = secret(&client, "oauth2-proxy", "oauth2-proxy").await;
    assert_eq!(external["client-secret"], "from-the-idp");
    assert_eq!(
        external["cookie-secret"], cookie,
        "sessions survive the switch"
    );

    // Removal: the workloads go; dex's CRD and both namespaces stay.
    delete_and_wait(&auths, "kubeflow", TIMEOUT).await;
    wait_gone(
        &Api::<Deployment>::namespaced(client.clone(), "oauth2-proxy"),
        "oauth2-proxy",
        TIMEOUT,
    )
    .await;
    for name in DEX_CRDS {
        let kept = crds
            .get_opt(name)
            .await
            .expect("get")
            .unwrap_or_else(|| panic!("{name} kept (crdPolicy Retain)"));
        assert!(
            !kept.labels().contains_key("applyset.kubernetes.io/part-of"),
            "{name} released"
        );
    }
    for kept in ["auth", "oauth2-proxy"] {
        let n = namespaces.get(kept).await.expect("kept");
        assert!(n.metadata.deletion_timestamp.is_none(), "{kept}");
        assert!(
            !n.labels().contains_key("applyset.kubernetes.io/part-of"),
            "{kept} released"
        );
    }
    drop(op);
    ns.delete().await;
}
