//! What the operator knows of Katib: its workloads, its configuration file,
//! its database (bundled or external), which volume holds data, and what it
//! needs from Istio and cert-manager.

use kubeflow_operator::api::Katib;
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::component::{
    Component, DereferenceError, Draft, Reference, Refusal, require_crd,
};
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::kube::{Client, ResourceExt};
use kubeflow_operator::render::{Layout, Target};
use kubeflow_operator::serde_json::Value;
use kubeflow_operator::{secrets, transform};

use crate::{database, katib_config};

/// The namespace the upstream bundle installs into.
const BUNDLE_NAMESPACE: &str = "kubeflow";
/// The workloads replicas, resources and scheduling apply to (the bundled
/// database is one instance on one volume, so it keeps its own).
const WORKLOADS: [&str; 3] = ["katib-controller", database::MANAGER, "katib-ui"];
/// The controller, which reads `katib-config` only when it starts.
const CONTROLLER: &str = "katib-controller";

/// The Katib component.
pub struct KatibComponent;

/// What `dereference` reads for `render`.
#[derive(Default)]
pub struct Inputs {
    /// The bundled database's root password (kept, or new on the first
    /// install); none with an external database.
    password: Option<String>,
}

#[async_trait]
impl Component for KatibComponent {
    type Resource = Katib;
    type Inputs = Inputs;

    const LAYOUT: Layout = Layout {
        from_namespaces: &[BUNDLE_NAMESPACE],
        target: Target::ResourceNamespace,
        workloads: &WORKLOADS,
    };

    fn references(cr: &Katib) -> Vec<Reference> {
        external(cr)
            .map(|db| vec![Reference::Secret(db.credentials_secret.clone())])
            .unwrap_or_default()
    }

    async fn dereference(&self, cr: &Katib, client: &Client) -> Result<Inputs, DereferenceError> {
        // The web app's VirtualService and AuthorizationPolicy, and the
        // webhooks' Issuer and Certificate, are kinds of these two.
        require_crd(
            client,
            "virtualservices.networking.istio.io",
            "Katib's web app routes through Istio; enable istio in the Kubeflow resource (or install Istio)",
        )
        .await?;
        require_crd(
            client,
            "certificates.cert-manager.io",
            "Katib's webhooks get their certificate from cert-manager; enable certManager in the Kubeflow resource (or install cert-manager)",
        )
        .await?;
        let ns = cr.namespace().unwrap_or_default();
        match external(cr) {
            Some(db) => {
                secrets::require(
                    client,
                    &ns,
                    &db.credentials_secret,
                    &kubeflow_operator::database::CREDENTIAL_KEYS,
                )
                .await?;
                Ok(Inputs::default())
            }
            None => Ok(Inputs {
                password: Some(database::kept_or_new_password(client, &ns).await?),
            }),
        }
    }

    fn prepare(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let cr = draft.cr;
        let spec = &cr.spec;
        // The schema's pattern, again for a resource stored before it had
        // one: the host is written into the manager's environment as is.
        if let Some(db) = external(cr) {
            kubeflow_operator::validate::host("spec.database.external.host", &db.host)
                .map_err(|m| Refusal::new(kubeflow_operator::conditions::Reason::InvalidSpec, m))?;
        }
        // Before the common settings: the images of the algorithms still
        // offered move with the mirror like the rest.
        for cm in transform::config_maps(&mut draft.objects, katib_config::CONFIG_MAP) {
            let text = cm.data["data"][katib_config::FILE]
                .as_str()
                .unwrap_or_default();
            let edited = katib_config::edited(
                text,
                spec.trial_resources.as_deref(),
                spec.suggestion_algorithms.as_deref(),
            )?;
            cm.data["data"][katib_config::FILE] = Value::String(edited);
        }
        Ok(())
    }

    fn customise(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let (cr, ctx, inputs) = (draft.cr, draft.ctx, draft.inputs);
        let objects = &mut draft.objects;
        transform::rewrite_service_hosts(objects, BUNDLE_NAMESPACE, ctx.namespace);
        match (external(cr), &inputs.password) {
            (Some(db), _) => database::use_external(objects, db),
            (None, Some(password)) => database::set_password(objects, password),
            (None, None) => kubeflow_operator::database::drop_secrets(objects, &[database::SECRET]),
        }
        transform::roll_on_change(
            objects,
            CONTROLLER,
            &[("ConfigMap", katib_config::CONFIG_MAP)],
        );
        Ok(())
    }

    /// When the bundled database goes (an external one is used instead),
    /// its volume is released by every prune; the password that opens the
    /// data on it is released with it rather than deleted.
    fn release_on_prune(&self, _cr: &Katib, obj: &DynamicObject) -> Option<String> {
        (kind(obj) == "Secret" && database::bundled(obj)).then(|| {
            kubeflow_operator::database::released_credentials(
                "Katib",
                "database",
                &format!("the released volume {}", database::VOLUME),
            )
        })
    }

    /// The bundled database's volume, and the password that opens it, outlive
    /// the component unless the spec says otherwise.
    fn retain(&self, cr: &Katib, obj: &DynamicObject) -> bool {
        kubeflow_operator::database::kept(
            cr.spec.volume_policy,
            matches!(kind(obj), "PersistentVolumeClaim" | "Secret") && database::bundled(obj),
        )
    }
}

/// The external database, when the spec names one.
fn external(cr: &Katib) -> Option<&kubeflow_operator::api::ExternalDatabase> {
    cr.spec.database.as_ref().and_then(|d| d.external.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::component::{
        Rendered, assert_permitted, every_version, find, render_spec,
    };
    use kubeflow_operator::serde_json::json;

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&KatibComponent, |dir| every_version(dir, "katib"));
    }

    fn env_of(r: &Rendered, workload: &str) -> Vec<Value> {
        find(r, "Deployment", workload).expect("workload").data["spec"]["template"]["spec"]
            ["containers"][0]["env"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn the_library_knows_the_demo_password_and_an_override_cannot_put_it_back() {
        use kubeflow_operator::known_secrets;
        let bundle = kubeflow_operator::bundle::load(
            &kubeflow_operator::component::manifests_dir(),
            "katib",
            "v0.19.0",
        )
        .expect("bundle")
        .objects();
        let found = known_secrets::find(&bundle);
        assert!(
            found
                .iter()
                .any(|f| f.field == format!("data.{}", database::PASSWORD_KEY)),
            "{found:?}"
        );
        let inputs = Inputs {
            password: Some("0123abcd".into()),
        };
        let mut r =
            render_spec(&KatibComponent, json!({"version": "v0.19.0"}), &inputs).expect("render");
        assert!(known_secrets::find(&r.objects).is_empty());
        // The override a person might copy from upstream's docs: the root
        // password back to `test`, on the database's own variable.
        let overrides: Vec<kubeflow_operator::api::Override> = serde_json::from_value(json!([
            {"target": {"kind": "Deployment", "name": "katib-mysql"},
             "jsonPatch": [{"op": "add", "path": "/spec/template/spec/containers/0/env/-",
                            "value": {"name": "MYSQL_ROOT_PASSWORD", "value": "test"}}]}]))
        .expect("overrides");
        kubeflow_operator::overrides::apply(
            &mut r.objects,
            &overrides,
            "spec.overrides",
            "v0.19.0",
        )
        .expect("applies");
        let refusal = known_secrets::refuse(&r.objects, &[("spec.overrides", &overrides)])
            .expect_err("refused");
        assert!(
            refusal.message.starts_with("spec.overrides[0] (Deployment katib-mysql): Deployment kubeflow/katib-mysql spec.template.spec.containers[0].env[MYSQL_ROOT_PASSWORD].value holds"),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn the_bundled_database_gets_the_generated_password_never_the_demo_one() {
        let inputs = Inputs {
            password: Some("0123abcd".into()),
        };
        let r =
            render_spec(&KatibComponent, json!({"version": "v0.19.0"}), &inputs).expect("render");
        let secret = find(&r, "Secret", database::SECRET).expect("secret");
        // "0123abcd" in base64.
        assert_eq!(secret.data["data"][database::PASSWORD_KEY], "MDEyM2FiY2Q=");
        assert!(secret.data.get("stringData").is_none());
        let text = serde_json::to_string(&r.objects).expect("json");
        assert!(
            !text.contains("dGVzdA=="),
            "the release's demo password is gone"
        );
        let digest = |w: &str| {
            find(&r, "Deployment", w).expect("workload").data["spec"]["template"]["metadata"]
                ["annotations"][transform::CONFIG_DIGEST]
                .clone()
        };
        assert!(digest("katib-mysql").is_string() && digest(database::MANAGER).is_string());
    }

    #[test]
    fn an_external_database_replaces_the_bundled_one() {
        let spec = json!({"version": "v0.19.0", "database": {"external": {
            "engine": "PostgreSQL", "host": "pg.example", "credentialsSecret": "katib-db"}}});
        let r = render_spec(&KatibComponent, spec, &Inputs::default()).expect("render");
        assert!(
            !r.objects.iter().any(database::bundled),
            "no bundled database"
        );
        let env = env_of(&r, database::MANAGER);
        let of = |n: &str| {
            env.iter()
                .find(|e| e["name"] == n)
                .cloned()
                .unwrap_or_default()
        };
        assert_eq!(of("DB_NAME")["value"], "postgres");
        assert_eq!(of("KATIB_POSTGRESQL_DB_HOST")["value"], "pg.example");
        assert_eq!(of("KATIB_POSTGRESQL_DB_PORT")["value"], "5432");
        assert_eq!(of("KATIB_POSTGRESQL_DB_DATABASE")["value"], "katib");
        assert_eq!(
            of("DB_PASSWORD")["valueFrom"]["secretKeyRef"],
            json!({"name": "katib-db", "key": "password"})
        );
        assert_eq!(
            of("DB_USER")["valueFrom"]["secretKeyRef"],
            json!({"name": "katib-db", "key": "username"})
        );
    }

    #[test]
    fn an_external_database_host_with_more_than_a_host_is_refused() {
        for host in [
            "pg.example\nKATIB_MYSQL_DB_PASSWORD=x",
            "pg.example;drop",
            "pg.example:5432",
            "user@pg.example",
            "pg.example/katib?sslmode=disable",
        ] {
            let spec = json!({"version": "v0.19.0", "database": {"external": {
                "host": host, "credentialsSecret": "katib-db"}}});
            let r = render_spec(&KatibComponent, spec, &Inputs::default())
                .err()
                .expect(host);
            assert_eq!(r.reason, kubeflow_operator::conditions::Reason::InvalidSpec);
            assert!(
                r.message.starts_with("spec.database.external.host: "),
                "{}",
                r.message
            );
        }
        for host in ["10.1.2.3", "fd00::7", "MySQL.db.svc"] {
            let spec = json!({"version": "v0.19.0", "database": {"external": {
                "host": host, "credentialsSecret": "katib-db"}}});
            render_spec(&KatibComponent, spec, &Inputs::default()).expect(host);
        }
    }

    #[test]
    fn the_configuration_moves_with_the_mirror_and_rolls_the_controller() {
        let spec = json!({"version": "v0.19.0", "imageRegistry": "mirror.example:5000",
            "suggestionAlgorithms": ["random", "grid"], "trialResources": ["Job.v1.batch"]});
        let r = render_spec(&KatibComponent, spec.clone(), &Inputs::default()).expect("render");
        let cm = find(&r, "ConfigMap", katib_config::CONFIG_MAP).expect("config");
        let text = cm.data["data"][katib_config::FILE]
            .as_str()
            .unwrap_or_default();
        assert_eq!(katib_config::algorithms(text), ["random", "grid"]);
        assert!(
            text.contains("mirror.example:5000/kubeflow/katib/suggestion-optuna:v0.19.0"),
            "{text}"
        );
        assert!(!text.contains("ghcr.io/"), "every image moved: {text}");
        let digest = |r: &Rendered| {
            find(r, "Deployment", CONTROLLER).expect("controller").data["spec"]["template"]
                ["metadata"]["annotations"][transform::CONFIG_DIGEST]
                .clone()
        };
        let release = render_spec(
            &KatibComponent,
            json!({"version": "v0.19.0"}),
            &Inputs::default(),
        )
        .expect("render");
        assert_ne!(
            digest(&r),
            digest(&release),
            "a new configuration rolls the controller"
        );
        let refused = render_spec(
            &KatibComponent,
            json!({"version": "v0.19.0", "suggestionAlgorithms": ["random", "simulated-annealing"]}),
            &Inputs::default(),
        )
        .err()
        .expect("refused");
        assert!(
            refused.message.contains("spec.suggestionAlgorithms[1]"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn kubectl_get_kubeflow_and_katib_keep_meaning_the_projects_kinds() {
        let r = render_spec(
            &KatibComponent,
            json!({"version": "v0.19.0"}),
            &Inputs::default(),
        )
        .expect("render");
        for name in [
            "experiments.kubeflow.org",
            "suggestions.kubeflow.org",
            "trials.kubeflow.org",
        ] {
            let crd = find(&r, "CustomResourceDefinition", name).expect("crd");
            assert_eq!(
                crd.data["spec"]["names"]["categories"],
                json!(["all"]),
                "{name}"
            );
        }
    }

    #[test]
    fn the_volume_and_its_password_are_kept_unless_the_spec_says_delete() {
        let r = render_spec(
            &KatibComponent,
            json!({"version": "v0.19.0"}),
            &Inputs {
                password: Some("x".into()),
            },
        )
        .expect("render");
        let cr = |policy: Value| -> Katib {
            serde_json::from_value(json!({"apiVersion": "components.kubeflow.org/v1alpha1",
                "kind": "Katib", "metadata": {"name": "k", "namespace": "kubeflow"},
                "spec": {"version": "v0.19.0", "volumePolicy": policy}}))
            .expect("cr")
        };
        let kept: Vec<String> = r
            .objects
            .iter()
            .filter(|o| KatibComponent.retain(&cr(json!("Retain")), o))
            .map(|o| format!("{}/{}", kind(o), o.name_any()))
            .collect();
        assert_eq!(
            kept,
            [
                "Secret/katib-mysql-secrets",
                "PersistentVolumeClaim/katib-mysql"
            ]
        );
        assert!(
            !r.objects
                .iter()
                .any(|o| KatibComponent.retain(&cr(json!("Delete")), o))
        );
    }
}
