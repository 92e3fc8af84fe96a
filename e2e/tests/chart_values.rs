//! Each value the chart's schema accepts beyond the basics (umbrella-chart
//! `global`, name overrides, pod metadata, priority, spread, disruption
//! budgets, digests, logging, extra env and args, security contexts and
//! OpenShift) changes exactly what it should in `helm template`'s output:
//! every difference from the default render is listed, nothing else moves.
//! No cluster needed.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use kubeflow_e2e::chart::{differences, names, of_kind, template};
use serde_json::{Value, json};

/// The meta-operator and one per component.
const OPERATORS: usize = kubeflow_api::registry::COMPONENTS.len() + 1;

/// Where a render should differ from the default one (`Kind:/path`) and in
/// how many objects.
type Changes = Vec<(String, usize)>;

fn render(sets: &[&str]) -> Vec<DynamicObject> {
    let mut args = Vec::new();
    for s in sets {
        if s.starts_with("--") {
            args.push(*s);
        } else {
            args.extend(["--set", s]);
        }
    }
    template(&args).unwrap_or_else(|e| panic!("{sets:?}: {e}"))
}

fn expect(changed: &BTreeMap<String, usize>, want: &[(&str, usize)], case: &str) {
    let want: BTreeMap<String, usize> = want.iter().map(|(p, n)| (p.to_string(), *n)).collect();
    assert_eq!(changed, &want, "{case}: what changed");
}

fn container<'a>(objects: &'a [DynamicObject], deployment: &str) -> &'a Value {
    let d = of_kind(objects, "Deployment")
        .find(|d| d.metadata.name.as_deref() == Some(deployment))
        .unwrap_or_else(|| panic!("no Deployment {deployment}"));
    &d.data["spec"]["template"]["spec"]["containers"][0]
}

#[test]
fn each_value_changes_exactly_what_it_should() {
    let base = render(&[]);
    let n = OPERATORS;
    let label = "app.kubernetes.io~1name";
    let pod = "Deployment:/spec/template/spec";
    let env = "Deployment:/spec/template/spec/containers/*/env/*";
    let cases: Vec<(Vec<&str>, Changes)> = vec![
        // An umbrella chart's globals are accepted and change nothing.
        (
            vec!["global.team=ml", "global.imageRegistry=r.local"],
            vec![],
        ),
        (
            vec!["nameOverride=ml"],
            vec![
                (format!("Deployment:/metadata/labels/{label}"), n),
                (format!("Deployment:/spec/selector/matchLabels/{label}"), n),
                (
                    format!("Deployment:/spec/template/metadata/labels/{label}"),
                    n,
                ),
                (
                    format!("NetworkPolicy:/spec/podSelector/matchLabels/{label}"),
                    n,
                ),
                (format!("Service:/metadata/labels/{label}"), n),
                (format!("Service:/spec/selector/{label}"), n),
            ],
        ),
        (
            vec!["podAnnotations.example\\.com/team=ml"],
            vec![("Deployment:/spec/template/metadata/annotations".into(), n)],
        ),
        (
            vec!["operators.istio.podAnnotations.a=b"],
            vec![("Deployment:/spec/template/metadata/annotations".into(), 1)],
        ),
        (
            vec!["podLabels.team=ml"],
            vec![("Deployment:/spec/template/metadata/labels/team".into(), n)],
        ),
        (
            vec!["priorityClassName=platform-critical"],
            vec![(format!("{pod}/priorityClassName"), n)],
        ),
        (
            vec!["operators.serving.priorityClassName=platform-critical"],
            vec![(format!("{pod}/priorityClassName"), 1)],
        ),
        (
            vec!["serviceAccount.annotations.iam\\.example\\.com/role=kubeflow"],
            vec![("ServiceAccount:/metadata/annotations".into(), n)],
        ),
        (
            vec!["podDisruptionBudget.enabled=true"],
            vec![("PodDisruptionBudget:+".into(), n)],
        ),
        (
            vec![
                "topologySpreadConstraints[0].maxSkew=1",
                "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
                "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
            ],
            vec![(format!("{pod}/topologySpreadConstraints"), n)],
        ),
        (
            vec![
                &"operators.istio.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            ],
            vec![(format!("{pod}/containers/*/image"), 1)],
        ),
        (vec!["logLevel=debug"], vec![(env.into(), n)]),
        (
            vec!["operators.training.logLevel=debug"],
            vec![(env.into(), 1)],
        ),
        (
            vec![
                "extraEnv[0].name=HTTPS_PROXY",
                "extraEnv[0].value=http://proxy.local:3128",
            ],
            vec![(env.into(), n)],
        ),
        (
            vec!["extraArgs={--lease-duration-seconds=30}"],
            vec![(format!("{pod}/containers/*/args"), n)],
        ),
        (
            vec!["operators.pipelines.extraArgs={--shutdown-deadline=10}"],
            vec![(format!("{pod}/containers/*/args"), 1)],
        ),
        (
            vec!["podSecurityContext.fsGroup=65532"],
            vec![(format!("{pod}/securityContext/fsGroup"), n)],
        ),
        // OpenShift assigns the UID: the pinned one goes, on OpenShift or forced.
        (
            vec!["--api-versions=security.openshift.io/v1"],
            vec![
                (format!("{pod}/securityContext/runAsGroup"), n),
                (format!("{pod}/securityContext/runAsUser"), n),
            ],
        ),
        (
            vec!["openshift.adaptSecurityContext=force"],
            vec![
                (format!("{pod}/securityContext/runAsGroup"), n),
                (format!("{pod}/securityContext/runAsUser"), n),
            ],
        ),
        (
            vec![
                "--api-versions=security.openshift.io/v1",
                "openshift.adaptSecurityContext=disabled",
            ],
            vec![],
        ),
    ];
    for (sets, want) in cases {
        let changed = differences(&base, &render(&sets));
        let want: Vec<(&str, usize)> = want.iter().map(|(p, n)| (p.as_str(), *n)).collect();
        expect(&changed, &want, &format!("{sets:?}"));
    }
}

#[test]
fn the_rendered_values_say_what_was_asked() {
    // Digest appended to the tag.
    let pinned = render(&[
        "operators.istio.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ]);
    assert_eq!(
        container(&pinned, "kf-istio-operator")["image"],
        "kubeflow/kubeflow-istio-operator:0.1.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    // Log level and extra env after the chart's own variables.
    let logged = render(&[
        // (--set splits on commas; a comma in a value is escaped)
        "logLevel=info\\,kubeflow_operator=debug",
        "extraEnv[0].name=A",
        "extraEnv[0].value=b",
        "operators.meta.extraEnv[0].name=C",
        "operators.meta.extraEnv[0].value=d",
    ]);
    let env = container(&logged, "kf-meta-operator")["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let tail: Vec<&Value> = env.iter().rev().take(3).collect();
    assert_eq!(
        tail,
        [
            &json!({"name": "C", "value": "d"}),
            &json!({"name": "A", "value": "b"}),
            &json!({"name": "RUST_LOG", "value": "info,kubeflow_operator=debug"}),
        ]
    );
    // A spread constraint without a selector spreads the operator's own pods.
    let spread = render(&[
        "topologySpreadConstraints[0].maxSkew=1",
        "topologySpreadConstraints[0].topologyKey=zone",
        "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
    ]);
    let d = of_kind(&spread, "Deployment")
        .find(|d| d.metadata.name.as_deref() == Some("kf-serving-operator"))
        .expect("serving Deployment");
    assert_eq!(
        d.data["spec"]["template"]["spec"]["topologySpreadConstraints"],
        json!([{
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {
                "app.kubernetes.io/name": "kubeflow-serving-operator",
                "app.kubernetes.io/instance": "kf",
            }},
        }])
    );
    // minAvailable instead of maxUnavailable.
    let two = render(&["replicas=2"]);
    let kept = render(&["replicas=2", "podDisruptionBudget.minAvailable=1"]);
    expect(
        &differences(&two, &kept),
        &[
            ("PodDisruptionBudget:/spec/maxUnavailable", OPERATORS),
            ("PodDisruptionBudget:/spec/minAvailable", OPERATORS),
        ],
        "minAvailable",
    );
    // Budgets off even with standbys.
    let off = render(&["replicas=2", "podDisruptionBudget.enabled=false"]);
    assert!(names(&off, "PodDisruptionBudget").is_empty());
}

#[test]
fn full_name_override_renames_every_object_but_the_leases() {
    let base = render(&[]);
    let renamed = render(&["fullnameOverride=ml"]);
    let key = |o: &DynamicObject| {
        (
            o.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default(),
            o.metadata.name.clone().unwrap_or_default(),
        )
    };
    let mut want: Vec<(String, String)> = base
        .iter()
        .map(key)
        .map(|(k, n)| match n.strip_prefix("kf-") {
            Some(rest) => (k, format!("ml-{rest}")),
            None => (k, n),
        })
        .collect();
    let mut got: Vec<(String, String)> = renamed.iter().map(key).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    // The operators find their Leases by a fixed name.
    assert_eq!(
        names(&renamed, "Lease"),
        names(&base, "Lease"),
        "Lease names"
    );
    // Every reference follows: bindings, admission policies, selectors.
    let text = serde_json::to_string(&renamed).unwrap_or_default();
    assert!(!text.contains("kf-"), "a reference still says kf-");
}

/// The chart's values and their schema name every operator of the component
/// registry, and no other: a component added to the registry without its
/// chart values (or left there after its removal) fails here.
#[test]
fn the_values_and_schema_name_every_operator_of_the_registry() {
    let root = kubeflow_e2e::repo_root().join("charts/kubeflow");
    let expected: Vec<String> = std::iter::once("meta")
        .chain(kubeflow_api::registry::COMPONENTS.iter().map(|c| c.field))
        .map(str::to_string)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let keys = |v: Option<&Value>, what: &str| -> Vec<String> {
        v.and_then(Value::as_object)
            .unwrap_or_else(|| panic!("no {what}"))
            .keys()
            .cloned()
            .collect()
    };
    let values: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(root.join("values.yaml")).expect("values.yaml"),
    )
    .expect("values.yaml parses");
    assert_eq!(
        keys(values.get("operators"), "operators in values.yaml"),
        expected
    );
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("values.schema.json")).expect("values.schema.json"),
    )
    .expect("values.schema.json parses");
    assert_eq!(
        keys(
            schema.pointer("/properties/operators/properties"),
            "the schema's operators"
        ),
        expected
    );
    assert_eq!(
        keys(
            schema.pointer("/then/properties/operators/properties"),
            "the schema's single-replica operators"
        ),
        expected
    );
}
