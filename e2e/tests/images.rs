//! The images images/build makes hold exactly what images/Dockerfile's final
//! stage declares: its user, entrypoint and environment, the binary, and the
//! component's bundles as images/bundles.lock lists them. So the two recipes
//! cannot drift apart.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use kubeflow_e2e::demo::COMPONENTS;
use serde_json::Value;

/// The final stage's USER, ENTRYPOINT and ENV lines.
fn final_stage() -> (String, Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(kubeflow_e2e::repo_root().join("images/Dockerfile"))
        .expect("images/Dockerfile");
    let last = text.rsplit("\nFROM ").next().expect("a final stage");
    let mut user = String::new();
    let mut entrypoint = Vec::new();
    let mut env = Vec::new();
    for line in last.lines() {
        if let Some(u) = line.strip_prefix("USER ") {
            user = u.trim().to_string();
        } else if let Some(e) = line.strip_prefix("ENTRYPOINT ") {
            entrypoint = serde_json::from_str(e.trim()).expect("ENTRYPOINT in exec form");
        } else if let Some(e) = line.strip_prefix("ENV ") {
            env.push(e.trim().to_string());
        }
    }
    (user, entrypoint, env)
}

/// The files the lock lists for a component, as paths inside the image.
fn locked_bundles(component: &str) -> BTreeSet<String> {
    let lock = std::fs::read_to_string(kubeflow_e2e::repo_root().join("images/bundles.lock"))
        .expect("images/bundles.lock");
    lock.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split('\t').next())
        .filter(|p| {
            kubeflow_e2e::component::bundle_folders_of(component)
                .iter()
                .any(|f| p.starts_with(&format!("{f}/")))
        })
        .map(|p| format!("manifests/{p}"))
        .collect()
}

fn blob(dir: &Path, digest: &str) -> std::path::PathBuf {
    dir.join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("blob")).expect("JSON blob")
}

#[test]
fn images_hold_what_the_dockerfile_declares() {
    let images = kubeflow_e2e::operator::target_dir().join("images");
    if !images.exists() {
        // e2e/test builds them wherever the real node can run (as root).
        assert!(
            kubeflow_e2e::cluster_cmd(&["node-enabled"]).is_err(),
            "no images in {}: run images/build",
            images.display()
        );
        kubeflow_e2e::left_out("no operator images built here (not root)");
        return;
    }
    let (user, entrypoint, env) = final_stage();
    assert_eq!(entrypoint, vec!["/operator".to_string()]);
    for &c in COMPONENTS.iter() {
        let archive = images.join(format!("kubeflow-{c}-operator.oci.tar"));
        let dir = kubeflow_e2e::operator::target_dir()
            .join("e2e-images")
            .join(format!("{c}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("unpack folder");
        let ok = Command::new("tar")
            .arg("-xf")
            .arg(&archive)
            .arg("-C")
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cannot unpack {}", archive.display());
        let index = json(&dir.as_path().join("index.json"));
        let manifest = json(&blob(
            dir.as_path(),
            index["manifests"][0]["digest"]
                .as_str()
                .expect("a manifest"),
        ));
        let config = json(&blob(
            dir.as_path(),
            manifest["config"]["digest"].as_str().expect("a config"),
        ));
        assert_eq!(config["config"]["User"], Value::from(user.clone()), "{c}");
        assert_eq!(
            config["config"]["Entrypoint"],
            serde_json::json!(entrypoint),
            "{c}"
        );
        for e in &env {
            let e = e.replacen(' ', "=", 1);
            assert!(
                config["config"]["Env"]
                    .as_array()
                    .is_some_and(|list| list.iter().any(|v| v == &Value::from(e.clone()))),
                "{c}: {e} missing from {}",
                config["config"]["Env"]
            );
        }
        assert_eq!(config["os"], "linux");
        assert_eq!(config["architecture"], "amd64");

        // Every regular file of every layer: the binary and the bundles.
        let mut files = BTreeSet::new();
        for layer in manifest["layers"].as_array().expect("layers") {
            let out = Command::new("tar")
                .arg("-tvzf")
                .arg(blob(
                    dir.as_path(),
                    layer["digest"].as_str().expect("digest"),
                ))
                .output()
                .expect("tar");
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if line.starts_with('-') {
                    let path = line.rsplit(' ').next().unwrap_or_default();
                    files.insert(path.trim_start_matches("./").to_string());
                }
            }
        }
        let mut expected = if c == "meta" {
            BTreeSet::new()
        } else {
            locked_bundles(c)
        };
        expected.insert("operator".to_string());
        assert_eq!(files, expected, "{c}: the image's files");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The Dockerfile and images/build make the same binary by default (a
/// static release build for the same target); the profile e2e/test uses
/// instead differs from release in how it is optimised only.
#[test]
fn the_release_build_and_the_dockerfile_agree() {
    let read = |p: &str| {
        std::fs::read_to_string(kubeflow_e2e::repo_root().join(p))
            .unwrap_or_else(|e| panic!("{p}: {e}"))
    };
    let dockerfile = read("images/Dockerfile");
    // amd64 images (what images/build makes) build for the same musl target.
    assert!(
        dockerfile.contains("amd64) echo x86_64-unknown-linux-musl ;;")
            && dockerfile.contains(
                "cargo build --release --locked --target \"$TRIPLE\" -p kubeflow-${COMPONENT}-operator"
            ),
        "the Dockerfile's build stage changed: make images/build agree"
    );
    let build = read("images/build");
    assert!(build.contains("TRIPLE=x86_64-unknown-linux-musl"));
    assert!(build.contains("PROFILE=${KUBEFLOW_IMAGES_PROFILE:-release}"));
    assert!(build.contains("cargo build --profile \"$PROFILE\" --locked --target \"$TRIPLE\""));
    let cargo = read("Cargo.toml");
    let profile = cargo
        .split("[profile.test-images]")
        .nth(1)
        .expect("a test-images profile")
        .split("\n[")
        .next()
        .unwrap_or_default();
    let keys: Vec<&str> = profile
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split('=').next().map(str::trim))
        .collect();
    assert_eq!(
        keys,
        [
            "inherits",
            "lto",
            "codegen-units",
            "incremental",
            "opt-level"
        ],
        "the test profile may change how release is optimised, nothing else"
    );
    assert!(profile.contains("inherits = \"release\""));
}
