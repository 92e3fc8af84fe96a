//! Writes the component registry for scripts to `shared/api/components.tsv`
//! (or with `--check` fails when that file differs), or prints it as JSON
//! with `--json`.

use std::process::ExitCode;

const FILE: &str = "shared/api/components.tsv";

fn main() -> ExitCode {
    let arg = std::env::args().nth(1);
    match arg.as_deref() {
        Some("--json") => {
            println!("{:#}", kubeflow_api::registry::to_json());
            ExitCode::SUCCESS
        }
        Some("--check") => {
            if std::fs::read_to_string(FILE).ok() == Some(kubeflow_api::registry::to_tsv()) {
                ExitCode::SUCCESS
            } else {
                eprintln!("{FILE} is stale: run charts/generate");
                ExitCode::FAILURE
            }
        }
        None => match std::fs::write(FILE, kubeflow_api::registry::to_tsv()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("failed to write {FILE}: {e}");
                ExitCode::FAILURE
            }
        },
        Some(_) => {
            eprintln!("usage: registry [--check | --json]");
            ExitCode::from(2)
        }
    }
}
