//! The operator binary's command line: run, or print the RBAC it needs.

use kube::Resource;
use kube::api::DynamicObject;
use kubeflow_api::{ComponentResource, Platform};

use super::{Component, ComponentArgs, Refusal, RenderContext, run};
use crate::base::bundle::{BundleCache, BundleError};
use crate::base::conditions::Reason;
use crate::render::rbac;

/// Command line of a component operator. Its name and description are the
/// component's, set in [`command`]: the six binaries share this type.
#[derive(clap::Parser, Debug)]
#[command(version)]
pub(super) struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    args: ComponentArgs,
}

/// What an operator binary can do besides running.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Print the RBAC rules the operator needs, by scope (the chart's RBAC is generated from them).
    Rbac,
    /// Print every image a version would run, one per line (the list to
    /// mirror for an air-gapped install); `--detailed` adds where each is.
    Images {
        /// The component version (a bundle folder name).
        #[arg(long)]
        version: String,
        /// One line per place: image, object, path.
        #[arg(long)]
        detailed: bool,
    },
    /// Print what moving between two versions would do, from the bundles
    /// alone: objects created, changed, pruned, released, recreated (and
    /// why), CRD versions and images (for the meta-operator: Kubeflow
    /// releases, component by component, with the upgrade's risks).
    Plan {
        /// The version installed.
        #[arg(long)]
        from: String,
        /// The version to move to.
        #[arg(long)]
        to: String,
        /// The namespace the CR is in (component operators: the plan names
        /// the objects there, as the plan the operator publishes in the
        /// CR's status.upgradePlan does).
        #[arg(long, default_value = "kubeflow")]
        namespace: String,
    },
}

/// Settings read from the environment only (every flag also has its
/// variable, shown beside it).
pub const ENVIRONMENT_HELP: &str = "\
Environment:
  LOG_FORMAT=json  log JSON lines (as the chart sets); otherwise readable text
  RUST_LOG         log filter, e.g. info or kube_runtime=debug,info (default: info)";

/// The component operator's command line, named after the component.
pub fn command<C: Component>() -> clap::Command {
    let component = C::Resource::COMPONENT;
    let kind = C::Resource::kind(&());
    // clap keeps names as &'static str; built once per process, so leaking
    // the two strings costs nothing.
    let name: &'static str = format!("kubeflow-{component}-operator").leak();
    let about: &'static str = format!(
        "Installs Kubeflow's {component} component from `{kind}` custom resources \
         and keeps it as they say."
    )
    .leak();
    <Cli as clap::CommandFactory>::command()
        .name(name)
        .bin_name(name)
        .about(about)
        .after_help(ENVIRONMENT_HELP)
}

/// The whole `main` of a component operator: parse flags, run until SIGTERM.
pub async fn main<C: Component>(component: C) -> anyhow::Result<()> {
    let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&command::<C>().get_matches())
        .unwrap_or_else(|e| e.exit());
    match cli.command {
        Some(Command::Rbac) => {
            let rules = rules_of(&component, &cli.args.manifests_dir)?;
            print!("{}", rules.to_yaml()?);
            Ok(())
        }
        Some(Command::Images { version, detailed }) => {
            let found = images_of(&component, &cli.args.manifests_dir, &version)
                .map_err(|r| anyhow::anyhow!("{}: {}", r.reason, r.message))?;
            print!("{}", crate::render::images::listing(&found, detailed));
            Ok(())
        }
        Some(Command::Plan {
            from,
            to,
            namespace,
        }) => {
            let render = |v: &str, inputs: &C::Inputs| {
                rendered_with(&component, &cli.args.manifests_dir, v, &namespace, inputs)
                    .map_err(|r| anyhow::anyhow!("{}: {}", r.reason, r.message))
            };
            let installed = render(&from, &C::Inputs::default())?;
            let target = render(&to, &component.planned_inputs(&installed))?;
            let mut plan = crate::render::upgrade_plan::Plan::compute(&installed, &target);
            plan.actions = component.upgrade_actions(None, &from, &to);
            print!("{} {from} -> {to}: {plan}", C::Resource::COMPONENT);
            Ok(())
        }
        None => {
            let deadline = std::time::Duration::from_secs(cli.args.run.shutdown_deadline);
            crate::framework::runner::until_deadline(run(component, cli.args), deadline).await
        }
    }
}

/// The rules a component operator needs, by scope.
pub fn rules_of<C: Component>(
    component: &C,
    manifests_dir: &std::path::Path,
) -> Result<rbac::Rules, BundleError> {
    rbac::component_rules(
        manifests_dir,
        C::Resource::COMPONENT,
        (
            kubeflow_api::COMPONENTS_GROUP,
            &<C::Resource as Resource>::plural(&()),
        ),
        &super::permissions_of(component),
    )
}

/// Every image the component runs at `version`, with where it is (rendered
/// for plain Kubernetes with the version's defaults).
pub fn images_of<C: Component>(
    component: &C,
    manifests_dir: &std::path::Path,
    version: &str,
) -> Result<Vec<crate::render::images::Found>, Refusal> {
    Ok(crate::render::images::find(&rendered_at(
        component,
        manifests_dir,
        version,
    )?))
}

/// The component's objects at `version`, rendered for plain Kubernetes in
/// namespace `kubeflow` with the version's defaults.
pub fn rendered_at<C: Component>(
    component: &C,
    manifests_dir: &std::path::Path,
    version: &str,
) -> Result<Vec<DynamicObject>, Refusal> {
    rendered_in(component, manifests_dir, version, "kubeflow")
}

/// The component's objects at `version` for a CR named `kubeflow` in
/// `namespace`, rendered for plain Kubernetes with the version's defaults.
pub fn rendered_in<C: Component>(
    component: &C,
    manifests_dir: &std::path::Path,
    version: &str,
    namespace: &str,
) -> Result<Vec<DynamicObject>, Refusal> {
    rendered_with(
        component,
        manifests_dir,
        version,
        namespace,
        &C::Inputs::default(),
    )
}

/// [`rendered_in`] with the inputs `dereference` would have read.
fn rendered_with<C: Component>(
    component: &C,
    manifests_dir: &std::path::Path,
    version: &str,
    namespace: &str,
    inputs: &C::Inputs,
) -> Result<Vec<DynamicObject>, Refusal> {
    let cr: C::Resource = serde_json::from_value(serde_json::json!({
        "apiVersion": C::Resource::api_version(&()),
        "kind": C::Resource::kind(&()),
        "metadata": {"name": "kubeflow", "namespace": namespace},
        "spec": {"version": version},
    }))
    .map_err(|e| Refusal::new(Reason::InvalidSpec, e.to_string()))?;
    let bundles = BundleCache::default();
    let ctx = RenderContext::of(&cr, manifests_dir, &bundles, Platform::Kubernetes);
    Ok(component.render(&cr, &ctx, inputs)?.objects)
}
