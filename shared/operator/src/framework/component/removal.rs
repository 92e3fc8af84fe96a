//! What leaves the component: objects a prune released (kept with their
//! data, reported in the status), and the cleanup its finalizer runs.

use std::collections::BTreeSet;

use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use kubeflow_api::{ComponentResource, CrdPolicy, ReleasedObject};

use super::Component;
use super::context::Context;
use super::reconcile::inventory_of;
use super::run_time::RunTimeObjects;
use crate::base::kinds::kind;
use crate::base::labels;
use crate::engine::apply::ApplyOutcome;
use crate::engine::cleanup;
use crate::engine::inventory;
use crate::framework::controller::Failure;
use crate::report::events;

/// The status list of released objects: the earlier entries whose objects
/// still exist and are not managed again, and those this apply released
/// (each announced by an Event).
pub(super) async fn released<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    earlier: &[ReleasedObject],
    outcome: &ApplyOutcome,
) -> Result<Vec<ReleasedObject>, Failure> {
    let managed: BTreeSet<(String, String, String)> = outcome
        .live
        .iter()
        .map(|o| {
            (
                crate::base::kinds::group_kind(o),
                o.metadata.namespace.clone().unwrap_or_default(),
                o.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect();
    let (namespace, name) = (cr.namespace().unwrap_or_default(), cr.name_any());
    let mut out = Vec::new();
    for r in &ctx.released.merged(&namespace, &name, earlier) {
        let key = (r.kind.clone(), r.namespace.clone(), r.name.clone());
        if !managed.contains(&key) && ctx.engine.exists(&r.kind, &r.namespace, &r.name).await? {
            out.push(r.clone());
        }
    }
    for r in &outcome.released {
        tracing::warn!(kind = %r.group_kind, namespace = %r.namespace, name = %r.name, message = %r.message, "kept and released an object the new state no longer has");
        let note = format!("{} {}/{}: {}", r.group_kind, r.namespace, r.name, r.message);
        let on = cr.object_ref(&());
        ctx.tools
            .tell(&on, events::Notice::ObjectReleased, None, note)
            .await;
        out.retain(|o: &ReleasedObject| {
            !(o.kind == r.group_kind && o.namespace == r.namespace && o.name == r.name)
        });
        out.push(ReleasedObject {
            kind: r.group_kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            message: r.message.clone(),
        });
    }
    ctx.released.keep(&namespace, &name, &out);
    Ok(out)
}

/// The finalizer's pass. `released` (the status' list) gains what each
/// pass keeps: a kept object loses its inventory label, so a later pass no
/// longer finds it, and the `Retained` Event at the end must still name it
/// (volumes and password Secrets go in an early wave, CRDs in the last).
pub(super) async fn cleanup_component<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    released: &mut Vec<ReleasedObject>,
) -> Result<(), Failure> {
    let (namespace, name) = (cr.namespace().unwrap_or_default(), cr.name_any());
    // The status read may predate the last pass' write.
    *released = ctx.released.merged(&namespace, &name, released);
    let gone = delete_released_data(cr, ctx, released).await?;
    if !gone.is_empty() {
        tracing::info!(deleted = ?gone, "removed data an earlier prune released, as the spec's volume policy asks");
        released.retain(|r| !gone.contains(&format!("{} {}/{}", r.kind, r.namespace, r.name)));
    }
    let mut run_time = RunTimeObjects::new(ctx.tools.client.clone(), &namespace);
    for object in C::RUN_TIME_OBJECTS {
        run_time
            .delete(object)
            .await
            .map_err(|e| Failure::api("delete objects made at run time", e))?;
    }
    let extra = run_time.deleted();
    if !extra.is_empty() {
        tracing::info!(deleted = ?extra, "removed objects the component made at run time");
    }
    let inv = inventory_of(cr);
    let group_kinds: BTreeSet<String> = inventory::parse_group_kinds(
        cr.meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::APPLYSET_GROUP_KINDS)),
    )
    .into_iter()
    .collect();
    let delete_crds = cr.common().crd_policy == Some(CrdPolicy::Delete);
    let retain =
        |o: &DynamicObject| kind(o) != "CustomResourceDefinition" && ctx.component.retain(cr, o);
    let outcome = cleanup::cleanup(&ctx.engine, &inv, &group_kinds, &retain, delete_crds).await?;
    if !outcome.deleted.is_empty() {
        tracing::info!(deleted = outcome.deleted.len(), "cleanup deleted objects");
    }
    if !outcome.retained.is_empty() {
        tracing::info!(retained = ?outcome.retained, "cleanup kept objects on purpose");
    }
    for k in &outcome.kept {
        released.retain(|r| !(r.kind == k.kind && r.namespace == k.namespace && r.name == k.name));
        released.push(k.clone());
    }
    ctx.released.keep(&namespace, &name, released);
    if !outcome.done() {
        return Err(Failure::Waiting(format!(
            "{} to be deleted",
            outcome.remaining.join(", ")
        )));
    }
    // What is still there of the list is what stays behind (an entry of a
    // stale status may have been deleted by hand since). What this pass
    // kept exists (it was just released): only earlier passes' entries are
    // read again, not every retained CRD (up to 720 KB each).
    let mut kept = Vec::new();
    for r in released.iter() {
        let this_pass = outcome
            .kept
            .iter()
            .any(|k| k.kind == r.kind && k.namespace == r.namespace && k.name == r.name);
        if this_pass || ctx.engine.exists(&r.kind, &r.namespace, &r.name).await? {
            kept.push(r.clone());
        }
    }
    if !kept.is_empty() {
        let on = cr.object_ref(&());
        ctx.tools
            .tell(&on, events::Notice::Retained, None, retained_note(&kept))
            .await;
    }
    Ok(())
}

/// The `Retained` note: every kept object by name, data first (volumes,
/// then the Secrets that open them), CRDs last, so a cut note loses CRD
/// names before it loses a volume's.
pub(super) fn retained_note(kept: &[ReleasedObject]) -> String {
    let group = |pred: &dyn Fn(&str) -> bool| -> Vec<String> {
        kept.iter()
            .filter(|r| pred(r.kind.as_str()))
            .map(|r| match r.namespace.as_str() {
                "" => r.name.clone(),
                ns => format!("{ns}/{}", r.name),
            })
            .collect()
    };
    let is_crd = |k: &str| k.starts_with("CustomResourceDefinition");
    let known = |k: &str| matches!(k, "PersistentVolumeClaim" | "Secret") || is_crd(k);
    let mut parts = Vec::new();
    for (label, names) in [
        ("volumes", group(&|k| k == "PersistentVolumeClaim")),
        ("Secrets", group(&|k| k == "Secret")),
        ("other", group(&|k| !known(k))),
        ("CRDs", group(&is_crd)),
    ] {
        if !names.is_empty() {
            parts.push(format!("{label} {}", names.join(", ")));
        }
    }
    format!(
        "kept on removal: {} (volumes hold data and their Secrets open it; CRDs hold users' objects: crdPolicy Delete removes them once none is left)",
        parts.join("; ")
    )
}

/// The volumes and Secrets an earlier prune released (an upgrade that
/// changed the database engine, a switch to an external database) are the
/// component's data still: when the spec no longer keeps data (its
/// `retain` says no, as under `volumePolicy: Delete`), they go with the
/// component rather than stay behind, nobody's. Only objects that still
/// carry the component's label: one a person took over (relabelled) stays.
async fn delete_released_data<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    released: &[ReleasedObject],
) -> Result<Vec<String>, Failure> {
    let parent_namespace = cr.namespace().unwrap_or_default();
    let mut out = Vec::new();
    for r in released {
        if !matches!(r.kind.as_str(), "PersistentVolumeClaim" | "Secret") {
            continue;
        }
        let Some(member) = ctx
            .engine
            .get_member(&r.kind, &r.namespace, &r.name)
            .await?
        else {
            continue;
        };
        let ours = member
            .object
            .labels()
            .get(labels::COMPONENT)
            .map(String::as_str)
            == Some(C::Resource::COMPONENT);
        if !ours || ctx.component.retain(cr, &member.object) {
            continue;
        }
        match ctx.engine.delete(&member).await {
            Ok(()) => out.push(format!("{} {}/{}", r.kind, r.namespace, r.name)),
            // The parent's namespace is being deleted (its Role there went
            // first): the object goes with it.
            Err(crate::engine::apply::ApplyError::Api {
                source: kube::Error::Api(e),
                ..
            }) if e.code == 403 && r.namespace == parent_namespace => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(kind: &str, namespace: &str, name: &str) -> ReleasedObject {
        ReleasedObject {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
            message: String::new(),
        }
    }

    #[test]
    fn the_retained_note_names_every_kept_object_data_first() {
        let note = retained_note(&[
            kept(
                "CustomResourceDefinition.apiextensions.k8s.io",
                "",
                "experiments.kubeflow.org",
            ),
            kept("PersistentVolumeClaim", "kubeflow", "katib-mysql"),
            kept("Secret", "kubeflow", "katib-mysql-secrets"),
        ]);
        assert!(
            note.starts_with(
                "kept on removal: volumes kubeflow/katib-mysql; Secrets kubeflow/katib-mysql-secrets; CRDs experiments.kubeflow.org"
            ),
            "{note}"
        );
    }
}
