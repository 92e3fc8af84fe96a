//! Every CR in `examples/`, and the one the chart's install notes print for
//! pasting, is accepted by the real API server as written: server-side dry
//! run with strict field validation, so a wrong enum value or a misspelled
//! field fails here rather than for a user.

use kubeflow_e2e::component::prepare;
use kubeflow_e2e::{TestNamespace, repo_root, run_tool};

#[tokio::test]
async fn every_example_passes_the_crd_schemas() {
    let (client, _g) = prepare(&[], &[]).await;
    let ns = TestNamespace::new(&client, "examples").await;
    let mut files: Vec<_> = std::fs::read_dir(repo_root().join("examples"))
        .expect("examples/")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    files.sort();
    assert!(files.len() >= 6, "one example per kind: {files:?}");
    // The notes `helm install` prints hold a CR between `<<'YAML'` and `YAML`.
    let chart = kubeflow_e2e::chart::dir();
    let out = run_tool(
        "helm",
        &[
            "install",
            "kf",
            &chart,
            "-n",
            "kubeflow-system",
            "--dry-run=client",
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
    let pasted = std::env::temp_dir().join(format!("kf-notes-{}.yaml", std::process::id()));
    std::fs::write(
        &pasted,
        cr.replace(
            "namespace: kubeflow\n",
            &format!("namespace: {}\n", ns.name),
        ),
    )
    .expect("write the notes' CR");
    files.push(pasted.clone());
    for f in files {
        let out = run_tool(
            "kubectl",
            &[
                "apply",
                "--dry-run=server",
                "--validate=strict",
                "-n",
                &ns.name,
                "-f",
                &f.display().to_string(),
            ],
        );
        assert!(
            out.status.success(),
            "{} is refused: {}",
            f.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_file(&pasted);
    ns.delete().await;
}
