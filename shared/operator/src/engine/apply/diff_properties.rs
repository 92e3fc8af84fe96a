//! Properties of the write decision (`diff::write_reason`) over generated
//! objects: nothing to write when what the field manager owns agrees with
//! what we want, values the API server normalizes compare equal, and a field
//! we own but no longer want always forces a write.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::diff::write_reason;

const MANAGER: &str = "kubeflow-test-operator";

/// Object trees of maps and scalars, a few levels deep.
fn tree() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        "[a-z0-9]{0,6}".prop_map(Value::String),
        any::<i32>().prop_map(|n| json!(n)),
        any::<bool>().prop_map(Value::Bool),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop::collection::btree_map("[a-z]{1,4}", inner, 1..4)
            .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>()))
    })
}

fn object() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map("[a-z]{1,4}", tree(), 1..5)
        .prop_map(|m| m.into_iter().collect::<Map<_, _>>())
}

/// `fieldsV1` owning every field of `v`, as server-side apply records it.
fn fields_of(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, c)| (format!("f:{k}"), fields_of(c)))
                .collect(),
        ),
        _ => json!({}),
    }
}

/// The live object: what was applied, with the manager's ownership of it.
fn live(applied: &Value, shown: &Value) -> Value {
    let mut live = shown.clone();
    live["metadata"] = json!({"managedFields": [{
        "manager": MANAGER, "operation": "Apply", "fieldsV1": fields_of(applied),
    }]});
    live
}

proptest! {
    #[test]
    fn nothing_is_written_when_owned_and_wanted_agree(spec in object()) {
        let desired = json!({ "spec": spec });
        prop_assert_eq!(write_reason(&desired, &live(&desired, &desired), MANAGER), None);
    }

    #[test]
    fn a_field_owned_and_no_longer_wanted_forces_a_write(spec in object(), pick in any::<prop::sample::Index>()) {
        let applied = json!({ "spec": spec.clone() });
        let dropped = pick.get(&spec.keys().cloned().collect::<Vec<_>>()).clone();
        let mut fewer = spec;
        fewer.remove(&dropped);
        let desired = json!({ "spec": fewer });
        let why = write_reason(&desired, &live(&applied, &applied), MANAGER);
        prop_assert_eq!(why, Some(format!("unwanted .spec.{dropped}")));
    }

    #[test]
    fn a_changed_value_forces_a_write(spec in object(), pick in any::<prop::sample::Index>()) {
        let desired = json!({ "spec": spec.clone() });
        let key = pick.get(&spec.keys().cloned().collect::<Vec<_>>()).clone();
        let mut changed = spec;
        changed.insert(key, json!("someone-else's-value"));
        let shown = json!({ "spec": changed });
        prop_assert!(write_reason(&desired, &live(&desired, &shown), MANAGER).is_some());
    }

    #[test]
    fn quantities_the_server_normalizes_compare_equal(gib in 1u32..512, cores in 1u32..64) {
        let desired = json!({"spec": {"resources": {"limits": {
            "memory": format!("{}Mi", gib * 1024), "cpu": format!("{}m", cores * 1000),
        }}}});
        let shown = json!({"spec": {"resources": {"limits": {
            "memory": format!("{gib}Gi"), "cpu": format!("{cores}"),
        }}}});
        prop_assert_eq!(write_reason(&desired, &live(&desired, &shown), MANAGER), None);
    }

    #[test]
    fn an_empty_string_is_an_omitted_field(spec in object(), key in "[a-z]{5,6}") {
        let mut with_empty = spec.clone();
        with_empty.insert(key, json!(""));
        let desired = json!({ "spec": with_empty });
        let shown = json!({ "spec": spec });
        prop_assert_eq!(write_reason(&desired, &live(&desired, &shown), MANAGER), None);
    }
}
