//! What the operator knows of Istio: the bundle's three files, that it lives
//! in `istio-system` rather than the CR's namespace (the CNI node agent too,
//! which the bundle puts in `kube-system`), its two workloads, the gateway
//! switch, the mesh config, and what the login needs of it (see `login`).

use kubeflow_operator::api::components::istio::IstioWorkload;
use kubeflow_operator::api::{ComponentResource, Istio, Platform};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::component::{Component, Draft, Refusal};
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::kube::core::GroupVersionKind;
use kubeflow_operator::rbac::Permissions;
use kubeflow_operator::render::{Layout, Target};
use kubeflow_operator::{openshift, transform};
use serde_json::{Value, json};

const ISTIOD: &str = "istiod";
const GATEWAY: &str = "istio-ingressgateway";
/// The namespace the bundle installs the control plane into; it stays there.
const CONTROL_PLANE_NAMESPACE: &str = "istio-system";
/// The bundle's objects for Kubeflow's own namespace (Sidecar exceptions) move to the CR's.
const KUBEFLOW_NAMESPACE: &str = "kubeflow";
/// Where the bundle puts the CNI node agent. It moves to the control plane's
/// namespace (as Istio's own Helm install does) so that no operator needs
/// rights in `kube-system`. The node agent is privileged, so that namespace
/// enforces the `privileged` Pod Security level instead of the bundle's
/// `restricted` (audited still at `restricted`); only cluster admins and the
/// Istio operator may create pods there.
const CNI_BUNDLE_NAMESPACE: &str = "kube-system";
const POD_SECURITY_ENFORCE: &str = "pod-security.kubernetes.io/enforce";
const POD_SECURITY_AUDIT: &str = "pod-security.kubernetes.io/audit";
/// The OpenShift SCC Istio's ServiceAccounts are granted.
const SCC: &str = "anyuid";
/// The SCC of the CNI node agent, which edits the node's network setup.
const CNI_SCC: &str = "privileged";

/// The Istio component.
pub struct IstioComponent;

fn named(o: &DynamicObject, name: &str) -> bool {
    o.metadata.name.as_deref() == Some(name)
}

#[async_trait]
impl Component for IstioComponent {
    type Resource = Istio;
    type Inputs = ();

    const LAYOUT: Layout = Layout {
        from_namespaces: &[KUBEFLOW_NAMESPACE],
        target: Target::ResourceNamespace,
        workloads: &[ISTIOD],
    };

    fn permissions(&self) -> Permissions {
        Permissions::bundles(&[Istio::COMPONENT])
            .openshift_scc(&[SCC, CNI_SCC])
            .with_namespaced([crate::login::gateway_rule()])
    }

    fn watched_kinds(&self) -> Vec<GroupVersionKind> {
        vec![
            GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "RoleBinding"),
            crate::login::gateway_kind(),
        ]
    }

    fn prepare(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        place_cni(&mut draft.objects);
        Ok(())
    }

    fn customise(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let (cr, ctx) = (draft.cr, draft.ctx);
        let objects = &mut draft.objects;
        let spec = &cr.spec;
        let gateway = spec.ingress_gateway.clone().unwrap_or_default();
        if gateway.enabled == Some(false) {
            transform::remove(objects, |o| {
                o.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(GATEWAY))
            });
        }
        scale(objects, ISTIOD, &spec.istiod.clone().unwrap_or_default());
        scale(objects, GATEWAY, &gateway.workload);
        let oauth2_proxy = spec.oauth2_proxy == Some(true);
        let mut mesh = spec.mesh_config.clone().unwrap_or_default();
        if oauth2_proxy {
            crate::login::add_extension_provider(&mut mesh);
            crate::login::refresh_keys_often(objects, ISTIOD);
            objects.push(crate::login::kubeflow_gateway(ctx.namespace));
        }
        if !mesh.is_empty() {
            merge_mesh_config(objects, &mesh)?;
        }
        if ctx.platform == Platform::OpenShift {
            grant_sccs(objects);
        }
        Ok(())
    }
}

/// Moves the CNI node agent from `kube-system` to the control plane's
/// namespace, which then must admit a privileged pod.
fn place_cni(objects: &mut Vec<DynamicObject>) {
    transform::set_namespace(objects, CONTROL_PLANE_NAMESPACE, &[CNI_BUNDLE_NAMESPACE]);
    for ns in objects
        .iter_mut()
        .filter(|o| kind(o) == "Namespace" && named(o, CONTROL_PLANE_NAMESPACE))
    {
        let labels = ns.metadata.labels.get_or_insert_with(Default::default);
        if labels.contains_key(POD_SECURITY_ENFORCE) {
            labels.insert(POD_SECURITY_ENFORCE.into(), "privileged".into());
            labels.insert(POD_SECURITY_AUDIT.into(), "restricted".into());
        }
    }
}

/// Replicas and resources of one workload; its autoscaler's floor follows
/// the replicas, or it would scale the workload back.
fn scale(objects: &mut [DynamicObject], workload: &str, settings: &IstioWorkload) {
    if let Some(r) = settings.replicas {
        transform::set_replicas(objects, &[workload], r);
        for hpa in objects
            .iter_mut()
            .filter(|o| kind(o) == "HorizontalPodAutoscaler" && named(o, workload))
        {
            hpa.data["spec"]["minReplicas"] = json!(r.max(1));
            let max = hpa
                .data
                .pointer("/spec/maxReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            hpa.data["spec"]["maxReplicas"] = json!(max.max(i64::from(r)));
        }
    }
    if let Some(res) = &settings.resources {
        transform::set_resources(objects, &[workload], &[], res);
    }
}

/// Merges the CR's `meshConfig` into the bundle's `istio` ConfigMap,
/// refusing settings Istio does not know or of the wrong type.
fn merge_mesh_config(
    objects: &mut [DynamicObject],
    overrides: &serde_json::Map<String, Value>,
) -> Result<(), Refusal> {
    crate::mesh::check(overrides).map_err(|m| Refusal::new(Reason::InvalidSpec, m))?;
    let cm = objects
        .iter_mut()
        .find(|o| {
            kind(o) == "ConfigMap"
                && named(o, "istio")
                && o.metadata.namespace.as_deref() == Some(CONTROL_PLANE_NAMESPACE)
        })
        .ok_or_else(|| {
            Refusal::new(
                Reason::BundleError,
                "the istio bundle has no istio ConfigMap for meshConfig",
            )
        })?;
    let base = cm
        .data
        .pointer("/data/mesh")
        .and_then(Value::as_str)
        .unwrap_or("");
    let merged = transform::merge_yaml(base, &Value::Object(overrides.clone()))
        .map_err(|m| Refusal::new(Reason::InvalidSpec, m))?;
    cm.data["data"]["mesh"] = json!(merged);
    Ok(())
}

/// On OpenShift: the sidecar injector and gateways need anyuid; the CNI
/// node agent is privileged.
fn grant_sccs(objects: &mut Vec<DynamicObject>) {
    let accounts: Vec<(String, String)> = objects
        .iter()
        .filter(|o| kind(o) == "ServiceAccount")
        .filter_map(|sa| Some((sa.metadata.namespace.clone()?, sa.metadata.name.clone()?)))
        .collect();
    for (ns, name) in accounts {
        let scc = if name == "istio-cni" { CNI_SCC } else { SCC };
        objects.push(openshift::scc_grant(&ns, &name, scc));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::component::{RenderContext, assert_permitted, every_version};

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&IstioComponent, |dir| {
            let mut specs = every_version(dir, "istio");
            let with_login: Vec<Value> = specs
                .iter()
                .map(|s| json!({"version": s["version"], "oauth2Proxy": true}))
                .collect();
            specs.extend(with_login);
            specs
        });
    }

    #[test]
    fn with_the_login_on_the_mesh_asks_oauth2_proxy_and_the_web_apps_gateway_exists() {
        use kubeflow_operator::component::{find, render_spec};
        let spec = json!({"version": "1.30.1", "oauth2Proxy": true,
            "meshConfig": {"accessLogFile": "/dev/stdout"}});
        let r = render_spec(&IstioComponent, spec, &()).expect("render");
        let mesh = find(&r, "ConfigMap", "istio").expect("mesh config");
        let text = mesh.data["data"]["mesh"].as_str().unwrap_or("");
        assert!(text.contains("accessLogFile: /dev/stdout"), "{text}");
        assert!(
            text.contains("oauth2-proxy.oauth2-proxy.svc.cluster.local"),
            "{text}"
        );
        let gw = find(&r, "Gateway", crate::login::GATEWAY).expect("gateway");
        assert_eq!(gw.metadata.namespace.as_deref(), Some("kubeflow"));
        let istiod = find(&r, "Deployment", ISTIOD).expect("istiod");
        let env = istiod.data["spec"]["template"]["spec"]["containers"][0]["env"].to_string();
        assert!(env.contains("PILOT_JWT_PUB_KEY_REFRESH_INTERVAL"), "{env}");
        let off = render_spec(&IstioComponent, json!({"version": "1.30.1"}), &()).expect("render");
        assert!(find(&off, "Gateway", crate::login::GATEWAY).is_none());
    }

    #[test]
    fn replicas_follow_into_the_autoscaler_and_the_gateway_can_go() {
        use kubeflow_operator::component::{find, render_spec};
        let spec = json!({"version": "1.29.0", "istiod": {"replicas": 3},
            "ingressGateway": {"enabled": false}, "meshConfig": {"accessLogFile": "/dev/stdout"}});
        let r = render_spec(&IstioComponent, spec, &()).expect("render");
        let istiod = find(&r, "Deployment", ISTIOD).expect("istiod");
        assert_eq!(istiod.data["spec"]["replicas"], json!(3));
        if let Some(hpa) = find(&r, "HorizontalPodAutoscaler", ISTIOD) {
            assert_eq!(hpa.data["spec"]["minReplicas"], json!(3));
            assert!(hpa.data["spec"]["maxReplicas"].as_i64() >= Some(3));
        }
        assert!(find(&r, "Deployment", GATEWAY).is_none());
        let mesh = find(&r, "ConfigMap", "istio").expect("mesh config");
        assert!(
            mesh.data["data"]["mesh"]
                .as_str()
                .unwrap_or("")
                .contains("accessLogFile: /dev/stdout")
        );
        let typo = json!({"version": "1.29.0", "meshConfig": {"acessLogFile": "/dev/stdout"}});
        assert!(render_spec(&IstioComponent, typo, &()).is_err());
    }

    #[test]
    fn nothing_goes_to_kube_system() {
        let dir = kubeflow_operator::component::manifests_dir();
        let bundles = kubeflow_operator::bundle::BundleCache::default();
        for spec in every_version(&dir, "istio") {
            let cr: Istio = serde_json::from_value(json!({
                "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Istio",
                "metadata": {"name": "kubeflow", "namespace": "kubeflow"}, "spec": spec,
            }))
            .expect("cr");
            let ctx = RenderContext::of(&cr, &dir, &bundles, Platform::Kubernetes);
            let rendered = IstioComponent.render(&cr, &ctx, &()).expect("render");
            let scope = kubeflow_operator::scope::NamespaceScope::only(&[
                "kubeflow".into(),
                CONTROL_PLANE_NAMESPACE.into(),
            ]);
            assert_eq!(
                scope.outside(&rendered.objects),
                Vec::<String>::new(),
                "{spec}"
            );
            let cni = rendered
                .objects
                .iter()
                .find(|o| kind(o) == "DaemonSet" && named(o, "istio-cni-node"))
                .expect("the CNI node agent");
            assert_eq!(
                cni.metadata.namespace.as_deref(),
                Some(CONTROL_PLANE_NAMESPACE)
            );
        }
    }
}
