//! People who log in during tests: a random password each, hashed with
//! bcrypt as dex takes it, kept in the users Secret an Auth resource names.
//! No test knows a password before it runs.

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, PostParams};
use kubeflow_operator::secrets;

/// The Secret the tests' Auth resources name (`spec.dex.usersSecret`).
pub const USERS_SECRET: &str = "kubeflow-users";

/// The Kubeflow CR's entry for Auth in tests: dex with the users of
/// [`USERS_SECRET`] (which [`create_users_secret`] makes first).
pub const AUTH_ENTRY: &str =
    "auth: {managementState: Managed, spec: {dex: {usersSecret: kubeflow-users}}}";

/// A person with a password.
#[derive(Debug, Clone)]
pub struct TestUser {
    /// The login.
    pub email: String,
    /// In clear: only the test holds it.
    pub password: String,
}

impl TestUser {
    /// A user with a fresh random password.
    pub fn random(email: &str) -> TestUser {
        TestUser {
            email: email.to_string(),
            password: secrets::random_hex(12).expect("random"),
        }
    }

    /// The bcrypt hash of the password (cost 10, as `htpasswd -B` makes).
    pub fn hash(&self) -> String {
        let salt_hex = secrets::random_hex(16).expect("random");
        let mut salt = [0u8; 16];
        for (i, b) in salt.iter_mut().enumerate() {
            *b = u8::from_str_radix(&salt_hex[2 * i..2 * i + 2], 16).expect("hex");
        }
        bcrypt::hash_with_salt(&self.password, 10, salt)
            .expect("bcrypt")
            .to_string()
    }
}

/// The `users.yaml` a users Secret holds for `users`.
pub fn users_yaml(users: &[TestUser]) -> String {
    users
        .iter()
        .map(|u| format!("- email: {}\n  hash: \"{}\"\n", u.email, u.hash()))
        .collect()
}

/// Creates (or replaces) the users Secret in `ns` with `users`.
pub async fn create_users_secret(client: &Client, ns: &str, users: &[TestUser]) {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": USERS_SECRET},
        "stringData": {"users.yaml": users_yaml(users)},
    }))
    .expect("secret");
    let _ = api.delete(USERS_SECRET, &Default::default()).await;
    crate::component::wait_gone(&api, USERS_SECRET, std::time::Duration::from_secs(30)).await;
    api.create(&PostParams::default(), &secret)
        .await
        .expect("create the users Secret");
}

/// What an Auth test needs of Istio without running it: Istio's CRDs and
/// the gateway's namespace (Istio would have made both), without what an
/// earlier run that stopped half-way left there (the sweep removed its Auth
/// with no operator to clean up after it). Returns the serial lock's guard
/// and the client, as `component::prepare` does.
pub async fn prepare_auth() -> (Client, crate::Serial) {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams};
    use kube::core::GroupVersionKind;

    let (client, guard) = crate::component::prepare(&["Auth"], &["auth"]).await;
    crate::component::install_bundle_crds(&client, "istio/1.30.1/crds.yaml").await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // One an earlier test deleted may still be going: wait, then make it.
    if let Ok(Some(ns)) = namespaces.get_opt("istio-system").await
        && ns.metadata.deletion_timestamp.is_some()
    {
        crate::component::wait_gone(
            &namespaces,
            "istio-system",
            std::time::Duration::from_secs(120),
        )
        .await;
    }
    match namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "istio-system"}}))
                .expect("ns"),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("cannot make istio-system: {e}"),
    }
    for (kind, plural) in [
        ("AuthorizationPolicy", "authorizationpolicies"),
        ("RequestAuthentication", "requestauthentications"),
    ] {
        let api = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            "istio-system",
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("security.istio.io", "v1beta1", kind),
                plural,
            ),
        );
        let _ = api
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels("components.kubeflow.org/component=auth"),
            )
            .await;
    }
    (client, guard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_verifies_the_password_and_no_other() {
        let u = TestUser::random("jane@example.com");
        let h = u.hash();
        assert!(h.starts_with("$2b$10$") && h.len() == 60, "{h}");
        assert!(bcrypt::verify(&u.password, &h).expect("verify"));
        assert!(!bcrypt::verify("12341234", &h).expect("verify"));
    }
}
