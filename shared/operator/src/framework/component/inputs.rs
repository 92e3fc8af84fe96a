//! What a reconcile reads before it renders: the platform, the ConfigMaps
//! the spec points at (overrides, image digests, each kept as last read
//! when it goes missing), and the rendered objects built from them.

use kube::api::{Api, DynamicObject};
use kube::{Resource, ResourceExt};
use kubeflow_api::{ComponentResource, Platform};

use super::context::Context;
use super::{Component, Refusal, RenderContext, Rendered};
use crate::base::bundle::BundleCache;
use crate::base::conditions::Reason;
use crate::framework::controller::Failure;

pub(super) async fn platform_of<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
) -> Result<Platform, Failure> {
    match cr.common().shared.platform {
        Some(p @ (Platform::Kubernetes | Platform::OpenShift)) => Ok(p),
        _ => {
            if let Some(p) = ctx.detected_platform.lock().ok().and_then(|g| *g) {
                return Ok(p);
            }
            let p = crate::base::platform::detect(&ctx.tools.client)
                .await
                .map_err(|e| Failure::api("detect the platform", e))?;
            if let Ok(mut g) = ctx.detected_platform.lock() {
                *g = Some(p);
            }
            Ok(p)
        }
    }
}

/// Where the CR installs, what it points at, and its objects: the
/// rendered objects, or why they cannot be.
pub(super) async fn render<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    platform: Platform,
    missing: &mut Vec<String>,
) -> Result<Rendered, Failure> {
    render_with(cr, ctx, platform, &ctx.bundles, true, missing).await
}

/// [`render`] with another bundle cache, and with or without the overrides
/// (without: to plan an upgrade an override does not fit).
pub(super) async fn render_with<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    platform: Platform,
    bundles: &BundleCache,
    with_overrides: bool,
    missing: &mut Vec<String>,
) -> Result<Rendered, Failure> {
    let ns = cr.namespace().unwrap_or_default();
    // Outside the allowed namespaces nothing is read or written: a CR in a
    // tenant's namespace must not get a controller with cluster-wide rights.
    if !ctx.scope.allows(&ns) {
        return Err(Refusal::new(
            Reason::NamespaceNotAllowed,
            ctx.scope.refusal(std::slice::from_ref(&ns)),
        )
        .into());
    }
    let inputs = ctx.component.dereference(cr, &ctx.tools.client).await?;
    let render_ctx = RenderContext::of(cr, &ctx.manifests_dir, bundles, platform);
    let mut rendered = ctx.component.render(cr, &render_ctx, &inputs)?;
    // The user's patches, after the component's own settings and before the
    // digests are pinned (an image an override sets is pinned too).
    let mut lists: Vec<(String, Vec<kubeflow_api::Override>)> = Vec::new();
    if with_overrides {
        lists = apply_overrides(cr, ctx, &mut rendered, missing).await?;
    }
    // Over the final objects, after every override: an override may put
    // back a secret the component's own settings replaced (a demo user,
    // the demo cookie secret, a demo database password); the check names
    // the override that did.
    let named: Vec<(&str, &[kubeflow_api::Override])> = lists
        .iter()
        .map(|(field, listed)| (field.as_str(), listed.as_slice()))
        .collect();
    crate::render::known_secrets::refuse(&rendered.objects, &named)?;
    if let Some(name) = &cr.common().shared.image_digests {
        let key = (
            ns.as_str(),
            cr.meta().name.as_deref().unwrap_or_default(),
            name.as_str(),
        );
        let digests = or_last_read(
            read_digests(ctx, &ns, name).await,
            |d| ctx.last_read.keep_digests(key, d),
            || ctx.last_read.digests(key),
            "digests",
            missing,
        )?;
        pin_digests(&ns, name, &digests, &mut rendered.objects)?;
    }
    Ok(rendered)
}

/// Applies the resource's own overrides, then its ConfigMap's (the last
/// read when the map has gone missing): each list with the field that
/// names it.
async fn apply_overrides<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    rendered: &mut Rendered,
    missing: &mut Vec<String>,
) -> Result<Vec<(String, Vec<kubeflow_api::Override>)>, Failure> {
    let own = &cr.common().overrides;
    crate::render::overrides::apply(
        &mut rendered.objects,
        own,
        "spec.overrides",
        &rendered.version,
    )?;
    let mut lists = vec![("spec.overrides".to_string(), own.clone())];
    if let Some(name) = &cr.common().overrides_config_map {
        let ns = cr.namespace().unwrap_or_default();
        let key = (
            ns.as_str(),
            cr.meta().name.as_deref().unwrap_or_default(),
            name.as_str(),
        );
        let listed = or_last_read(
            overrides_from_config_map(ctx, &ns, name).await,
            |l| ctx.last_read.keep_overrides(key, l),
            || ctx.last_read.overrides(key),
            "overrides",
            missing,
        )?;
        let field = format!("spec.overridesConfigMap {ns}/{name}: overrides");
        crate::render::overrides::apply(&mut rendered.objects, &listed, &field, &rendered.version)?;
        lists.push((field, listed));
    }
    Ok(lists)
}

/// The ConfigMap `name` a spec `field` names, in the CR's namespace:
/// refused when the name is not one or the map does not exist.
pub(super) async fn config_map<C: Component>(
    ctx: &Context<C>,
    namespace: &str,
    name: &str,
    field: &str,
) -> Result<k8s_openapi::api::core::v1::ConfigMap, Failure> {
    if !crate::render::validate::is_dns_subdomain(name) {
        return Err(Refusal::new(
            Reason::InvalidSpec,
            format!(
                "{field}: {:?} is not a ConfigMap name (lowercase letters, digits, '-' and '.', at most 253)",
                crate::base::conditions::truncate(name, 256)
            ),
        )
        .into());
    }
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(ctx.tools.client.clone(), namespace);
    match cms
        .get_opt(name)
        .await
        .map_err(|e| Failure::api("read a ConfigMap the spec names", e))?
    {
        Some(cm) => Ok(cm),
        None => Err(Refusal::new(
            Reason::PrerequisiteMissing,
            format!("{field}: ConfigMap {namespace}/{name} does not exist"),
        )
        .into()),
    }
}

/// What a referenced ConfigMap holds, as `read` it now (kept by `keep`);
/// or, when the map has gone missing since, what it last held (`last`),
/// the gap noted in `missing` for `Degraded`. Missing and never read:
/// refused as `read` refused it.
pub(super) fn or_last_read<T>(
    read: Result<T, Failure>,
    keep: impl FnOnce(&T),
    last: impl FnOnce() -> Option<T>,
    what: &str,
    missing: &mut Vec<String>,
) -> Result<T, Failure> {
    match read {
        Ok(v) => {
            keep(&v);
            Ok(v)
        }
        Err(Failure::Refused(r)) if r.reason == Reason::PrerequisiteMissing => {
            let kept = last().ok_or(Failure::Refused(r.clone()))?;
            missing.push(format!(
                "{}; the {what} it last held are applied until it is back",
                r.message
            ));
            Ok(kept)
        }
        Err(e) => Err(e),
    }
}

/// The overrides ConfigMap `name` holds (key `overrides`): refused when the
/// map is missing or the key is absent or malformed.
pub(super) async fn overrides_from_config_map<C: Component>(
    ctx: &Context<C>,
    namespace: &str,
    name: &str,
) -> Result<Vec<kubeflow_api::Override>, Failure> {
    let field = "spec.overridesConfigMap";
    let cm = config_map(ctx, namespace, name, field).await?;
    let Some(text) = cm.data.as_ref().and_then(|d| d.get("overrides")) else {
        return Err(Refusal::new(
            Reason::InvalidSpec,
            format!("{field}: ConfigMap {namespace}/{name} has no key overrides"),
        )
        .into());
    };
    crate::render::overrides::parse(text).map_err(|e| {
        Refusal::new(
            Reason::InvalidSpec,
            format!("{field}: ConfigMap {namespace}/{name} key overrides: {e}"),
        )
        .into()
    })
}

/// The digests of ConfigMap `name` (key `digests`): refused when the map
/// is missing or malformed.
pub(super) async fn read_digests<C: Component>(
    ctx: &Context<C>,
    namespace: &str,
    name: &str,
) -> Result<std::collections::BTreeMap<String, String>, Failure> {
    let field = "spec.imageDigests";
    let cm = config_map(ctx, namespace, name, field).await?;
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("digests"))
        .cloned()
        .unwrap_or_default();
    crate::render::images::parse_digests(&text).map_err(|e| {
        Refusal::new(
            Reason::InvalidSpec,
            format!("{field}: ConfigMap {namespace}/{name} key digests, {e}"),
        )
        .into()
    })
}

/// Pins the rendered images by `digests` (of ConfigMap `name`): refused,
/// with nothing changed, when an image lacks one.
pub(super) fn pin_digests(
    namespace: &str,
    name: &str,
    digests: &std::collections::BTreeMap<String, String>,
    objects: &mut [DynamicObject],
) -> Result<(), Failure> {
    crate::render::images::pin(objects, digests).map_err(|missing| {
        Refusal::new(
            Reason::ImageDigestMissing,
            format!(
                "spec.imageDigests: ConfigMap {namespace}/{name} has no digest for {}",
                missing.join(", ")
            ),
        )
        .into()
    })
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn missing_map() -> Failure {
        Refusal::new(
            Reason::PrerequisiteMissing,
            "spec.overrides: ConfigMap team/tweaks does not exist",
        )
        .into()
    }

    #[test]
    fn a_read_value_is_kept_and_used() {
        let kept = Cell::new(0);
        let mut missing = Vec::new();
        let v = or_last_read(
            Ok(7),
            |v| kept.set(*v),
            || panic!("not consulted"),
            "overrides",
            &mut missing,
        );
        assert_eq!(v.ok(), Some(7));
        assert_eq!(kept.get(), 7);
        assert!(missing.is_empty());
    }

    #[test]
    fn a_map_gone_missing_is_applied_as_last_read_and_said() {
        let mut missing = Vec::new();
        let v = or_last_read(
            Err(missing_map()),
            |_| panic!("nothing new to keep"),
            || Some(3),
            "overrides",
            &mut missing,
        );
        assert_eq!(v.ok(), Some(3));
        assert_eq!(
            missing,
            [
                "spec.overrides: ConfigMap team/tweaks does not exist; the overrides it last held are applied until it is back"
            ]
        );
    }

    #[test]
    fn a_map_never_read_is_refused_and_other_failures_pass_through() {
        let mut missing = Vec::new();
        let refused = or_last_read::<u8>(
            Err(missing_map()),
            |_| {},
            || None,
            "overrides",
            &mut missing,
        );
        assert!(
            matches!(refused, Err(Failure::Refused(r)) if r.reason == Reason::PrerequisiteMissing)
        );
        let transient = Failure::transient(Reason::ApiError, "the API server timed out");
        let passed = or_last_read::<u8>(
            Err(transient),
            |_| {},
            || panic!("a passing failure is not a missing map"),
            "overrides",
            &mut missing,
        );
        assert!(matches!(passed, Err(Failure::Transient { .. })));
        assert!(missing.is_empty());
    }

    fn deployment(image: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team"},
            "spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}}
        }))
        .expect("deployment")
    }

    #[test]
    fn images_are_pinned_or_the_missing_digest_is_named() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let digests = BTreeMap::from([("ghcr.io/kubeflow/web:v1".to_string(), digest.clone())]);
        let mut pinned = [deployment("ghcr.io/kubeflow/web:v1")];
        pin_digests("team", "digests", &digests, &mut pinned).expect("pinned");
        assert_eq!(
            pinned[0]
                .data
                .pointer("/spec/template/spec/containers/0/image"),
            Some(&json!(format!("ghcr.io/kubeflow/web:v1@{digest}")))
        );

        let mut unpinned = [deployment("ghcr.io/kubeflow/api:v1")];
        let refused = pin_digests("team", "digests", &digests, &mut unpinned)
            .expect_err("no digest for it")
            .to_string();
        assert!(
            refused.ends_with(
                "spec.imageDigests: ConfigMap team/digests has no digest for ghcr.io/kubeflow/api:v1"
            ),
            "{refused}"
        );
        assert_eq!(
            unpinned[0]
                .data
                .pointer("/spec/template/spec/containers/0/image"),
            Some(&json!("ghcr.io/kubeflow/api:v1")),
            "nothing changed"
        );
    }
}
