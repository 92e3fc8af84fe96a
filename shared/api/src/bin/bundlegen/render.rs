//! The chart's render, read back: per operator its Deployment, its
//! ServiceAccount and the rules the chart grants that ServiceAccount; and the
//! chart's other objects, split into those an OLM bundle can carry and those
//! it cannot.

use serde_json::{Value, json};

/// One operator as the chart installs it.
pub struct Operator {
    /// The component (`meta`, `serving`, ...): the pods' `app.kubernetes.io/component`.
    pub component: String,
    pub deployment: Value,
    pub service_account: String,
    /// The rules of its ClusterRole (`<sa>`).
    pub cluster_rules: Vec<Value>,
    /// The rules of its Role in one allowed namespace (`<sa>`), the same in
    /// each, and of its leader-election Role.
    pub namespaced_rules: Vec<Value>,
}

pub struct Chart {
    pub operators: Vec<Operator>,
    objects: Vec<Value>,
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn kind(v: &Value) -> &str {
    str_at(v, "/kind")
}

fn name(v: &Value) -> &str {
    str_at(v, "/metadata/name")
}

fn rules(v: &Value) -> Vec<Value> {
    v.get("rules")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

impl Chart {
    pub fn read(objects: &[Value]) -> Result<Chart, String> {
        let mut operators = Vec::new();
        for deployment in objects.iter().filter(|o| kind(o) == "Deployment") {
            let sa = str_at(deployment, "/spec/template/spec/serviceAccountName").to_string();
            let component = str_at(
                deployment,
                "/spec/template/metadata/labels/app.kubernetes.io~1component",
            )
            .to_string();
            if sa.is_empty() || component.is_empty() {
                return Err(format!(
                    "Deployment {} has no ServiceAccount or component label",
                    name(deployment)
                ));
            }
            let named = |k: &str, n: &str| -> Vec<&Value> {
                objects
                    .iter()
                    .filter(|o| kind(o) == k && name(o) == n)
                    .collect()
            };
            let mut cluster_rules = Vec::new();
            for role in named("ClusterRole", &sa) {
                cluster_rules.extend(rules(role));
            }
            if cluster_rules.is_empty() {
                return Err(format!("the chart grants {sa} no ClusterRole"));
            }
            // The chart repeats each Role in every allowed namespace: one copy.
            let mut namespaced_rules = Vec::new();
            for role_name in [sa.clone(), format!("{sa}-leader-election")] {
                if let Some(role) = named("Role", &role_name).first() {
                    namespaced_rules.extend(rules(role));
                }
            }
            // The chart creates the leader Lease, which a bundle cannot
            // carry: under OLM the operator creates it (in its own namespace,
            // where OLM puts these rules).
            namespaced_rules.push(json!({
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["create"],
            }));
            operators.push(Operator {
                component,
                deployment: deployment.clone(),
                service_account: sa,
                cluster_rules,
                namespaced_rules,
            });
        }
        if operators.is_empty() {
            return Err("the chart's render has no Deployment".into());
        }
        operators.sort_by(|a, b| a.component.cmp(&b.component));
        Ok(Chart {
            operators,
            objects: objects.to_vec(),
        })
    }

    /// The chart's objects that a bundle carries beside the CSV, without
    /// Helm's bookkeeping labels and without a namespace (OLM installs them
    /// into the operator's namespace): the metrics Services,
    /// NetworkPolicies, PodDisruptionBudgets and the dashboards' ConfigMaps.
    pub fn extra_objects(&self) -> Vec<Value> {
        self.objects
            .iter()
            // No cluster-scoped object: OLM labels those it creates from a
            // bundle with no owner and leaves them behind on uninstall. The
            // users' roles are OLM's own (one aggregated view, edit and
            // admin role per owned kind; docs/security.md).
            .filter(|o| {
                matches!(
                    kind(o),
                    "Service" | "NetworkPolicy" | "PodDisruptionBudget" | "ConfigMap"
                )
            })
            .map(without_helm)
            .collect()
    }

    /// The ValidatingAdmissionPolicies (and bindings): those that let each
    /// operator create cluster-scoped objects only under its bundles' names
    /// or pin what it writes, and the one that keeps declared Profiles from
    /// deletion by anyone but the Dashboard operator. OLM cannot install
    /// them; they match the operator's ServiceAccount in any namespace,
    /// since the namespace OLM installs into is chosen at install.
    /// The operators' account names of a condition that lists them all
    /// (`request.userInfo.username in ['system:serviceaccount:<ns>:<name>', ...]`),
    /// when each is an operator's.
    fn operator_list(&self, expression: &str) -> Option<Vec<String>> {
        let list = expression
            .strip_prefix("request.userInfo.username in [")?
            .strip_suffix(']')?;
        list.split(", ")
            .map(|entry| {
                let user = entry.trim_matches('\'');
                self.operators
                    .iter()
                    .find(|op| user.ends_with(&format!(":{}", op.service_account)))
                    .map(|op| op.service_account.clone())
            })
            .collect()
    }

    pub fn admission_policies(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for o in &self.objects {
            match kind(o) {
                "ValidatingAdmissionPolicy" => {
                    let mut policy = o.clone();
                    if let Some(conditions) = policy
                        .pointer_mut("/spec/matchConditions")
                        .and_then(Value::as_array_mut)
                    {
                        for c in conditions {
                            if let Some(names) = self.operator_list(str_at(c, "/expression")) {
                                // One policy for every operator: each matched
                                // by its account's name alone, as below.
                                c["expression"] = Value::String(format!(
                                    "request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.split(':')[3] in [{}]",
                                    names
                                        .iter()
                                        .map(|n| format!("'{n}'"))
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                ));
                                continue;
                            }
                            let sa = self.operators.iter().find(|op| {
                                str_at(c, "/expression")
                                    .ends_with(&format!(":{}'", op.service_account))
                            });
                            if let Some(op) = sa {
                                // OLM picks the namespace at install: the
                                // account is matched by its name alone.
                                let is_operator = format!(
                                    "request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.endsWith(':{}')",
                                    op.service_account
                                );
                                let exempts = str_at(c, "/expression")
                                    .starts_with("request.userInfo.username != ");
                                c["expression"] = Value::String(if exempts {
                                    format!("!({is_operator})")
                                } else {
                                    is_operator
                                });
                            }
                        }
                    }
                    out.push(without_helm(&policy));
                }
                "ValidatingAdmissionPolicyBinding" => out.push(without_helm(o)),
                _ => {}
            }
        }
        out
    }
}

/// An object as a bundle file holds it: no namespace, no Helm labels.
pub fn without_helm(o: &Value) -> Value {
    let mut o = o.clone();
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("namespace");
        if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
            labels.remove("helm.sh/chart");
            labels.remove("app.kubernetes.io/managed-by");
        }
    }
    o
}

/// `<name>_<apiVersion>_<kind>.yaml`, as operator-sdk names a bundle's
/// other files.
pub fn file_name(o: &Value) -> String {
    let api_version = str_at(o, "/apiVersion").replace('/', "_");
    format!(
        "{}_{}_{}.yaml",
        name(o),
        api_version,
        kind(o).to_lowercase()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart_with(policy: Value) -> Chart {
        Chart {
            operators: vec![Operator {
                component: "dashboard".into(),
                deployment: json!({}),
                service_account: "kubeflow-dashboard-operator".into(),
                cluster_rules: vec![],
                namespaced_rules: vec![],
            }],
            objects: vec![policy],
        }
    }

    fn condition(expression: &str) -> String {
        let policy = json!({
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "p"},
            "spec": {"matchConditions": [{"name": "c", "expression": expression}]},
        });
        let out = chart_with(policy).admission_policies();
        str_at(&out[0], "/spec/matchConditions/0/expression").to_string()
    }

    #[test]
    fn the_operators_condition_matches_their_accounts_in_any_namespace() {
        let is = condition(
            "request.userInfo.username in ['system:serviceaccount:kubeflow-system:kubeflow-dashboard-operator']",
        );
        assert_eq!(
            is,
            "request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.split(':')[3] in ['kubeflow-dashboard-operator']"
        );
        // A list naming anyone else is left as it is.
        let other = "request.userInfo.username in ['system:serviceaccount:a:someone']";
        assert_eq!(condition(other), other);
    }

    #[test]
    fn an_operator_condition_matches_its_account_in_any_namespace() {
        let is = condition(
            "request.userInfo.username == 'system:serviceaccount:kubeflow-system:kubeflow-dashboard-operator'",
        );
        assert_eq!(
            is,
            "request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.endsWith(':kubeflow-dashboard-operator')"
        );
    }

    #[test]
    fn an_exemption_of_the_operator_stays_an_exemption() {
        let not = condition(
            "request.userInfo.username != 'system:serviceaccount:kubeflow-system:kubeflow-dashboard-operator'",
        );
        assert_eq!(
            not,
            "!(request.userInfo.username.startsWith('system:serviceaccount:') && request.userInfo.username.endsWith(':kubeflow-dashboard-operator'))"
        );
    }
}
