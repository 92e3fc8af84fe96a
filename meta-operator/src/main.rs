//! kubeflow-meta-operator: turns `Kubeflow` custom resources into component custom resources.

mod children;
mod component_kind;
mod permissions;
mod plan;
mod reconcile;
mod release;
mod status;
mod summary;

use clap::Parser;

/// Turns one Kubeflow custom resource into the six component custom resources.
#[derive(Parser)]
#[command(version)]
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
    let cli = Cli::parse();
    match cli.command {
        Some(kubeflow_operator::component::Command::Rbac) => {
            print!("{}", permissions::rules().to_yaml()?);
            Ok(())
        }
        Some(kubeflow_operator::component::Command::Plan { from, to }) => {
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
