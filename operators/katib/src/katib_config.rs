//! Katib's own configuration file (`katib-config.yaml` in the `katib-config`
//! ConfigMap): which kinds a Trial may run and which suggestion algorithms
//! are offered. The controller reads it only when it starts, so a change
//! rolls it (see `katib.rs`).

use kubeflow_operator::component::Refusal;
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::serde_json::Value;
use kubeflow_operator::serde_saphyr;

/// The ConfigMap and its file.
pub const CONFIG_MAP: &str = "katib-config";
pub const FILE: &str = "katib-config.yaml";

fn invalid(message: String) -> Refusal {
    Refusal::new(Reason::InvalidSpec, message)
}

/// The release's configuration with the trial kinds and the offered
/// algorithms replaced where the spec sets them; an algorithm the release
/// does not have is refused by its place in the list, naming those it has.
pub fn edited(
    text: &str,
    trial_resources: Option<&[String]>,
    algorithms: Option<&[String]>,
) -> Result<String, Refusal> {
    let mut doc: Value =
        serde_saphyr::from_str(text).map_err(|e| invalid(format!("the bundle's {FILE}: {e}")))?;
    if let Some(kinds) = trial_resources {
        for (i, k) in kinds.iter().enumerate() {
            if kinds[..i].contains(k) {
                return Err(invalid(format!(
                    "spec.trialResources[{i}] {k:?} is listed twice"
                )));
            }
        }
        doc["init"]["controller"]["trialResources"] =
            Value::Array(kinds.iter().cloned().map(Value::String).collect());
    }
    if let Some(wanted) = algorithms {
        let offered = doc["runtime"]["suggestions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let name = |s: &Value| s["algorithmName"].as_str().unwrap_or_default().to_string();
        let names: Vec<String> = offered.iter().map(name).collect();
        for (i, a) in wanted.iter().enumerate() {
            if !names.contains(a) {
                return Err(invalid(format!(
                    "spec.suggestionAlgorithms[{i}] {a:?} is not one this Katib release offers: {}",
                    names.join(", ")
                )));
            }
            if wanted[..i].contains(a) {
                return Err(invalid(format!(
                    "spec.suggestionAlgorithms[{i}] {a:?} is listed twice"
                )));
            }
        }
        doc["runtime"]["suggestions"] = Value::Array(
            offered
                .into_iter()
                .filter(|s| wanted.contains(&name(s)))
                .collect(),
        );
    }
    serde_saphyr::to_string(&doc).map_err(|e| invalid(format!("writing {FILE}: {e}")))
}

/// The algorithms a configuration offers, in its order.
#[cfg(test)]
pub fn algorithms(text: &str) -> Vec<String> {
    let doc: Value = serde_saphyr::from_str(text).unwrap_or_default();
    doc["runtime"]["suggestions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["algorithmName"].as_str().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RELEASE: &str = "---\napiVersion: config.kubeflow.org/v1beta1\nkind: KatibConfig\ninit:\n  controller:\n    webhookPort: 8443\n    trialResources:\n      - Job.v1.batch\n      - TFJob.v1.kubeflow.org\nruntime:\n  suggestions:\n    - algorithmName: random\n      image: ghcr.io/kubeflow/katib/suggestion-hyperopt:v0.19.0\n    - algorithmName: tpe\n      image: ghcr.io/kubeflow/katib/suggestion-hyperopt:v0.19.0\n    - algorithmName: grid\n      image: ghcr.io/kubeflow/katib/suggestion-optuna:v0.19.0\n";

    #[test]
    fn unset_settings_leave_the_release_as_it_is() {
        let out = edited(RELEASE, None, None).expect("edited");
        let doc: Value = serde_saphyr::from_str(&out).expect("yaml");
        assert_eq!(doc["init"]["controller"]["webhookPort"], 8443);
        assert_eq!(algorithms(&out), ["random", "tpe", "grid"]);
    }

    #[test]
    fn algorithms_are_a_subset_kept_in_the_releases_order() {
        let wanted = ["grid".to_string(), "random".to_string()];
        let kinds = ["Job.v1.batch".to_string()];
        let out = edited(RELEASE, Some(&kinds), Some(&wanted)).expect("edited");
        assert_eq!(algorithms(&out), ["random", "grid"]);
        let doc: Value = serde_saphyr::from_str(&out).expect("yaml");
        assert_eq!(
            doc["init"]["controller"]["trialResources"],
            serde_json::json!(["Job.v1.batch"])
        );
        assert_eq!(
            doc["runtime"]["suggestions"][1]["image"],
            "ghcr.io/kubeflow/katib/suggestion-optuna:v0.19.0",
            "an algorithm keeps its image"
        );
    }

    #[test]
    fn an_unknown_or_repeated_entry_is_refused_by_its_place() {
        let unknown = ["random".to_string(), "nope".to_string()];
        let e = edited(RELEASE, None, Some(&unknown)).expect_err("refused");
        assert!(
            e.message.contains("spec.suggestionAlgorithms[1]") && e.message.contains("tpe"),
            "{}",
            e.message
        );
        let twice = ["tpe".to_string(), "tpe".to_string()];
        let e = edited(RELEASE, None, Some(&twice)).expect_err("refused");
        assert!(
            e.message.contains("spec.suggestionAlgorithms[1]"),
            "{}",
            e.message
        );
        let kinds = ["Job.v1.batch".to_string(), "Job.v1.batch".to_string()];
        let e = edited(RELEASE, Some(&kinds), None).expect_err("refused");
        assert!(
            e.message.contains("spec.trialResources[1]"),
            "{}",
            e.message
        );
    }
}
