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
        None => run(component, cli.args).await,
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
