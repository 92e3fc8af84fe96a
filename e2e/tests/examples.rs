//! Every CR in `examples/` is accepted by the real API server as written:
//! server-side dry run with strict field validation, so a wrong enum value or
//! a misspelled field fails here rather than for a user.

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
    ns.delete().await;
}
