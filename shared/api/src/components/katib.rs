//! The `Katib` kind: hyperparameter tuning and neural architecture search
//! (Katib's controller, database manager, web app and database).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonSpec, ComponentStatus, ExternalDatabase, VolumePolicy};

/// Where Katib keeps its records.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KatibDatabase {
    /// Use this external database instead of the bundled MySQL (whose root
    /// password the operator generates and keeps in a Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalDatabase>,
}

component_crd! {
    kind = "Katib", plural = "katibs", shortname = "kfkatib", status = "ComponentStatus",
    doc = "Katib (hyperparameter tuning and neural architecture search: controller, database manager, web app, database), reconciled by the kubeflow-katib-operator. Needs Istio's and cert-manager's CRDs. Usually created by a Kubeflow resource; edit it to change this component alone.",
    version_doc = "Katib version to deploy, e.g. \"v0.19.0\"; the meta-operator sets it from its release table.",
    images_doc = "Image overrides by container name, e.g. {\"katib-controller\": \"registry.example/kubeflow/katib/katib-controller:v0.19.0\"}; the others are \"katib-db-manager\", \"katib-ui\" and \"katib-mysql\". The suggestion and metrics-collector images in katib-config move with imageRegistry.",
    schema = JsonSchema, columns = [printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),],
    /// Desired state of Katib.
    pub struct KatibSpec {
        /// Version, images, scale and scheduling (of the controller, database manager and web app).
        #[serde(flatten)]
        pub common: CommonSpec,
        /// Records database: the bundled MySQL unless `external` is set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub database: Option<KatibDatabase>,
        /// Whether the bundled database's volume and the generated password
        /// that opens it are kept (Retain, default) or deleted on removal.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub volume_policy: Option<VolumePolicy>,
        /// The kinds a Trial may run, as Kind.version.group (e.g.
        /// "Job.v1.batch", "TrainJob.v1alpha1.trainer.kubeflow.org"),
        /// replacing the release's list. The controller watches each.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(
            length(min = 1, max = 32),
            extend("items" = {"type": "string", "maxLength": 316,
                "pattern": "^[A-Z][A-Za-z0-9]*\\.v[0-9a-z]+\\.[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"})
        )]
        pub trial_resources: Option<Vec<String>>,
        /// The suggestion algorithms offered, by name (e.g. "random",
        /// "tpe", "grid"): a subset of the release's. An Experiment asking
        /// for another is refused by Katib. Unset: all of the release's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(
            length(min = 1, max = 32),
            extend("items" = {"type": "string", "minLength": 1, "maxLength": 63})
        )]
        pub suggestion_algorithms: Option<Vec<String>>,
    }
}
