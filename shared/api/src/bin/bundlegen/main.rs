//! Writes the OLM bundle (`bundle/manifests`, `bundle/metadata`) from what
//! already exists: the CRDs (from the Rust types), the chart's render (the
//! operator Deployments, their ServiceAccounts and the RBAC the chart grants
//! them), `bundle/base.yaml` (names, descriptions, descriptors), the examples
//! and the image list. With `--check`, fails when any file differs from what
//! would be written. Run by `bundle/generate`, which renders the chart and
//! lists the images first.

mod csv;
mod render;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;

/// What `bundle/generate` passes.
struct Args {
    check: bool,
    render: PathBuf,
    images: PathBuf,
    base: PathBuf,
    examples: Vec<PathBuf>,
    out: PathBuf,
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            eprintln!(
                "usage: bundlegen [--check] --render FILE --images FILE --base FILE --out DIR EXAMPLE..."
            );
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(stale) if stale.is_empty() => ExitCode::SUCCESS,
        Ok(stale) => {
            eprintln!(
                "stale OLM bundle files (run bundle/generate): {}",
                stale.join(", ")
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("bundlegen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut check, mut render, mut images, mut base, mut out) = (false, None, None, None, None);
    let mut examples = Vec::new();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .map(PathBuf::from)
                .ok_or(format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--check" => check = true,
            "--render" => render = Some(value("--render")?),
            "--images" => images = Some(value("--images")?),
            "--base" => base = Some(value("--base")?),
            "--out" => out = Some(value("--out")?),
            other if other.starts_with("--") => return Err(format!("unknown flag {other}")),
            other => examples.push(PathBuf::from(other)),
        }
    }
    Ok(Args {
        check,
        render: render.ok_or("--render is required")?,
        images: images.ok_or("--images is required")?,
        base: base.ok_or("--base is required")?,
        examples,
        out: out.ok_or("--out is required")?,
    })
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Every document of a multi-document YAML file, empty ones left out.
fn documents(text: &str, path: &Path) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut flush = |doc: &mut String| -> Result<(), String> {
        if doc
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        {
            let v: Value = serde_saphyr::from_str(doc)
                .map_err(|e| format!("{}: not YAML: {e}", path.display()))?;
            if !v.is_null() {
                out.push(v);
            }
        }
        doc.clear();
        Ok(())
    };
    for line in text.lines() {
        if line.trim_end() == "---" {
            flush(&mut current)?;
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    flush(&mut current)?;
    Ok(out)
}

fn run(args: &Args) -> Result<Vec<String>, String> {
    let base: csv::Base = serde_saphyr::from_str(&read(&args.base)?)
        .map_err(|e| format!("{}: {e}", args.base.display()))?;
    let chart = render::Chart::read(&documents(&read(&args.render)?, &args.render)?)?;
    let images: Vec<String> = read(&args.images)?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    let mut examples = Vec::new();
    for path in &args.examples {
        examples.extend(documents(&read(path)?, path)?);
    }
    let icon = read(&args.base.with_file_name("icon.svg"))?;
    let crds: Vec<(String, Value)> = kubeflow_api::crds::all()
        .into_iter()
        .map(|(file, crd)| serde_json::to_value(crd).map(|v| (file.to_string(), v)))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let version = env!("CARGO_PKG_VERSION");

    let csv = csv::build(&csv::Inputs {
        base: &base,
        version,
        chart: &chart,
        crds: &crds,
        examples: &examples,
        images: &images,
        icon_svg: &icon,
    })?;

    let files = files(args, &base, &chart, &crds, &csv)?;
    let manifests = args.out.join("manifests");
    if args.check {
        stale(&files, &manifests)
    } else {
        write(&files, &manifests)?;
        Ok(Vec::new())
    }
}

/// Every file the bundle is made of, by path. manifests/: the CSV, the
/// CRDs, and the chart's other objects OLM can install; metadata/: the
/// bundle's annotations.
fn files(
    args: &Args,
    base: &csv::Base,
    chart: &render::Chart,
    crds: &[(String, Value)],
    csv: &Value,
) -> Result<BTreeMap<PathBuf, String>, String> {
    let mut files: BTreeMap<PathBuf, String> = BTreeMap::new();
    let header = "# Generated by bundle/generate; do not edit.\n";
    let yaml = |v: &Value| {
        serde_saphyr::to_string(v)
            .map(|s| format!("{header}{s}"))
            .map_err(|e| e.to_string())
    };
    let manifests = args.out.join("manifests");
    files.insert(
        manifests.join(format!("{}.clusterserviceversion.yaml", base.package)),
        yaml(csv)?,
    );
    for (file, crd) in crds {
        files.insert(manifests.join(file), yaml(crd)?);
    }
    for object in chart.extra_objects() {
        files.insert(manifests.join(render::file_name(&object)), yaml(&object)?);
    }
    let annotations = csv::annotations(base);
    files.insert(
        args.out.join("metadata/annotations.yaml"),
        yaml(&annotations)?,
    );
    files.insert(args.out.join("Dockerfile"), csv::dockerfile(&annotations));
    // What OLM cannot install: the admission policies that hold each
    // operator to the cluster-scoped names its bundles hold. docs/install.md
    // says to apply them after the operator.
    let policies: Vec<String> = chart
        .admission_policies()
        .iter()
        .map(yaml)
        .collect::<Result<_, _>>()?;
    files.insert(
        args.out.join("admission-policies.yaml"),
        policies.join("---\n"),
    );

    Ok(files)
}

/// The files that differ from what is generated, and those no longer
/// generated.
fn stale(files: &BTreeMap<PathBuf, String>, manifests: &Path) -> Result<Vec<String>, String> {
    let mut stale = Vec::new();
    for (path, text) in files {
        if std::fs::read_to_string(path).ok().as_deref() != Some(text.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    for existing in list(manifests)? {
        if !files.contains_key(&existing) {
            stale.push(format!("{} (no longer generated)", existing.display()));
        }
    }
    Ok(stale)
}

/// Writes the generated files, the manifests folder anew (a file no longer
/// generated goes).
fn write(files: &BTreeMap<PathBuf, String>, manifests: &Path) -> Result<(), String> {
    if manifests.exists() {
        std::fs::remove_dir_all(manifests).map_err(|e| e.to_string())?;
    }
    for (path, text) in files {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        }
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

fn list(dir: &Path) -> Result<Vec<PathBuf>, String> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(entries.filter_map(|e| e.ok().map(|e| e.path())).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("cannot list {}: {e}", dir.display())),
    }
}
