//! `crds/` and the chart's `crds/` must be what the Rust types generate.

use std::path::Path;

#[test]
fn crds_folder_matches_the_types() {
    for folder in ["crds", "charts/kubeflow/crds"] {
        folder_matches_the_types(folder);
    }
}

fn folder_matches_the_types(folder: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(folder);
    let mut expected: Vec<String> = Vec::new();
    for (file, crd) in kubeflow_api::crds::all() {
        expected.push(file.to_string());
        let want = kubeflow_api::crds::to_yaml(&crd).expect("serialize");
        let have = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        assert!(
            have == want,
            "{folder}/{file} is stale: run `cargo run -p kubeflow-api --bin crdgen`"
        );
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .expect("CRD folder")
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    present.sort();
    expected.sort();
    assert_eq!(
        present, expected,
        "{folder} holds exactly the generated files"
    );
}

#[test]
fn every_kind_has_status_printer_columns_and_a_short_name() {
    for (file, crd) in kubeflow_api::crds::all() {
        assert!(
            crd.spec
                .names
                .short_names
                .as_ref()
                .is_some_and(|s| !s.is_empty()),
            "{file}"
        );
        // Not "kubeflow": a category of that name would shadow the Kubeflow
        // kind, and `kubectl get kubeflow` would list every kind.
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["kubeflow-all".to_string()][..]),
            "{file}"
        );
        let v = &crd.spec.versions[0];
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{file} has a status subresource"
        );
        assert!(
            v.additional_printer_columns
                .as_ref()
                .is_some_and(|c| c.len() >= 3),
            "{file}"
        );
    }
}
