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
    let rendered = component.render(&cr, &ctx, &C::Inputs::default())?;
    Ok(crate::images::find(&rendered.objects))
}
