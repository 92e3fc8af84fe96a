//! kubeflow-meta-operator: turns `Kubeflow` custom resources into component custom resources.

mod children;
mod reconcile;
mod release;
mod summary;

use clap::Parser;

/// Turns one Kubeflow custom resource into the five component custom resources.
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(flatten)]
    run: kubeflow_operator::runner::RunArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    reconcile::run(Cli::parse().run).await
}
