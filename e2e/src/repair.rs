//! Deleting one object of every kind a component manages and timing its
//! return: proof that every managed kind is watched, not just resynced.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams};
use kube::discovery::{Discovery, Scope};

/// For each group-kind the CR's inventory lists (CRDs, Namespaces and
/// PersistentVolumeClaims left out: deleting them takes data with them, and
/// a claim in use stays until its pods go), deletes one member and
/// returns how long until an object of that name (another uid) exists.
pub async fn delete_one_of_each_kind(
    client: &Client,
    cr: &DynamicObject,
) -> BTreeMap<String, Duration> {
    let labels = cr.metadata.labels.clone().unwrap_or_default();
    let id = labels
        .get("applyset.kubernetes.io/id")
        .cloned()
        .expect("the CR carries its ApplySet id");
    let kinds: Vec<String> = cr
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .get("applyset.kubernetes.io/contains-group-kinds")
        .cloned()
        .unwrap_or_default()
        .split(',')
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .collect();
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let mut out = BTreeMap::new();
    for gk in kinds {
        let (kind, group) = gk.split_once('.').unwrap_or((gk.as_str(), ""));
        if matches!(
            kind,
            "CustomResourceDefinition" | "Namespace" | "PersistentVolumeClaim"
        ) {
            continue;
        }
        let Some((ar, caps)) = discovery
            .groups()
            .filter(|g| g.name() == group)
            .flat_map(|g| g.recommended_resources())
            .find(|(ar, _)| ar.kind == kind)
        else {
            continue;
        };
        let all: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let members = all
            .list(&ListParams::default().labels(&format!("applyset.kubernetes.io/part-of={id}")))
            .await
            .expect("list members");
        let Some(victim) = members.items.into_iter().next() else {
            continue;
        };
        out.insert(
            gk.clone(),
            delete_and_time(client, &ar, caps.scope == Scope::Namespaced, &victim).await,
        );
    }
    out
}

async fn delete_and_time(
    client: &Client,
    ar: &ApiResource,
    namespaced: bool,
    victim: &DynamicObject,
) -> Duration {
    let name = victim.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> = match (&victim.metadata.namespace, namespaced) {
        (Some(ns), true) => Api::namespaced_with(client.clone(), ns, ar),
        _ => Api::all_with(client.clone(), ar),
    };
    let uid = victim.metadata.uid.clone();
    api.delete(&name, &DeleteParams::background())
        .await
        .unwrap_or_else(|e| panic!("delete {} {name}: {e}", ar.kind));
    let start = Instant::now();
    loop {
        if let Ok(Some(o)) = api.get_opt(&name).await
            && o.metadata.uid != uid
            && o.metadata.deletion_timestamp.is_none()
        {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{} {name} was not recreated within 30 s",
            ar.kind
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The label every managed object carries with the value `kubeflow`; an
/// edit of it is an edit of a field the operator owns.
const OWNED_LABEL: &str = "app.kubernetes.io/part-of";

/// For each group-kind the CR's inventory lists (CRDs and Namespaces left
/// out), edits a field the operator owns on one member and returns how long
/// until the operator has put it back.
pub async fn edit_one_of_each_kind(
    client: &Client,
    cr: &DynamicObject,
) -> BTreeMap<String, Duration> {
    let members = one_member_per_kind(client, cr).await;
    let mut out = BTreeMap::new();
    for (gk, (api, name)) in members {
        let edit = serde_json::json!({"metadata": {"labels": {OWNED_LABEL: "edited"}}});
        api.patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&edit),
        )
        .await
        .unwrap_or_else(|e| panic!("edit {gk} {name}: {e}"));
        let start = Instant::now();
        loop {
            let back = api
                .get_opt(&name)
                .await
                .ok()
                .flatten()
                .and_then(|o| o.metadata.labels)
                .and_then(|l| l.get(OWNED_LABEL).cloned())
                .is_some_and(|v| v == "kubeflow");
            if back {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{gk} {name} was not repaired within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        out.insert(gk, start.elapsed());
    }
    out
}

async fn one_member_per_kind(
    client: &Client,
    cr: &DynamicObject,
) -> BTreeMap<String, (Api<DynamicObject>, String)> {
    let labels = cr.metadata.labels.clone().unwrap_or_default();
    let id = labels
        .get("applyset.kubernetes.io/id")
        .cloned()
        .expect("the CR carries its ApplySet id");
    let kinds = cr
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .get("applyset.kubernetes.io/contains-group-kinds")
        .cloned()
        .unwrap_or_default();
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let mut out = BTreeMap::new();
    for gk in kinds.split(',').filter(|k| !k.is_empty()) {
        let (kind, group) = gk.split_once('.').unwrap_or((gk, ""));
        if matches!(kind, "CustomResourceDefinition" | "Namespace") {
            continue;
        }
        let Some((ar, caps)) = discovery
            .groups()
            .filter(|g| g.name() == group)
            .flat_map(|g| g.recommended_resources())
            .find(|(ar, _)| ar.kind == kind)
        else {
            continue;
        };
        let all: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let Some(member) = all
            .list(&ListParams::default().labels(&format!("applyset.kubernetes.io/part-of={id}")))
            .await
            .expect("list members")
            .items
            .into_iter()
            // The claim ClusterRole carries no part-of label of ours to edit.
            .find(|m| {
                m.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.get(OWNED_LABEL).is_some())
            })
        else {
            continue;
        };
        let name = member.metadata.name.clone().unwrap_or_default();
        let api = match (&member.metadata.namespace, caps.scope == Scope::Namespaced) {
            (Some(ns), true) => Api::namespaced_with(client.clone(), ns, &ar),
            _ => Api::all_with(client.clone(), &ar),
        };
        out.insert(gk.to_string(), (api, name));
    }
    out
}
