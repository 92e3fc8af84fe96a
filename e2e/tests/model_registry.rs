//! The Model Registry operator, as a process, against the real control
//! plane: both bundled databases' passwords generated and kept (never the
//! release's demo values), every kind repaired, nothing written at rest, a
//! missing Secret refused with nothing written, the upgrade from v0.3.7
//! to v0.3.9 planned first and keeping the records in MySQL on the same
//! volume, the move to PostgreSQL asked for by name releasing MySQL's volume
//! with its password, never deleting it; and removal keeping the volumes
//! and passwords.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::ResourceExt;
use kube::api::Api;
use kubeflow_e2e::component::{
    condition, delete_and_wait, install, merge, wait_condition, wait_degraded,
};
use kubeflow_e2e::objects::{exists, secret_text};
use kubeflow_e2e::wait_for;
use serde_json::{Value, json};

const OPERATOR: &str = "kubeflow-model-registry-operator";
const TIMEOUT: Duration = Duration::from_secs(90);

async fn key_of(client: &kube::Client, ns: &str, secret: &str, key: &str) -> Option<String> {
    secret_text(client, ns, secret, key).await
}

fn generated(p: &str) -> bool {
    p.len() == 48 && p.chars().all(|c| c.is_ascii_hexdigit())
}

#[tokio::test]
async fn the_model_registry_keeps_its_passwords_repairs_refuses_and_releases_mysql_on_upgrade() {
    let (client, _g) =
        kubeflow_e2e::component::prepare(&["ModelRegistry"], &["model-registry"]).await;
    kubeflow_e2e::component::install_bundle_crds(&client, "istio/1.30.1/crds.yaml").await;
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: ModelRegistry\nmetadata: {name: kubeflow}\nspec:\n  version: v0.3.7\n  upgradeStrategy: Manual\n";
    let (ns, op, registries, _) = install(&client, "model-registry", OPERATOR, yaml, TIMEOUT).await;

    // Both passwords generated (24 random bytes as hex), not the demo ones.
    let mysql = key_of(
        &client,
        &ns.name,
        "model-registry-db-secrets",
        "MYSQL_ROOT_PASSWORD",
    )
    .await
    .expect("the registry's password");
    let catalog = key_of(
        &client,
        &ns.name,
        "model-catalog-postgres",
        "POSTGRES_PASSWORD",
    )
    .await
    .expect("the catalog's password");
    assert!(generated(&mysql) && generated(&catalog), "generated");
    assert_ne!(mysql, catalog);
    // The placeholder Hugging Face key is the user's to create.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    assert!(!exists(&secrets, "model-catalog-hf-api-key").await);

    // Every managed kind is watched and repaired.
    let cr = registries.get("kubeflow").await.expect("cr");
    kubeflow_e2e::repair::assert_every_kind_repaired(
        &client,
        &cr,
        &[
            "Deployment.apps",
            "StatefulSet.apps",
            "ConfigMap",
            "Service",
            "ServiceAccount",
            "VirtualService.networking.istio.io",
            "AuthorizationPolicy.security.istio.io",
            "DestinationRule.networking.istio.io",
            "ClusterRoleBinding.rbac.authorization.k8s.io",
        ],
    )
    .await;
    wait_condition(&registries, "kubeflow", "Ready", "True", TIMEOUT).await;
    let mysql = key_of(
        &client,
        &ns.name,
        "model-registry-db-secrets",
        "MYSQL_ROOT_PASSWORD",
    )
    .await
    .expect("kept");

    // At rest: no writes.
    let before = op.settled_writes().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(op.writes().await, before, "no writes at rest");

    // An external database whose Secret does not exist: refused naming it,
    // nothing written.
    merge(
        &registries,
        "kubeflow",
        json!({"spec": {"database": {"external": {
            "engine": "PostgreSQL", "host": "pg.example.internal", "credentialsSecret": "registry-db"}}}}),
    )
    .await;
    wait_degraded(&registries, "SecretMissing", "registry-db", TIMEOUT).await;
    assert_eq!(op.writes().await, before, "nothing written");
    merge(&registries, "kubeflow", json!({"spec": {"database": null}})).await;
    wait_condition(&registries, "kubeflow", "Ready", "True", TIMEOUT).await;

    // The upgrade to v0.3.9 waits with its plan, and keeps the registry's
    // records where they are: MySQL on its volume, nothing to move by hand.
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    let mysql_volume = pvcs.get("metadata-mysql").await.expect("volume").uid();
    merge(
        &registries,
        "kubeflow",
        json!({"spec": {"version": "v0.3.9"}}),
    )
    .await;
    let plan = wait_for("the plan awaiting approval", TIMEOUT, || async {
        let cr = registries.get("kubeflow").await.ok()?;
        let plan = cr.data.pointer("/status/upgradePlan")?.clone();
        (plan["awaitingApproval"] == json!(true) && plan["to"] == "v0.3.9").then_some(plan)
    })
    .await;
    let details = plan["details"].as_str().unwrap_or_default();
    assert!(
        !details.contains("metadata-mysql")
            && !details.contains("metadata-postgres")
            && !details.contains("to do by hand"),
        "{details}"
    );
    assert_eq!(
        pvcs.get("metadata-mysql").await.expect("volume").uid(),
        mysql_volume,
        "nothing changed before approval"
    );
    merge(
        &registries,
        "kubeflow",
        json!({"spec": {"approvedPlan": plan["digest"]}}),
    )
    .await;
    wait_for("v0.3.9 Ready", TIMEOUT, || async {
        let cr = registries.get("kubeflow").await.ok()?;
        (cr.data.pointer("/status/version")? == "v0.3.9" && condition(&cr, "Ready")?.0 == "True")
            .then_some(())
    })
    .await;
    let kept = pvcs.get("metadata-mysql").await.expect("MySQL's volume");
    assert_eq!(kept.uid(), mysql_volume);
    assert!(
        kept.labels().contains_key("applyset.kubernetes.io/part-of"),
        "still the component's, in use"
    );
    assert!(
        pvcs.get_opt("metadata-postgres")
            .await
            .expect("get")
            .is_none()
    );
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &ns.name);
    let containers = |d: k8s_openapi::api::apps::v1::Deployment| {
        d.spec
            .and_then(|s| s.template.spec)
            .map(|p| p.containers)
            .unwrap_or_default()
    };
    let db = containers(
        deployments
            .get("model-registry-db")
            .await
            .expect("database"),
    );
    assert!(
        db[0]
            .image
            .as_deref()
            .is_some_and(|i| i.starts_with("mysql:")),
        "{:?}",
        db[0].image
    );
    let server = containers(
        deployments
            .get("model-registry-deployment")
            .await
            .expect("server"),
    );
    let args = server[0].args.clone().unwrap_or_default();
    assert!(
        server[0]
            .image
            .as_deref()
            .is_some_and(|i| i.ends_with(":v0.3.9"))
            && args.iter().any(|a| a == "--embedmd-database-type=mysql")
            && args.iter().any(|a| a.starts_with("--embedmd-database-dsn=")
                && a.contains("@tcp(model-registry-db")),
        "the v0.3.9 server opens the kept MySQL: {args:?}"
    );
    assert_eq!(
        key_of(
            &client,
            &ns.name,
            "model-registry-db-secrets",
            "MYSQL_ROOT_PASSWORD"
        )
        .await,
        Some(mysql.clone()),
        "with the password that opens it"
    );

    // Moving to PostgreSQL is asked for by name: a new database, MySQL's
    // volume released with its password, never deleted.
    merge(
        &registries,
        "kubeflow",
        json!({"spec": {"database": {"engine": "PostgreSQL"}}}),
    )
    .await;
    wait_for("PostgreSQL's volume", TIMEOUT, || async {
        pvcs.get_opt("metadata-postgres").await.ok()?.map(|_| ())
    })
    .await;
    wait_condition(&registries, "kubeflow", "Ready", "True", TIMEOUT).await;
    let kept = pvcs
        .get("metadata-mysql")
        .await
        .expect("MySQL's volume kept");
    assert_eq!(kept.uid(), mysql_volume);
    assert!(!kept.labels().contains_key("applyset.kubernetes.io/part-of"));
    assert_eq!(
        key_of(
            &client,
            &ns.name,
            "model-registry-db-secrets",
            "MYSQL_ROOT_PASSWORD"
        )
        .await,
        Some(mysql),
        "the password that opens the released volume stays"
    );
    assert_eq!(
        key_of(
            &client,
            &ns.name,
            "model-registry-db-secrets",
            "MYSQL_USER_NAME"
        )
        .await
        .as_deref(),
        Some("root"),
        "and so does the user MySQL is opened as"
    );
    let postgres = key_of(
        &client,
        &ns.name,
        "model-registry-db-secrets",
        "POSTGRES_PASSWORD",
    )
    .await
    .expect("PostgreSQL's password");
    assert!(generated(&postgres));
    let cr = registries.get("kubeflow").await.expect("cr");
    let released: Vec<&str> = cr
        .data
        .pointer("/status/released")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(released.contains(&"metadata-mysql"), "{released:?}");

    // Removal: the volumes and the passwords that open them stay.
    delete_and_wait(&registries, "kubeflow", TIMEOUT).await;
    for claim in [
        "metadata-mysql",
        "metadata-postgres",
        "model-catalog-postgres",
    ] {
        pvcs.get(claim)
            .await
            .unwrap_or_else(|e| panic!("{claim} kept: {e}"));
    }
    for secret in ["model-registry-db-secrets", "model-catalog-postgres"] {
        secrets
            .get(secret)
            .await
            .unwrap_or_else(|e| panic!("{secret} kept: {e}"));
    }
    // The removal's Retained Event names every one of them.
    let note = kubeflow_e2e::component::retained_note(&client, &ns.name, "", TIMEOUT).await;
    for kept in [
        "metadata-mysql",
        "metadata-postgres",
        "model-catalog-postgres",
        "model-registry-db-secrets",
    ] {
        assert!(
            note.contains(&format!("{}/{kept}", ns.name)),
            "{kept}: {note}"
        );
    }
    drop(op);
    ns.delete().await;
}
