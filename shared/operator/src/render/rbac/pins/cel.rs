//! Writing CEL: literals of the bundles' contents, variables and checks.

use std::collections::BTreeMap;

use super::bundled::Names;
use super::{Check, Variable};

/// Null and absent alike (the API server keeps an empty list as null).
pub(super) fn empty(list: &str) -> String {
    format!("(!has({list}) || type({list}) == null_type || size({list}) == 0)")
}

/// A CEL string literal.
pub(super) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

pub(super) fn list<'a>(items: impl IntoIterator<Item = &'a String>) -> String {
    let items: Vec<String> = items.into_iter().map(|s| quote(s)).collect();
    format!("[{}]", items.join(", "))
}

pub(super) fn map(names: &Names) -> String {
    let entries: Vec<String> = names
        .iter()
        .map(|(k, v)| format!("{}: {}", quote(k), list(v)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

pub(super) fn map_of_maps(by: &BTreeMap<&'static str, Names>) -> String {
    let entries: Vec<String> = by
        .iter()
        .map(|(k, v)| format!("{}: {}", quote(k), map(v)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

pub(super) fn var(name: &str, expression: String) -> Variable {
    Variable {
        name: name.into(),
        expression,
    }
}

/// A check of creates and updates of `resources` (a delete has no
/// `object`: see `deletes`).
pub(super) fn check(resources: &[&str], body: String, message: &str) -> Check {
    let guard: Vec<String> = resources
        .iter()
        .map(|r| format!("request.resource.resource != {}", quote(r)))
        .collect();
    Check {
        expression: format!(
            "({}) || request.operation == 'DELETE' || ({body})",
            guard.join(" && ")
        ),
        message: message.into(),
    }
}

/// The repository of `image` (a CEL string expression), as [`repository`].
pub(super) fn cel_repository(image: &str) -> String {
    let named = format!("{image}.split('@')[0]");
    format!(
        "({named}.lastIndexOf(':') > {named}.lastIndexOf('/') ? {named}.substring(0, {named}.lastIndexOf(':')) : {named})"
    )
}
