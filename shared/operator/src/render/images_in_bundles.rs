//! The image list checked against every bundle upstream ships (every
//! component, every version): an independent, broader scan of each object's
//! text finds no image the list misses, and after a move to a mirror it finds
//! no image outside the mirror.

use std::collections::BTreeSet;
use std::path::PathBuf;

use kube::api::DynamicObject;
use regex::Regex;

use crate::render::images::{distinct, find, move_to};

fn manifests() -> PathBuf {
    std::env::var_os("MANIFESTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/manifests")
        })
}

/// Every object of every version of every bundle folder.
fn every_bundle() -> Vec<(String, Vec<DynamicObject>)> {
    let root = manifests();
    let mut out = Vec::new();
    for folder in crate::base::bundle::folders() {
        for v in crate::base::bundle::available_versions(&root.join(folder)) {
            let b = crate::base::bundle::load(&root, folder, &v).expect("bundle");
            out.push((format!("{folder}/{v}"), b.objects()));
        }
    }
    assert!(out.len() >= 29, "bundles under {}", root.display());
    out
}

/// The broad scan: registry-qualified references anywhere in the text, and
/// the value of any key ending in `image` (quoted, in JSON or in JSON held in
/// a string) that carries a tag or digest.
fn scan(objects: &[DynamicObject]) -> BTreeSet<String> {
    let qualified = Regex::new(
        r"[a-z0-9][a-z0-9.-]*\.[a-z]{2,}(?::[0-9]+)?/[a-z0-9._/-]+(?::[A-Za-z0-9._-]+|@sha256:[0-9a-f]{64})",
    )
    .expect("regex");
    let keyed = Regex::new(r#"(?i)image\\?"\s*:\s*\\?"([^"\\]+)\\?""#).expect("regex");
    let yaml_keyed =
        Regex::new(r"(?im)image:\s*([a-z0-9][^\s\\]*[:@][^\s\\]+)\s*(?:\\n|$)").expect("regex");
    let mut out = BTreeSet::new();
    for o in objects {
        let text = serde_json::to_string(&o.data).unwrap_or_default();
        for m in qualified.find_iter(&text) {
            // An `oci://` artifact is an entry of the Model Registry's
            // catalog (a model or MCP server a user may pull later): listed
            // as data, never run by what is installed.
            if text[..m.start()].ends_with("oci://") {
                continue;
            }
            out.insert(m.as_str().to_string());
        }
        for c in keyed
            .captures_iter(&text)
            .chain(yaml_keyed.captures_iter(&text))
        {
            let v = &c[1];
            let last = v.rsplit('/').next().unwrap_or(v);
            // Templates (`{{ .Values.hub }}/pilot:...`) name no image.
            let templated = v.starts_with('/') || v.contains("{{") || v.contains(' ');
            if (last.contains(':') || v.contains('@')) && !templated {
                out.insert(v.to_string());
            }
        }
    }
    out
}

#[test]
fn the_list_misses_no_image_of_any_bundle() {
    let mut total = BTreeSet::new();
    for (name, objects) in every_bundle() {
        let listed: BTreeSet<String> = distinct(&find(&objects)).into_iter().collect();
        let missed: Vec<String> = scan(&objects)
            .into_iter()
            // Whole references: `repo:v1.1` is not listed by `repo:v1.10`;
            // a tag the scan found is listed by the same tag with a digest.
            .filter(|s| {
                !listed.contains(s)
                    && !listed.iter().any(|l| {
                        l.strip_prefix(s.as_str())
                            .is_some_and(|rest| rest.starts_with('@'))
                    })
            })
            .collect();
        assert!(missed.is_empty(), "{name}: the list misses {missed:#?}");
        total.extend(listed);
    }
    // Images only a Helm hub composes (Istio's sidecar) are listed too.
    assert!(
        total.iter().any(|i| i.ends_with("/proxyv2:1.29.0")),
        "Istio's proxy image"
    );
    assert!(
        total.iter().any(|i| i.starts_with("kserve/agent:")),
        "KServe's agent in its ConfigMap"
    );
}

#[test]
fn moved_to_a_mirror_no_image_is_left_outside_it() {
    let mirror = "registry.local:5000";
    for (name, mut objects) in every_bundle() {
        let before = distinct(&find(&objects)).len();
        move_to(&mut objects, mirror);
        let after = distinct(&find(&objects));
        assert_eq!(after.len(), before, "{name}: no image lost or merged");
        let outside: Vec<&String> = after.iter().filter(|i| !i.starts_with(mirror)).collect();
        assert!(outside.is_empty(), "{name}: {outside:#?}");
        let scanned: Vec<String> = scan(&objects)
            .into_iter()
            .filter(|i| !i.starts_with(mirror))
            .collect();
        assert!(
            scanned.is_empty(),
            "{name}: the broad scan finds {scanned:#?}"
        );
    }
}
