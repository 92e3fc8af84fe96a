//! The operator binary's command line: run, or print the RBAC it needs.

use super::*;

/// Command line of a component operator.
#[derive(clap::Parser, Debug)]
#[command(version, about = "A Kubeflow component operator")]
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
    },
}

/// The whole `main` of a component operator: parse flags, run until SIGTERM.
pub async fn main<C: Component>(component: C) -> anyhow::Result<()> {
    let cli = <Cli as clap::Parser>::parse();
    match cli.command {
        Some(Command::Rbac) => {
            let rules = rules_of(&component, &cli.args.manifests_dir)?;
            print!("{}", rules.to_yaml()?);
            Ok(())
        }
        Some(Command::Images { version, detailed }) => {
            let found = images_of(&component, &cli.args.manifests_dir, &version)
                .map_err(|r| anyhow::anyhow!("{}: {}", r.reason, r.message))?;
            print!("{}", crate::images::listing(&found, detailed));
            Ok(())
        }
        Some(Command::Plan { from, to }) => {
            let render = |v: &str| {
                rendered_at(&component, &cli.args.manifests_dir, v)
                    .map_err(|r| anyhow::anyhow!("{}: {}", r.reason, r.message))
            };
            let plan = crate::upgrade_plan::Plan::compute(&render(&from)?, &render(&to)?);
            print!("{} {from} -> {to}: {plan}", C::Resource::COMPONENT);
            Ok(())
        }
        None => {
            let deadline = std::time::Duration::from_secs(cli.args.run.shutdown_deadline);
            crate::runner::until_deadline(run(component, cli.args), deadline).await
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
        &component.permissions(),
    )
}

/// Every image the component runs at `version`, with where it is (rendered
/// for plain Kubernetes with the version's defaults).
pub fn images_of<C: Component>(
    component: &C,
    manifests_dir: &std::path::Path,
    version: &str,
) -> Result<Vec<crate::images::Found>, Refusal> {
    Ok(crate::images::find(&rendered_at(
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
    let cr: C::Resource = serde_json::from_value(serde_json::json!({
        "apiVersion": C::Resource::api_version(&()),
        "kind": C::Resource::kind(&()),
        "metadata": {"name": "kubeflow", "namespace": "kubeflow"},
        "spec": {"version": version},
    }))
    .map_err(|e| Refusal::new(reason::INVALID_SPEC, e.to_string()))?;
    let bundles = BundleCache::default();
    let ctx = RenderContext {
        manifests_dir,
        bundles: &bundles,
        namespace: "kubeflow",
        platform: Platform::Kubernetes,
    };
    Ok(component.render(&cr, &ctx, &C::Inputs::default())?.objects)
}
