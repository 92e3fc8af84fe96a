//! The chart's Grafana dashboards, checked by the rules Grafana's
//! dashboard-linter applies (the linter itself is not installable here):
//! not editable; `datasource`, `job` and `instance` variables reloaded on
//! time change; every panel titled, described, given a unit, a target and
//! the `$datasource`; every selector filtered by `$job` and `$instance`;
//! counters only under rate or increase, over `$__rate_interval`. That the
//! queries return series is checked against a real Prometheus
//! (tests/installed/monitoring.rs). No cluster needed.

use serde_json::Value;

/// Grafana unit ids the dashboards may use.
const UNITS: &[&str] = &[
    "short",
    "none",
    "ops",
    "reqps",
    "s",
    "bytes",
    "percentunit",
    "dateTimeAsIso",
];

/// Metric name prefixes of the series the dashboards query: the operators'.
const METRIC_PREFIXES: &[&str] = &["kubeflow_", "controller_runtime_", "process_"];

fn dashboards() -> Vec<(String, Value)> {
    let dir = kubeflow_e2e::repo_root().join("charts/kubeflow/files/dashboards");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("dashboards") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read");
        let d: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        out.push((path.display().to_string(), d));
    }
    assert_eq!(out.len(), 2, "dashboards: {out:?}");
    out
}

/// One metric selector in a query: the name, its `{...}` matchers and what
/// follows the selector (a range `[...]` or not).
#[derive(Debug)]
struct Selector {
    name: String,
    matchers: String,
    range: Option<String>,
}

/// The selectors of the operators' series in a PromQL expression.
fn selectors(expr: &str) -> Vec<Selector> {
    let b = expr.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if ident(b[i]) && (i == 0 || !ident(b[i - 1])) {
            let start = i;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            let name = &expr[start..i];
            if !METRIC_PREFIXES.iter().any(|p| name.starts_with(p)) {
                continue;
            }
            let mut matchers = String::new();
            if b.get(i) == Some(&b'{') {
                let end = expr[i..].find('}').map_or(b.len(), |e| i + e);
                matchers = expr[i + 1..end].to_string();
                i = end + 1;
            }
            let mut range = None;
            if b.get(i) == Some(&b'[') {
                let end = expr[i..].find(']').map_or(b.len(), |e| i + e);
                range = Some(expr[i + 1..end].to_string());
                i = end + 1;
            }
            out.push(Selector {
                name: name.to_string(),
                matchers,
                range,
            });
        } else {
            i += 1;
        }
    }
    out
}

/// Findings of the query rules on one expression.
fn query_findings(expr: &str) -> Vec<String> {
    let mut found = Vec::new();
    let sel = selectors(expr);
    if sel.is_empty() {
        found.push("queries none of the operators' series".into());
    }
    for s in &sel {
        for m in [r#"job=~"$job""#, r#"instance=~"$instance""#] {
            if !s.matchers.split(',').any(|x| x.trim() == m) {
                found.push(format!("{} lacks {m}", s.name));
            }
        }
        let counter = s.name.ends_with("_total") || s.name.ends_with("_bucket");
        if counter && s.range.is_none() {
            found.push(format!("counter {} outside rate or increase", s.name));
        }
        if let Some(r) = &s.range
            && r != "$__rate_interval"
        {
            found.push(format!("{} over [{r}], not [$__rate_interval]", s.name));
        }
    }
    found
}

fn variable<'a>(d: &'a Value, name: &str) -> Option<&'a Value> {
    d["templating"]["list"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == name)
}

fn dashboard_findings(d: &Value) -> Vec<String> {
    let mut found = Vec::new();
    if d["editable"] != false {
        found.push("editable (provisioned dashboards are not edited in place)".into());
    }
    match variable(d, "datasource") {
        Some(v) if v["type"] == "datasource" && v["query"] == "prometheus" => {}
        _ => found.push("no Prometheus `datasource` variable".into()),
    }
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] != "query" {
            continue;
        }
        let name = v["name"].as_str().unwrap_or("?");
        if v["datasource"]["uid"] != "${datasource}" {
            found.push(format!("variable {name}: not on $datasource"));
        }
        if v["refresh"] != 2 {
            found.push(format!(
                "variable {name}: not reloaded on time range change"
            ));
        }
        if v["multi"] != true || v["includeAll"] != true {
            found.push(format!("variable {name}: not multi-valued with All"));
        }
        let query = v["query"]["query"].as_str().unwrap_or("");
        if !(query.starts_with("label_values(") && query.ends_with(')')) {
            found.push(format!(
                "variable {name}: not a label_values query: {query}"
            ));
        }
        // Every variable after `instance` is narrowed by job and instance.
        if !matches!(name, "job" | "instance") {
            for f in query_findings(query) {
                found.push(format!("variable {name}: {f}"));
            }
        }
    }
    for name in ["job", "instance"] {
        if variable(d, name).is_none_or(|v| v["type"] != "query") {
            found.push(format!("no `{name}` variable"));
        }
    }
    for p in d["panels"].as_array().into_iter().flatten() {
        if p["type"] == "row" {
            continue;
        }
        let title = p["title"].as_str().unwrap_or("");
        let at = |f: &str| format!("panel {title:?}: {f}");
        if title.is_empty() {
            found.push(at("no title"));
        }
        if p["description"].as_str().is_none_or(str::is_empty) {
            found.push(at("no description"));
        }
        if p["datasource"]["uid"] != "${datasource}" {
            found.push(at("not on $datasource"));
        }
        let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("");
        if !UNITS.contains(&unit) {
            found.push(at(&format!("unit {unit:?}")));
        }
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            found.push(at("no targets"));
        }
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or("");
            for f in query_findings(expr) {
                found.push(at(&f));
            }
        }
    }
    found
}

#[test]
fn every_dashboard_passes_the_dashboard_linter_rules() {
    for (path, d) in dashboards() {
        let found = dashboard_findings(&d);
        assert!(found.is_empty(), "{path}:\n{}", found.join("\n"));
    }
}

#[test]
fn the_rules_find_what_they_should() {
    // The checks can fail: each bad query or dashboard is caught.
    let bad = |expr: &str| query_findings(expr);
    assert!(!bad(r#"kubeflow_leader{controller="x"}"#).is_empty());
    assert!(!bad(r#"kubeflow_leader{job=~"$job"}"#).is_empty());
    let ok = r#"kubeflow_leader{job=~"$job",instance=~"$instance"}"#;
    assert!(bad(ok).is_empty(), "{:?}", bad(ok));
    let counter = r#"sum(controller_runtime_reconcile_total{job=~"$job",instance=~"$instance"})"#;
    assert!(bad(counter).iter().any(|f| f.contains("outside rate")));
    let hour = r#"increase(kubeflow_drift_repairs_total{job=~"$job",instance=~"$instance"}[1h])"#;
    assert!(bad(hour).iter().any(|f| f.contains("[1h]")));
    assert!(!bad("vector(1)").is_empty());
    let (_, mut d) = dashboards().remove(0);
    d["editable"] = Value::Bool(true);
    d["panels"][0]["description"] = Value::String(String::new());
    d["panels"][0]["fieldConfig"]["defaults"]["unit"] = Value::Null;
    if let Some(list) = d["templating"]["list"].as_array_mut() {
        list.retain(|v| v["name"] != "instance");
    }
    let found = dashboard_findings(&d).join("\n");
    for f in [
        "editable",
        "no description",
        "unit",
        "no `instance` variable",
    ] {
        assert!(found.contains(f), "{f} not found in:\n{found}");
    }
}
