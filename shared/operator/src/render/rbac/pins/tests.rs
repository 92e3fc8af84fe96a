//! The pins built from small bundles.

use super::bundled::{mirror_path, repository};
use super::cel::quote;
use super::*;
use serde_json::json;

fn obj(v: serde_json::Value) -> DynamicObject {
    serde_json::from_value(v).expect("object")
}

fn variable<'a>(p: &'a Pins, name: &str) -> &'a str {
    &p.variables
        .iter()
        .find(|v| v.name == name)
        .expect("variable")
        .expression
}

#[test]
fn the_bundles_roles_bindings_webhooks_and_workloads_are_the_only_ones_allowed() {
    let objects = [
        obj(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "kubeflow-training-admin",
                "labels": {"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-admin": "true"}},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels":
                {"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-training-admin": "true"}}]},
            "rules": [],
        })),
        obj(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "training-operator"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        })),
        obj(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "training-operator"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "training-operator"},
            "subjects": [{"kind": "ServiceAccount", "name": "training-operator", "namespace": "kubeflow"}],
        })),
        obj(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "validator.training-operator.kubeflow.org"},
            "webhooks": [{"name": "validate.tfjob", "clientConfig": {"service":
                {"name": "training-operator", "namespace": "kubeflow", "path": "/validate-tfjob"}}}],
        })),
        obj(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "trainjobs.trainer.kubeflow.org"},
            "spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig":
                {"service": {"name": "trainer-webhook", "namespace": "kubeflow", "path": "/convert"}}}}},
        })),
        obj(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "plugin", "namespace": "kubeflow"},
            "spec": {"template": {"spec": {"serviceAccountName": "plugin",
                "volumes": [{"name": "d", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}],
                "initContainers": [{"name": "i", "image": "busybox:1.36"}],
                "containers": [{"name": "p", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0@sha256:abc",
                    "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]}}},
        })),
    ];
    let p = pins(
        &objects,
        &Extra {
            claim_role: "kubeflow-training-cluster-claim",
            sccs: &["nonroot-v2".to_string()],
            workload_suffix: None,
            component: "training",
            labelled: &[],
            tenant_roles: &[],
        },
    );
    assert_eq!(
        variable(&p, "clusterRoleRules"),
        "{'kubeflow-training-admin': [], 'kubeflow-training-cluster-claim': [], 'training-operator': ['|pods|get,list||']}"
    );
    assert_eq!(
        variable(&p, "clusterBindingRoles"),
        "{'training-operator': ['ClusterRole/training-operator']}"
    );
    assert_eq!(
        variable(&p, "clusterBindingSubjects"),
        "{'training-operator': ['ServiceAccount/training-operator']}"
    );
    assert_eq!(
        variable(&p, "webhooks"),
        "{'mutatingwebhookconfigurations': {}, 'validatingwebhookconfigurations': \
         {'validator.training-operator.kubeflow.org': ['validate.tfjob training-operator /validate-tfjob']}}"
    );
    assert_eq!(
        variable(&p, "workloadFeatures"),
        "{'daemonsets': {'plugin': ['cap:NET_ADMIN', 'hostPath:/var/lib/kubelet/device-plugins']}, \
         'deployments': {}, 'jobs': {}, 'statefulsets': {}}"
    );
    assert_eq!(
        variable(&p, "workloadAccounts"),
        "{'daemonsets': {'plugin': ['plugin']}, 'deployments': {}, 'jobs': {}, 'statefulsets': {}}"
    );
    // Images by repository (any tag or digest), and where a mirror
    // holds each (Docker Hub's implicit `library/` made explicit).
    assert_eq!(
        variable(&p, "workloadImages"),
        "{'daemonsets': {'plugin': ['busybox', 'nvcr.io/nvidia/k8s-device-plugin']}, \
         'deployments': {}, 'jobs': {}, 'statefulsets': {}}"
    );
    assert_eq!(
        variable(&p, "workloadImagePaths"),
        "{'daemonsets': {'plugin': ['library/busybox', 'nvidia/k8s-device-plugin']}, \
         'deployments': {}, 'jobs': {}, 'statefulsets': {}}"
    );
    assert_eq!(
        variable(&p, "conversions"),
        "{'trainjobs.trainer.kubeflow.org': ['trainer-webhook /convert']}"
    );
    let all: String = p.validations.iter().map(|c| c.expression.clone()).collect();
    assert!(all.contains(
        "(object.metadata.name == 'kubeflow-training-admin' && s.matchLabels == {'rbac.authorization.kubeflow.org/aggregate-to-kubeflow-training-admin': 'true'})"
    ), "{all}");
    assert!(all.contains(
        "in ['kubeflow-training-admin rbac.authorization.kubeflow.org/aggregate-to-kubeflow-admin=true']"
    ), "{all}");
    // Every check of writes is guarded by the resource it is about.
    for c in p
        .validations
        .iter()
        .filter(|c| !c.expression.starts_with("request.operation != 'DELETE'"))
    {
        assert!(
            c.expression.starts_with("(request.resource.resource != '"),
            "{}",
            c.expression
        );
    }
    assert_eq!(quote("it's"), r"'it\'s'");
}

#[test]
fn kinds_written_beyond_the_bundles_are_held_to_the_components_label() {
    let labelled = [("kubeflow.org".to_string(), "profiles".to_string())];
    let p = pins(
        &[],
        &Extra {
            claim_role: "kubeflow-dashboard-cluster-claim",
            component: "dashboard",
            labelled: &labelled,
            ..Default::default()
        },
    );
    assert!(p.resources.contains(&Matched {
        group: "kubeflow.org".into(),
        resource: "profiles".into(),
        delete: true
    }));
    let check = p
        .validations
        .iter()
        .find(|c| {
            c.expression
                .starts_with("(request.resource.resource != 'profiles')")
        })
        .expect("a check of profiles");
    for part in [
        "object.metadata.labels['components.kubeflow.org/component'] == 'dashboard'",
        "request.operation == 'CREATE' || (has(oldObject.metadata.labels)",
    ] {
        assert!(
            check.expression.contains(part),
            "{part}: {}",
            check.expression
        );
    }
    let none = pins(&[], &Extra::default());
    assert!(
        !none
            .validations
            .iter()
            .any(|c| c.expression.contains("profiles"))
    );
}

#[test]
fn tenant_access_is_pinned_to_profile_namespaces_people_and_the_kubeflow_roles() {
    let roles = ["kubeflow-edit".to_string(), "kubeflow-view".to_string()];
    let p = pins(
        &[],
        &Extra {
            component: "dashboard",
            tenant_roles: &roles,
            ..Default::default()
        },
    );
    let all: Vec<&str> = p
        .validations
        .iter()
        .map(|c| c.expression.as_str())
        .collect();
    let bindings = all
        .iter()
        .find(|e| e.starts_with("(request.resource.resource != 'rolebindings')"))
        .expect("a check of rolebindings");
    for part in [
        "object.roleRef.name in ['kubeflow-edit', 'kubeflow-view']",
        "(s.kind == 'User' || s.kind == 'Group') && !s.name.startsWith('system:')",
        "namespaceObject.metadata.labels['app.kubernetes.io/part-of'] == 'kubeflow-profile'",
        "object.metadata.labels['components.kubeflow.org/component'] == 'dashboard'",
    ] {
        assert!(bindings.contains(part), "{part}: {bindings}");
    }
    for part in [
        "object.spec.action == 'ALLOW') && !has(object.spec.provider)",
        "request.resource.resource != 'authorizationpolicies' || request.namespace in variables.allowedNamespaces || ((has(oldObject.metadata.labels)",
        "object.spec.owner.kind == 'User' && !object.spec.owner.name.startsWith('system:')",
        "(request.resource.resource == 'rolebindings' && (has(oldObject.metadata.labels)",
    ] {
        assert!(all.iter().any(|e| e.contains(part)), "{part}: {all:#?}");
    }
    assert!(
        p.resources
            .iter()
            .any(|m| m.resource == "authorizationpolicies" && m.delete)
    );
    // Without tenant access, none of it.
    let none = pins(&[], &Extra::default());
    let text: String = none
        .validations
        .iter()
        .map(|c| c.expression.clone())
        .collect();
    assert!(!text.contains("kubeflow-profile") && !text.contains("authorizationpolicies"));
}

#[test]
fn an_images_repository_is_it_without_tag_or_digest() {
    for (image, repo) in [
        ("mysql:8.4", "mysql"),
        ("mysql", "mysql"),
        ("kserve/agent:v0.16.0", "kserve/agent"),
        (
            "registry.local:5000/kserve/agent:v1@sha256:ab",
            "registry.local:5000/kserve/agent",
        ),
        (
            "registry.local:5000/kserve/agent",
            "registry.local:5000/kserve/agent",
        ),
        (
            "ghcr.io/kubeflow/hub/server@sha256:ab",
            "ghcr.io/kubeflow/hub/server",
        ),
    ] {
        assert_eq!(repository(image), repo, "{image}");
    }
    assert_eq!(mirror_path("mysql"), "library/mysql");
    assert_eq!(mirror_path("kserve/agent"), "kserve/agent");
    assert_eq!(
        mirror_path("ghcr.io/kubeflow/hub/server"),
        "kubeflow/hub/server"
    );
    // A mirrored image's repository is the mirror and that path: what
    // the check compares.
    let moved =
        crate::render::images::moved("ghcr.io/kubeflow/hub/server:v0.3.9", "mirror.local:5000/kf");
    assert_eq!(
        repository(&moved),
        format!(
            "mirror.local:5000/kf/{}",
            mirror_path("ghcr.io/kubeflow/hub/server")
        )
    );
}

#[test]
fn a_rule_key_joins_each_list_in_order() {
    let r: PolicyRule = serde_json::from_value(json!({
        "apiGroups": ["", "apps"], "resources": ["pods", "deployments"],
        "verbs": ["get"], "resourceNames": ["a"],
    }))
    .expect("rule");
    assert_eq!(rule_key(&r), ",apps|pods,deployments|get|a|");
    let urls: PolicyRule =
        serde_json::from_value(json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]}))
            .expect("rule");
    assert_eq!(rule_key(&urls), "||get||/metrics");
}
