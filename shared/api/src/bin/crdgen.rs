//! Writes the project's CRDs into `crds/` and the chart's `crds/` folder (or
//! one `--dir`), or with `--check` fails when a folder differs from what the
//! types generate.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut check = false;
    let mut dirs = vec![PathBuf::from("crds"), PathBuf::from("charts/kubeflow/crds")];
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--check" => check = true,
            "--dir" => match args.next() {
                Some(d) => dirs = vec![PathBuf::from(d)],
                None => return usage(),
            },
            _ => return usage(),
        }
    }
    let mut stale = Vec::new();
    for (file, crd) in kubeflow_api::crds::all() {
        let yaml = match kubeflow_api::crds::to_yaml(&crd) {
            Ok(y) => y,
            Err(e) => {
                eprintln!("failed to serialize {file}: {e}");
                return ExitCode::FAILURE;
            }
        };
        for dir in &dirs {
            let path = dir.join(file);
            if check {
                if std::fs::read_to_string(&path).ok().as_deref() != Some(yaml.as_str()) {
                    stale.push(path.display().to_string());
                }
            } else if let Err(e) =
                std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, &yaml))
            {
                eprintln!("failed to write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
    }
    if !stale.is_empty() {
        eprintln!(
            "stale CRDs (run `cargo run -p kubeflow-api --bin crdgen`): {}",
            stale.join(", ")
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn usage() -> ExitCode {
    eprintln!("usage: crdgen [--check] [--dir DIR]");
    ExitCode::from(2)
}
