//! Every CR under `examples/` (subfolders included), and the one the chart's
//! install notes print for pasting, is accepted by the real API server as
//! written: server-side dry run with strict field validation, so a wrong enum
//! value or a misspelled field fails here rather than for a user. Every chart
//! values file there (`values.yaml`) renders with the chart, whose schema
//! refuses unknown keys and bad values.

use std::path::{Path, PathBuf};

use kubeflow_e2e::component::{ALL_KINDS, prepare};
use kubeflow_e2e::{TestNamespace, repo_root, run_tool};

/// Every file under `dir`, subfolders included, in a stable order.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    let mut out = Vec::new();
    for path in entries {
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test]
async fn every_example_passes_the_crd_schemas() {
    let (client, _g) = prepare(&[], &[]).await;
    let ns = TestNamespace::new(&client, "examples").await;
    let (values, files): (Vec<PathBuf>, Vec<PathBuf>) = files_under(&repo_root().join("examples"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .partition(|p| p.file_name().is_some_and(|n| n == "values.yaml"));
    let texts: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|f| {
            let text =
                std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            (f, text)
        })
        .collect();
    // Every kind of the component registry, and Kubeflow's.
    for &kind in ALL_KINDS.iter() {
        let line = format!("kind: {kind}");
        assert!(
            texts.iter().any(|(_, t)| t.lines().any(|l| l == line)),
            "no example of {kind} under examples/"
        );
    }
    // The chart values files render with the chart.
    let chart = kubeflow_e2e::chart::dir();
    for v in &values {
        let file = v.display().to_string();
        let out = run_tool(
            "helm",
            &[
                "template",
                "kf",
                &chart,
                "-n",
                "kubeflow-system",
                "-f",
                &file,
            ],
        );
        assert!(
            out.status.success(),
            "{file} is refused by the chart: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The notes `helm install` prints hold a CR between `<<'YAML'` and `YAML`.
    let out = run_tool(
        "helm",
        &[
            "install",
            "kf",
            &chart,
            "-n",
            "kubeflow-system",
            "--dry-run=client",
            // The namespaces an earlier demo's release kept would clash
            // with this release's; the notes do not depend on them.
            "--set",
            "createNamespaces=false",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    let notes = printed.split("NOTES:").nth(1).expect("install notes");
    let cr: String = notes
        .lines()
        .skip_while(|l| !l.ends_with("<<'YAML'"))
        .skip(1)
        .take_while(|l| *l != "YAML")
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        cr.contains("kind: Kubeflow"),
        "notes without a CR:\n{notes}"
    );
    let mut checked: Vec<(String, String)> = texts
        .iter()
        .map(|(f, t)| (f.display().to_string(), t.clone()))
        .collect();
    checked.push(("the install notes' CR".to_string(), cr));
    // Examples state the namespace they are for (`kubeflow`); they are tried
    // in the test's namespace instead.
    let ours = format!("namespace: {}\n", ns.name);
    for (i, (what, text)) in checked.iter().enumerate() {
        let file = std::env::temp_dir().join(format!("kf-example-{}-{i}.yaml", std::process::id()));
        std::fs::write(&file, text.replace("namespace: kubeflow\n", &ours))
            .expect("write the example");
        let out = run_tool(
            "kubectl",
            &[
                "apply",
                "--dry-run=server",
                "--validate=strict",
                "-n",
                &ns.name,
                "-f",
                &file.display().to_string(),
            ],
        );
        let _ = std::fs::remove_file(&file);
        assert!(
            out.status.success(),
            "{what} is refused: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    ns.delete().await;
}
