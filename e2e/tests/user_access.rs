//! What the cluster's users get, on the real API server: the chart's viewer
//! role aggregated into `view` (and so `edit` and `admin`) lets namespace
//! users read the resources and their status but not create them; only the
//! editor role, bound on purpose, does. And our short names and category
//! stay unambiguous beside operators whose plural names clash with ours
//! (Sail's `istios`, Tekton's `pipelines`).

use std::time::Duration;

use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams};
use kubeflow_e2e::access::Request;
use kubeflow_e2e::component::{ALL_KINDS, prepare};
use kubeflow_e2e::{TestNamespace, apply_yaml, run_tool, wait_for};

const TIMEOUT: Duration = Duration::from_secs(60);

async fn can_i(
    client: &kube::Client,
    user: &str,
    verb: &str,
    resource: &str,
    namespace: &str,
) -> bool {
    can_i_on(client, user, verb, resource, None, namespace).await
}

/// Whether `user` may (`<plural>.<group>` as `kubectl auth can-i` takes
/// it), of a subresource when one is named: an access review in process,
/// where a failure to ask fails the test instead of reading as "no".
async fn can_i_on(
    client: &kube::Client,
    user: &str,
    verb: &str,
    resource: &str,
    subresource: Option<&str>,
    namespace: &str,
) -> bool {
    let (resource, group) = resource.split_once('.').unwrap_or((resource, ""));
    let what = Request {
        verb,
        group,
        resource,
        subresource: subresource.unwrap_or_default(),
        namespace,
        ..Default::default()
    };
    kubeflow_e2e::access::can_user(client, user, what)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}

fn user_roles() -> String {
    let chart = kubeflow_e2e::chart::dir();
    let out = run_tool(
        "helm",
        &[
            "template",
            "kf",
            &chart,
            "--kube-version",
            "1.36.3",
            "--show-only",
            "templates/user-roles.yaml",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[tokio::test]
async fn namespace_users_see_the_resources_and_only_bound_editors_write_them() {
    let (client, _g) = prepare(&ALL_KINDS, &[]).await;
    let ns = TestNamespace::new(&client, "users").await;
    apply_yaml(&client, &ns.name, &user_roles()).await;
    let bindings: Vec<String> = [
        ("viewer", "view", "e2e-viewer"),
        ("admin", "admin", "e2e-admin"),
        ("platform", "kf-kubeflow-editor", "e2e-platform"),
    ]
    .iter()
    .map(|(name, role, user)| {
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {name}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\n\
             subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]\n"
        )
    })
    .collect();
    let bindings = bindings.join("---\n");
    apply_yaml(&client, &ns.name, &bindings).await;
    // The aggregation controller copies the viewer's rules into `view`,
    // and into `admin` apart, which may come later (CI run 50: `view` had
    // them, `admin` not yet).
    for user in ["e2e-viewer", "e2e-admin"] {
        wait_for(
            &format!("{user}'s role to include the Kubeflow kinds"),
            TIMEOUT,
            || async {
                can_i(
                    &client,
                    user,
                    "list",
                    "trainings.components.kubeflow.org",
                    &ns.name,
                )
                .await
                .then_some(())
            },
        )
        .await;
    }
    for user in ["e2e-viewer", "e2e-admin"] {
        // Every component kind the registry names, and the Kubeflow kind.
        let resources = kubeflow_api::registry::COMPONENTS
            .iter()
            .map(|c| format!("{}.components.kubeflow.org", c.plural))
            .chain(["kubeflows.platform.kubeflow.org".to_string()]);
        for resource in resources {
            let resource = resource.as_str();
            assert!(
                can_i(&client, user, "get", resource, &ns.name).await,
                "{user} get {resource}"
            );
            assert!(
                can_i(&client, user, "watch", resource, &ns.name).await,
                "{user} watch {resource}"
            );
            // Neither `view` nor `admin` writes them: that would install
            // cluster-scoped objects on a namespace user's word.
            for verb in ["create", "patch", "delete"] {
                assert!(
                    !can_i(&client, user, verb, resource, &ns.name).await,
                    "{user} {verb} {resource}"
                );
            }
        }
    }
    for verb in ["create", "patch", "delete"] {
        assert!(
            can_i(
                &client,
                "e2e-platform",
                verb,
                "kubeflows.platform.kubeflow.org",
                &ns.name
            )
            .await
        );
        assert!(
            can_i(
                &client,
                "e2e-platform",
                verb,
                "pipelines.components.kubeflow.org",
                &ns.name
            )
            .await
        );
    }
    // The status is the operators' to write, nobody else's: the editor who
    // may patch the resource may not patch its status.
    for resource in [
        "trainings.components.kubeflow.org",
        "kubeflows.platform.kubeflow.org",
    ] {
        assert!(can_i_on(&client, "e2e-platform", "patch", resource, None, &ns.name).await);
        assert!(
            !can_i_on(
                &client,
                "e2e-platform",
                "patch",
                resource,
                Some("status"),
                &ns.name
            )
            .await,
            "{resource}/status"
        );
    }
    let roles: Api<ClusterRole> = Api::all(client.clone());
    for name in ["kf-kubeflow-viewer", "kf-kubeflow-editor"] {
        roles
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete {name}: {e}"));
    }
    ns.delete().await;
}

/// A CRD standing in for another operator's, with a plural of ours.
fn foreign_crd(group: &str, kind: &str, plural: &str, categories: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: {plural}.{group}}}\nspec:\n  group: {group}\n  names: {{kind: {kind}, plural: {plural}, singular: {singular}, categories: [{categories}]}}\n  scope: Namespaced\n  versions:\n    - name: v1\n      served: true\n      storage: true\n      schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}\n",
        singular = kind.to_lowercase()
    )
}

#[tokio::test]
async fn short_names_and_the_category_stay_ours_beside_sail_and_tekton() {
    let (client, _g) = prepare(&ALL_KINDS, &[]).await;
    let ns = TestNamespace::new(&client, "names").await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let foreign = [
        (
            "istios.sailoperator.io",
            foreign_crd("sailoperator.io", "Istio", "istios", "sail"),
        ),
        (
            "pipelines.tekton.dev",
            foreign_crd(
                "tekton.dev",
                "Pipeline",
                "pipelines",
                "tekton, tekton-pipelines",
            ),
        ),
    ];
    for (_, crd) in &foreign {
        apply_yaml(&client, "", crd).await;
    }
    let ours = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Istio\nmetadata: {name: mesh}\nspec: {}\n---\napiVersion: components.kubeflow.org/v1alpha1\nkind: Pipelines\nmetadata: {name: kfp}\nspec: {}\n";
    let theirs = "apiVersion: sailoperator.io/v1\nkind: Istio\nmetadata: {name: sail}\n---\napiVersion: tekton.dev/v1\nkind: Pipeline\nmetadata: {name: build}\n";
    wait_for("the foreign kinds to be served", TIMEOUT, || async {
        let out = run_tool(
            "kubectl",
            &[
                "get",
                "pipelines.tekton.dev,istios.sailoperator.io",
                "-n",
                &ns.name,
            ],
        );
        out.status.success().then_some(())
    })
    .await;
    apply_yaml(&client, &ns.name, ours).await;
    apply_yaml(&client, &ns.name, theirs).await;
    let names = |what: &str| -> String {
        let out = run_tool("kubectl", &["get", what, "-n", &ns.name, "-o", "name"]);
        assert!(
            out.status.success(),
            "get {what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(names("kfistio"), "istio.components.kubeflow.org/mesh");
    assert_eq!(
        names("kfpipelines"),
        "pipelines.components.kubeflow.org/kfp"
    );
    let all = names("kubeflow-all");
    let mut listed: Vec<&str> = all.lines().collect();
    listed.sort_unstable();
    assert_eq!(
        listed,
        [
            "istio.components.kubeflow.org/mesh",
            "pipelines.components.kubeflow.org/kfp"
        ],
        "the category lists ours only"
    );
    // The full names always work; the bare plural is what clashes.
    assert_eq!(
        names("istios.components.kubeflow.org"),
        "istio.components.kubeflow.org/mesh"
    );
    ns.delete().await;
    for (name, _) in &foreign {
        crds.delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete {name}: {e}"));
    }
}
