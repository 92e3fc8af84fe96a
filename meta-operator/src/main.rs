//! kubeflow-meta-operator: turns `Kubeflow` custom resources into component custom resources.

mod approval;
mod children;
mod component_kind;
mod needed;
mod permissions;
mod plan;
mod reconcile;
mod release;
#[cfg(test)]
mod removal_properties;
mod reported;
mod status;
mod summary;

use clap::{CommandFactory, FromArgMatches};

/// Turns `Kubeflow` custom resources into one custom resource per component
/// (`kubectl api-resources --categories kubeflow-all` lists their kinds),
/// which the component operators install.
#[derive(clap::Parser)]
#[command(version, after_help = kubeflow_operator::component::ENVIRONMENT_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Option<kubeflow_operator::component::Command>,
    /// Folder of bundles (for `images` and `plan`): `<dir>/<component>/<version>/*.yaml`.
    #[arg(
        long,
        env = "MANIFESTS_DIR",
        default_value = "/manifests",
        global = true
    )]
    manifests_dir: std::path::PathBuf,
    #[command(flatten)]
    run: kubeflow_operator::runner::RunArgs,
}

/// mimalloc: it gives freed memory back to the system, so the resident size
/// falls back after an install or upgrade (see `kubeflow_operator::Allocator`).
#[global_allocator]
static ALLOCATOR: kubeflow_operator::Allocator = kubeflow_operator::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // The shared subcommands take a component version; here, a release.
    let command = Cli::command()
        .mut_subcommand("images", |images| {
            images.mut_arg("version", |v| {
                v.help("The Kubeflow release (a row of the release table, e.g. 26.03.1), or `all`: every release's images")
            })
        })
        .mut_subcommand("plan", |plan| {
            plan.mut_arg("from", |v| v.help("The Kubeflow release installed"))
                .mut_arg("to", |v| v.help("The Kubeflow release to move to"))
                .mut_arg("namespace", |v| v.hide(true))
        });
    let cli = Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit());
    match cli.command {
        Some(kubeflow_operator::component::Command::Rbac) => {
            print!("{}", permissions::rules().to_yaml()?);
            Ok(())
        }
        Some(kubeflow_operator::component::Command::Plan { from, to, .. }) => {
            print!("{}", release::plan(&cli.manifests_dir, &from, &to)?);
            Ok(())
        }
        Some(kubeflow_operator::component::Command::Images { version, detailed }) => {
            let found = release::images(&cli.manifests_dir, &version)?;
            print!("{}", kubeflow_operator::images::listing(&found, detailed));
            Ok(())
        }
        None => {
            let deadline = std::time::Duration::from_secs(cli.run.shutdown_deadline);
            kubeflow_operator::runner::until_deadline(reconcile::run(cli.run), deadline).await
        }
    }
}
