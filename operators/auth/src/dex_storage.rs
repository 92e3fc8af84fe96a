//! The custom resources dex keeps its state in (storage type `kubernetes`,
//! as the bundle configures it). Upstream's bundle ships one of their CRDs,
//! AuthCode; dex creates the others itself at its first start, unlabelled,
//! so no removal and no uninstall knew them. Installed here with the rest of
//! the bundle, they are the component's like any CRD: labelled, repaired,
//! kept or deleted by `crdPolicy`. dex still asks to create them and finds
//! them there (its ClusterRole keeps the `create` upstream gives it: dex
//! retries a refused one for ever).

use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::DynamicObject;
use serde_json::json;

/// dex's API group.
const GROUP: &str = "dex.coreos.com";

/// Every kind dex stores, with its plural (dex's own spelling: it lets the
/// API server's old pluralisation stand, hence `signingkeies`).
const KINDS: &[(&str, &str)] = &[
    ("AuthCode", "authcodes"),
    ("AuthRequest", "authrequests"),
    ("OAuth2Client", "oauth2clients"),
    ("SigningKey", "signingkeies"),
    ("RefreshToken", "refreshtokens"),
    ("Password", "passwords"),
    ("OfflineSessions", "offlinesessionses"),
    ("Connector", "connectors"),
    ("DeviceRequest", "devicerequests"),
    ("DeviceToken", "devicetokens"),
];

/// The CRD of one of dex's kinds, shaped as the bundle's AuthCode: one
/// served and stored version `v1`, namespaced, any content.
fn crd(kind_name: &str, plural: &str) -> Option<DynamicObject> {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind_name,
                "listKind": format!("{kind_name}List"),
                "plural": plural,
                "singular": kind_name.to_lowercase(),
            },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                }},
            }],
        },
    }))
    .ok()
}

/// Every dex storage CRD (what the operator's permissions are derived from).
pub fn crds() -> Vec<DynamicObject> {
    KINDS.iter().filter_map(|(k, p)| crd(k, p)).collect()
}

/// Adds to dex's bundle objects the storage CRDs it does not ship.
pub fn add_missing(objects: &mut Vec<DynamicObject>) {
    let shipped: Vec<String> = objects
        .iter()
        .filter(|o| kind(o) == "CustomResourceDefinition")
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    objects.extend(crds().into_iter().filter(|c| {
        c.metadata
            .name
            .as_ref()
            .is_some_and(|n| !shipped.contains(n))
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(objects: &[DynamicObject]) -> Vec<String> {
        objects
            .iter()
            .filter_map(|o| o.metadata.name.clone())
            .collect()
    }

    #[test]
    fn every_kind_dex_stores_has_a_crd_and_none_twice() {
        let all = crds();
        assert_eq!(all.len(), KINDS.len());
        assert!(names(&all).contains(&"offlinesessionses.dex.coreos.com".to_string()));
        let mut objects = vec![all[0].clone()];
        add_missing(&mut objects);
        let mut n = names(&objects);
        n.sort();
        n.dedup();
        assert_eq!(n.len(), KINDS.len(), "the shipped one not added again");
    }

    #[test]
    fn the_bundles_authcode_crd_is_the_shape_given_to_the_others() {
        let manifests = kubeflow_operator::component::manifests_dir();
        let dir = manifests.join("dex");
        let versions = kubeflow_operator::bundle::available_versions(&dir);
        assert!(
            !versions.is_empty(),
            "no dex bundle under {}",
            dir.display()
        );
        let ours = crds().remove(0);
        for version in versions {
            let bundle = kubeflow_operator::bundle::load(&manifests, "dex", &version)
                .expect("the dex bundle")
                .objects();
            let shipped = bundle
                .iter()
                .find(|o| o.metadata.name.as_deref() == Some("authcodes.dex.coreos.com"))
                .expect("the bundle's AuthCode CRD");
            assert_eq!(shipped.data["spec"], ours.data["spec"], "dex {version}");
        }
    }
}
