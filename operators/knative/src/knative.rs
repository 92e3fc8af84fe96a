//! What the operator knows of Knative: Serving with net-istio in
//! `knative-serving`, Eventing in `knative-eventing` when asked, the Istio
//! cluster-local gateway from the platform glue of the same Kubeflow
//! release, and where the domain, the ingress class and the Kubeflow
//! gateway are configured.

use kubeflow_operator::api::{ComponentResource, Knative};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::component::{Component, DereferenceError, Draft, Refusal, require_crd};
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::Client;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::rbac::Permissions;
use kubeflow_operator::render::{Layout, Target};
use kubeflow_operator::serde_json::{Map, Value};
use kubeflow_operator::transform;

/// Serving's namespace (upstream's, kept whatever the resource's).
const SERVING_NAMESPACE: &str = "knative-serving";
/// Nothing of these bundles lives in Kubeflow's namespace: their objects
/// stay where upstream puts them (`knative-serving`, `knative-eventing`,
/// and the gateway's `istio-system`).
const MOVED_FROM: &[&str] = &["kubeflow"];
/// The label value of every Eventing object.
const EVENTING: &str = "knative-eventing";
/// Serving's workloads: replicas, resources and scheduling apply to them.
const WORKLOADS: [&str; 6] = [
    "controller",
    "webhook",
    "activator",
    "autoscaler",
    "net-istio-controller",
    "net-istio-webhook",
];
/// The platform glue's folder, of which only the cluster-local gateway is
/// applied (Knative Services' cluster-local traffic goes through it).
const PLATFORM: &str = "platform";
const LOCAL_GATEWAY: &str = "cluster-local-gateway";
/// The kinds of the cluster-local gateway.
const LOCAL_GATEWAY_KINDS: [&str; 8] = [
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "Service",
    "Deployment",
    "HorizontalPodAutoscaler",
    "Gateway",
    "AuthorizationPolicy",
];
/// The platform glue of the Kubeflow release each Knative was released in.
const PLATFORM_BESIDE: &[(&str, &str)] = &[("v1.21.1", "26.03"), ("v1.22.0", "26.03.1")];
/// Where the bundle names Kubeflow's gateway: `gateway.<namespace>.<name>`
/// in config-istio, its namespace upstream's `kubeflow`.
const KUBEFLOW_GATEWAY_KEY: &str = "gateway.kubeflow.kubeflow-gateway";

/// The Knative component.
pub struct KnativeComponent;

#[async_trait]
impl Component for KnativeComponent {
    type Resource = Knative;
    type Inputs = ();

    // Nothing moves: Knative's namespaces are its own, like Istio's (made
    // from the bundle's Namespace objects unless the chart made them; never
    // deleted).
    const LAYOUT: Layout = Layout {
        from_namespaces: MOVED_FROM,
        target: Target::Fixed(SERVING_NAMESPACE),
        workloads: &WORKLOADS,
    };

    fn permissions(&self) -> Permissions {
        Permissions::bundles(&[Knative::COMPONENT]).with_kinds_of(PLATFORM, &LOCAL_GATEWAY_KINDS)
    }

    async fn dereference(&self, _cr: &Knative, client: &Client) -> Result<(), DereferenceError> {
        require_crd(
            client,
            "gateways.networking.istio.io",
            "Knative's networking layer (net-istio) and its gateways are Istio objects; enable istio in the Kubeflow resource (or install Istio)",
        )
        .await
    }

    fn prepare(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let (cr, ctx) = (draft.cr, draft.ctx);
        let spec = &cr.spec;
        let objects = &mut draft.objects;
        // The schema's pattern, again for a resource stored before it
        // bounded each label: Knative makes host names under this domain.
        if let Some(d) = spec.domain.as_deref()
            && !kubeflow_operator::validate::is_domain_name(d)
        {
            return Err(Refusal::new(
                Reason::InvalidSpec,
                format!(
                    "spec.domain {:?} is not a DNS name (labels of lowercase letters, digits and '-', at most 63 characters each, 253 in all)",
                    kubeflow_operator::conditions::truncate(d, 256)
                ),
            ));
        }
        if !spec.eventing.unwrap_or(false) {
            transform::remove(objects, is_eventing);
        }
        let platform = platform_of(&draft.version)?;
        objects.extend(
            ctx.bundle_at(PLATFORM, platform)?
                .objects()
                .into_iter()
                .filter(|o| {
                    o.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(LOCAL_GATEWAY))
                        && LOCAL_GATEWAY_KINDS.contains(&kind(o))
                }),
        );
        Ok(())
    }

    fn customise(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let (cr, ctx) = (draft.cr, draft.ctx);
        let objects = &mut draft.objects;
        let spec = &cr.spec;
        configure(
            objects,
            spec.domain.as_deref(),
            spec.ingress_class.as_deref(),
            ctx.namespace,
        );
        Ok(())
    }
}

/// Whether an object is Knative Eventing's.
fn is_eventing(o: &DynamicObject) -> bool {
    o.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/name"))
        .is_some_and(|n| n == EVENTING)
}

/// The domain (config-domain), the ingress class (config-network) and the
/// Kubeflow gateway of the resource's namespace (config-istio).
fn configure(
    objects: &mut [DynamicObject],
    domain: Option<&str>,
    ingress_class: Option<&str>,
    namespace: &str,
) {
    for cm in objects.iter_mut().filter(|o| {
        kind(o) == "ConfigMap" && o.metadata.namespace.as_deref() == Some(SERVING_NAMESPACE)
    }) {
        let name = cm.metadata.name.clone().unwrap_or_default();
        if !cm.data["data"].is_object() {
            cm.data["data"] = Value::Object(Map::new());
        }
        let Some(data) = cm.data["data"].as_object_mut() else {
            continue;
        };
        match name.as_str() {
            "config-domain" => {
                if let Some(d) = domain {
                    // The release's domain goes; the `_example` documentation stays.
                    data.retain(|k, _| k.starts_with('_'));
                    data.insert(d.to_string(), Value::String(String::new()));
                }
            }
            "config-network" => {
                if let Some(c) = ingress_class {
                    data.insert("ingress-class".into(), Value::String(c.to_string()));
                }
            }
            "config-istio" => {
                if let Some(v) = data.remove(KUBEFLOW_GATEWAY_KEY) {
                    data.insert(format!("gateway.{namespace}.kubeflow-gateway"), v);
                }
            }
            _ => {}
        }
    }
}

/// The platform release paired with a Knative version.
fn platform_of(version: &str) -> Result<&'static str, Refusal> {
    PLATFORM_BESIDE
        .iter()
        .find(|(k, _)| *k == version)
        .map(|(_, p)| *p)
        .ok_or_else(|| {
            Refusal::new(
                Reason::UnknownVersion,
                format!(
                    "Knative {version} has no cluster-local gateway paired with it (known: {})",
                    PLATFORM_BESIDE
                        .iter()
                        .map(|(k, _)| *k)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::component::{assert_permitted, every_version, find, render_spec};
    use kubeflow_operator::serde_json::json;

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&KnativeComponent, |dir| {
            every_version(dir, "knative")
                .into_iter()
                .map(|mut v| {
                    v["eventing"] = json!(true);
                    v
                })
                .collect()
        });
    }

    #[test]
    fn serving_alone_unless_eventing_is_asked_for_each_in_its_namespace() {
        for version in ["v1.21.1", "v1.22.0"] {
            let serving =
                render_spec(&KnativeComponent, json!({"version": version}), &()).expect("render");
            assert!(!serving.objects.iter().any(is_eventing), "{version}");
            let both = render_spec(
                &KnativeComponent,
                json!({"version": version, "eventing": true}),
                &(),
            )
            .expect("render");
            let namespaces: std::collections::BTreeSet<Option<String>> = both
                .objects
                .iter()
                .map(|o| o.metadata.namespace.clone())
                .collect();
            assert_eq!(
                namespaces,
                [
                    None,
                    Some("istio-system".to_string()),
                    Some(EVENTING.to_string()),
                    Some(SERVING_NAMESPACE.to_string())
                ]
                .into_iter()
                .collect(),
                "{version}: nothing moves"
            );
            let mut made: Vec<&str> = both
                .objects
                .iter()
                .filter(|o| kind(o) == "Namespace")
                .filter_map(|o| o.metadata.name.as_deref())
                .collect();
            made.sort_unstable();
            assert_eq!(made, [EVENTING, SERVING_NAMESPACE], "{version}");
            let gateway = find(&both, "Deployment", LOCAL_GATEWAY).expect("local gateway");
            assert_eq!(gateway.metadata.namespace.as_deref(), Some("istio-system"));
        }
    }

    #[test]
    fn serving_meets_restricted_and_eventing_baseline_as_the_chart_enforces() {
        use kubeflow_operator::pod_security::{Level, needed};
        for version in ["v1.21.1", "v1.22.0"] {
            let r = render_spec(
                &KnativeComponent,
                json!({"version": version, "eventing": true}),
                &(),
            )
            .expect("render");
            let need = needed(&r.objects);
            let level = |ns: &str| need.get(ns).map(|n| n.level);
            assert_eq!(
                level(SERVING_NAMESPACE),
                Some(Level::Restricted),
                "{version}: {need:?}"
            );
            assert_eq!(
                level(EVENTING),
                Some(Level::Baseline),
                "{version}: {need:?}"
            );
        }
    }

    #[test]
    fn kubectl_get_serving_and_knative_keep_meaning_the_projects_kinds() {
        let r = render_spec(
            &KnativeComponent,
            json!({"version": "v1.22.0", "eventing": true}),
            &(),
        )
        .expect("render");
        let services = find(
            &r,
            "CustomResourceDefinition",
            "services.serving.knative.dev",
        )
        .expect("crd");
        assert_eq!(
            services.data["spec"]["names"]["categories"],
            json!(["all"]),
            "Knative's `knative` and `serving` categories name the project's kinds"
        );
    }

    #[test]
    fn a_domain_label_over_63_characters_is_refused() {
        let label = "a".repeat(64);
        let r = render_spec(
            &KnativeComponent,
            json!({"version": "v1.22.0", "domain": format!("{label}.example.org")}),
            &(),
        )
        .err()
        .expect("refused");
        assert_eq!(r.reason, Reason::InvalidSpec);
        assert!(r.message.starts_with("spec.domain "), "{}", r.message);
        let ok = format!("{}.example.org", &label[..63]);
        render_spec(
            &KnativeComponent,
            json!({"version": "v1.22.0", "domain": ok}),
            &(),
        )
        .expect("63 characters");
    }

    #[test]
    fn domain_ingress_class_and_kubeflow_gateway_reach_their_config_maps() {
        let r = render_spec(
            &KnativeComponent,
            json!({"version": "v1.22.0", "domain": "models.example.org", "ingressClass": "kourier.ingress.networking.knative.dev"}),
            &(),
        )
        .expect("render");
        let data = |name: &str| find(&r, "ConfigMap", name).expect("config").data["data"].clone();
        let domain = data("config-domain");
        assert_eq!(domain["models.example.org"], "");
        assert!(domain.get("example.com").is_none());
        assert!(domain.get("_example").is_some());
        assert_eq!(
            data("config-network")["ingress-class"],
            "kourier.ingress.networking.knative.dev"
        );
        // render_spec's resource lives in `kubeflow`: the key is upstream's.
        assert!(data("config-istio").get(KUBEFLOW_GATEWAY_KEY).is_some());
        let mut moved = r.objects.clone();
        configure(&mut moved, None, None, "ml");
        let istio = moved
            .iter()
            .find(|o| o.metadata.name.as_deref() == Some("config-istio"))
            .expect("config-istio");
        assert_eq!(
            istio.data["data"]["gateway.ml.kubeflow-gateway"],
            "istio-ingressgateway.istio-system.svc.cluster.local"
        );
    }
}
