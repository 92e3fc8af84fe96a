//! What the operator knows of GPU device plugins: bundle layout
//! (`device-plugins/<type>/<version>`), one DaemonSet per entry, default node
//! selectors, Intel's shared-device flag, and per-plugin placement status.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kubeflow_operator::api::{
    DevicePlugin, DevicePlugins, DevicePluginsStatus, PluginStatus, PluginType,
};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::component::{Component, DereferenceError, Refusal, RenderContext, Rendered};
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::{Api, DynamicObject, ListParams};
use kubeflow_operator::kube::{Client, ResourceExt};
use kubeflow_operator::rbac::{self, Permissions};
use kubeflow_operator::render::{self, Layout, Placement, Target};
use serde_json::{Value, json};

use crate::overlap::can_overlap;

/// Label that tells the plugin DaemonSets (and their pods) apart.
const PLUGIN_LABEL: &str = "components.kubeflow.org/device-plugin";

/// The device-plugins component.
pub struct DevicePluginsComponent;

/// What every entry's DaemonSet name ends with (the admission pins allow
/// the operator DaemonSets of these names only).
const SUFFIX: &str = "-device-plugin";

/// DaemonSet name of an entry.
fn daemonset_name(plugin: &DevicePlugin) -> String {
    format!("{}{SUFFIX}", plugin.name)
}

fn node_selector(
    plugin: &DevicePlugin,
    bundle_selector: Option<&Value>,
) -> BTreeMap<String, String> {
    if let Some(s) = &plugin.node_selector {
        return s.clone();
    }
    let mut sel: BTreeMap<String, String> = bundle_selector
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    sel.extend(plugin.plugin_type.default_node_selector());
    sel
}

/// Refuses two entries of one type that could select the same node.
fn check_overlaps(plugins: &[DevicePlugin]) -> Result<(), Refusal> {
    for (i, a) in plugins.iter().enumerate() {
        for b in &plugins[i + 1..] {
            if a.plugin_type == b.plugin_type
                && can_overlap(&node_selector(a, None), &node_selector(b, None))
            {
                return Err(Refusal::new(
                    Reason::InvalidSpec,
                    format!(
                        "plugins {:?} and {:?} are both {} and their node selectors can select the same node; give them disjoint nodeSelectors",
                        a.name,
                        b.name,
                        a.plugin_type.as_str()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Refuses entries that could share a node with an entry of the same type
/// in an older `DevicePlugins` CR elsewhere in the cluster (the older one
/// keeps its nodes; two plugins for one device on one node fight over it).
fn check_overlaps_with(plugins: &[DevicePlugin], others: &[DevicePlugins]) -> Result<(), Refusal> {
    for other in others {
        for a in plugins {
            if let Some(b) = other.spec.plugins.iter().find(|b| {
                a.plugin_type == b.plugin_type
                    && can_overlap(&node_selector(a, None), &node_selector(b, None))
            }) {
                return Err(Refusal::new(
                    Reason::InvalidSpec,
                    format!(
                        "plugin {:?} ({}) can select the same nodes as plugin {:?} of DevicePlugins {}/{}, which was there first; give it disjoint nodeSelectors",
                        a.name,
                        a.plugin_type.as_str(),
                        b.name,
                        other.namespace().unwrap_or_default(),
                        other.name_any()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// One plugin entry's DaemonSet from the bundle: its own name, selector and
/// node placement, image, arguments and tolerations. (Long on purpose: the
/// DaemonSet's fields in the order a person checks them.)
fn render_plugin(
    plugin: &DevicePlugin,
    ctx: &RenderContext<'_>,
) -> Result<Vec<DynamicObject>, Refusal> {
    if let Some(image) = &plugin.image {
        kubeflow_operator::validate::image(&format!("spec.plugins[{}].image", plugin.name), image)
            .map_err(|m| Refusal::new(Reason::InvalidSpec, m))?;
    }
    let component = format!("device-plugins/{}", plugin.plugin_type.as_str());
    let bundle = ctx.bundle_at(&component, &plugin.version)?;
    let mut out = Vec::new();
    for mut obj in bundle
        .objects()
        .into_iter()
        .filter(|o| kind(o) == "DaemonSet")
    {
        let name = daemonset_name(plugin);
        obj.metadata.name = Some(name.clone());
        obj.metadata.namespace = Some(ctx.namespace.to_string());
        let selector = json!({ PLUGIN_LABEL: name });
        obj.data["spec"]["selector"] = json!({ "matchLabels": selector });
        let template_labels = obj.data.pointer_mut("/spec/template/metadata").map(|m| {
            m.as_object_mut()
                .map(|m| m.entry("labels").or_insert(json!({})).clone())
        });
        let mut labels = match template_labels.flatten() {
            Some(Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        labels.insert(PLUGIN_LABEL.into(), json!(name));
        obj.data["spec"]["template"]["metadata"]["labels"] = Value::Object(labels);
        let pod = &mut obj.data["spec"]["template"]["spec"];
        let sel = node_selector(plugin, pod.get("nodeSelector"));
        pod["nodeSelector"] = json!(sel);
        if let Some(t) = &plugin.tolerations {
            pod["tolerations"] = json!(t);
        }
        // Critical priority classes are admitted only in kube-system.
        if ctx.namespace != "kube-system"
            && pod
                .get("priorityClassName")
                .and_then(Value::as_str)
                .is_some_and(|p| p.starts_with("system-"))
            && let Some(m) = pod.as_object_mut()
        {
            m.remove("priorityClassName");
        }
        if let Some(c) = pod.pointer_mut("/containers/0") {
            if let Some(image) = &plugin.image {
                c["image"] = json!(image);
            }
            let mut args: Vec<String> = plugin.args.clone().unwrap_or_default();
            if let Some(n) = plugin.shared_dev_num {
                args.push(format!("-shared-dev-num={n}"));
            }
            if !args.is_empty() {
                c["args"] = json!(args);
            }
        }
        out.push(obj);
    }
    if out.is_empty() {
        return Err(Refusal::new(
            Reason::BundleError,
            format!("bundle {component}/{} has no DaemonSet", plugin.version),
        ));
    }
    Ok(out)
}

#[async_trait]
impl Component for DevicePluginsComponent {
    type Resource = DevicePlugins;
    /// The other `DevicePlugins` CRs that came first.
    type Inputs = Vec<DevicePlugins>;

    /// Nothing is moved by name, and the workloads are the DaemonSets of
    /// the plugins the resource lists, which `render` names itself.
    const LAYOUT: Layout = Layout {
        from_namespaces: &[],
        target: Target::ResourceNamespace,
        workloads: &[],
    };

    async fn dereference(
        &self,
        cr: &DevicePlugins,
        client: &Client,
    ) -> Result<Vec<DevicePlugins>, DereferenceError> {
        let all: Api<DevicePlugins> = Api::all(client.clone());
        let list = all
            .list(&ListParams::default())
            .await
            .map_err(|e| DereferenceError::Api("list the DevicePlugins CRs", e))?;
        let mine = (cr.creation_timestamp(), cr.namespace(), cr.name_any());
        Ok(list
            .items
            .into_iter()
            .filter(|o| o.metadata.deletion_timestamp.is_none() && o.uid() != cr.uid())
            // Older first; on a tie, the one named first.
            .filter(|o| (o.creation_timestamp(), o.namespace(), o.name_any()) < mine)
            .collect())
    }

    fn permissions(&self) -> Permissions {
        let folders: Vec<String> = [PluginType::NvidiaGpu, PluginType::IntelGpu]
            .iter()
            .map(|t| format!("device-plugins/{}", t.as_str()))
            .collect();
        Permissions {
            bundles: folders,
            // Only the DaemonSets of the bundles are applied, one per
            // plugin entry, named after it (`daemonset_name`).
            only_kinds: Some(vec!["DaemonSet".into()]),
            workload_suffix: Some(SUFFIX.into()),
            ..Default::default()
        }
        // Status lists the plugin pods to name the nodes they are ready on.
        .with_namespaced([rbac::rule("", &["pods"], &["list"])])
    }

    /// One bundle per plugin, each at its own version.
    fn render(
        &self,
        cr: &DevicePlugins,
        ctx: &RenderContext<'_>,
        others: &Vec<DevicePlugins>,
    ) -> Result<Rendered, Refusal> {
        let plugins = &cr.spec.plugins;
        check_overlaps(plugins)?;
        check_overlaps_with(plugins, others)?;
        let mut objects = Vec::new();
        for p in plugins {
            objects.extend(render_plugin(p, ctx)?);
        }
        // Shared image and resource overrides apply to every plugin DaemonSet.
        let workloads: Vec<String> = plugins.iter().map(daemonset_name).collect();
        let names: Vec<&str> = workloads.iter().map(String::as_str).collect();
        let mut common = cr.spec.common.clone();
        common.node_selector = None;
        common.tolerations = None;
        common.replicas = None;
        render::apply_common(
            &mut objects,
            &common,
            &Placement {
                from_namespaces: &[],
                target: ctx.namespace,
                workloads: &names,
            },
            ctx.platform,
        )?;
        let version = plugins
            .iter()
            .map(|p| format!("{}={}", p.name, p.version))
            .collect::<Vec<_>>()
            .join(",");
        Ok(Rendered { objects, version })
    }

    async fn report(
        &self,
        cr: &DevicePlugins,
        live: &[DynamicObject],
        client: &Client,
        status: &mut DevicePluginsStatus,
    ) {
        let ns = cr.namespace().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let mut plugins = Vec::new();
        for p in &cr.spec.plugins {
            let name = daemonset_name(p);
            let ds = live
                .iter()
                .find(|o| kind(o) == "DaemonSet" && o.metadata.name.as_deref() == Some(&name));
            let int = |ptr: &str| {
                ds.and_then(|d| d.data.pointer(ptr))
                    .and_then(Value::as_i64)
                    .and_then(|n| i32::try_from(n).ok())
                    .unwrap_or(0)
            };
            let mut nodes: Vec<String> = pods
                .list(&ListParams::default().labels(&format!("{PLUGIN_LABEL}={name}")))
                .await
                .map(|l| l.items)
                .unwrap_or_default()
                .into_iter()
                .filter(|pod| {
                    pod.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                        && pod.metadata.deletion_timestamp.is_none()
                })
                .filter_map(|pod| pod.spec.and_then(|s| s.node_name))
                .collect();
            nodes.sort();
            plugins.push(PluginStatus {
                name: p.name.clone(),
                plugin_type: p.plugin_type.as_str().to_string(),
                version: p.version.clone(),
                desired: int("/status/desiredNumberScheduled"),
                ready: int("/status/numberReady"),
                available: int("/status/numberAvailable"),
                nodes,
            });
        }
        status.plugin_count = i32::try_from(cr.spec.plugins.len()).ok();
        status.plugins = plugins;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::component::{assert_permitted, every_version};

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&DevicePluginsComponent, |dir| {
            let nvidia = every_version(dir, "device-plugins/nvidia-gpu");
            let intel = every_version(dir, "device-plugins/intel-gpu");
            nvidia
                .iter()
                .zip(&intel)
                .map(|(n, i)| {
                    serde_json::json!({"plugins": [
                        {"name": "nvidia", "type": "nvidia-gpu", "version": n["version"]},
                        {"name": "intel", "type": "intel-gpu", "version": i["version"]},
                    ]})
                })
                .collect::<Vec<_>>()
        });
    }
}
