//! The library's layers, enforced. Each layer is a folder of `src/`, and a
//! module may use its own layer and the ones below it, never one above.
//! From the bottom:
//!
//! 1. **base**: kinds, labels, conditions, refusals, quantities, bundles,
//!    namespaces allowed, the platform;
//! 2. **render**: what the objects are (transforms, validation, images,
//!    overrides, certificates, OpenShift, Pod Security levels, RBAC
//!    derivation, upgrade plans);
//! 3. **engine**: what is on the cluster (apply, prune, the live index,
//!    inventory, discovery, cleanup, health, watches);
//! 4. **report**: status, Events, telemetry;
//! 5. **framework**: the controller skeleton, the component framework, the
//!    process runner.
//!
//! A test reads the sources. A module's layer is its folder; a path into
//! the crate (`crate::`, or `super::` far enough to reach the root), grouped
//! or not, whose first segment is a layer above the module's fails it, and
//! so does a path that names a module without its layer (`crate::kinds`
//! through the root's re-export would hide which layer it is in). Tests
//! inside a module are left out: they may use anything. A second test reads
//! the component operators: they reach the engine only through the
//! framework, so none names `engine`.
//!
//! Why folders of one crate and not a crate per layer (as linkerd2's
//! policy controller does): the framework uses engine items that are not
//! the library's public surface (`pub(crate)`: the watches' quiet filter,
//! the prune's release, the apply's early report), which separate crates
//! would have to publish to every operator; tests of a lower layer use the
//! framework's test helpers (the real bundles through `component::testing`),
//! which would take dev-dependencies pointing up; and every operator depends
//! on all five layers anyway, so splitting would buy no parallel build on
//! this 2-core machine, only five more crates to link. The compiler would
//! enforce the direction; here the test does, in well under a second.

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// The layers, from the bottom: each may use the ones before it.
    const LAYERS: [&str; 5] = ["base", "render", "engine", "report", "framework"];

    /// Files at the root of `src/` that belong to no layer: the crate's
    /// index and this check.
    const ROOT_FILES: [&str; 2] = ["lib.rs", "layers.rs"];

    fn layer(name: &str) -> Option<usize> {
        LAYERS.iter().position(|l| *l == name)
    }

    /// The text before the module's own tests.
    fn outside_tests(text: &str) -> &str {
        text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text)
    }

    fn is_ident(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '_'
    }

    /// The first segment of each path a use tree starts with: `a::b` gives
    /// `a`, `{a::{b, c}, d}` gives `a` and `d` (`self` is left out).
    fn first_segments(tree: &str) -> Vec<String> {
        let tree = tree.trim_start();
        let Some(group) = tree.strip_prefix('{') else {
            let segment: String = tree.chars().take_while(|c| is_ident(*c)).collect();
            return if segment.is_empty() || segment == "self" {
                Vec::new()
            } else {
                vec![segment]
            };
        };
        // The group's items, split at its own commas only.
        let mut items = Vec::new();
        let (mut depth, mut start) = (0usize, 0usize);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    items.push(&group[start..i]);
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&group[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items.into_iter().flat_map(first_segments).collect()
    }

    /// What follows each path prefix (`crate::`, `super::`,
    /// `kubeflow_operator::`) in `code`, where the prefix starts a path.
    fn paths<'a>(code: &'a str, prefix: &str) -> Vec<&'a str> {
        let mut out = Vec::new();
        let mut from = 0;
        while let Some(i) = code[from..].find(prefix) {
            let at = from + i;
            from = at + prefix.len();
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| is_ident(c) || c == '$' || c == ':') {
                continue;
            }
            out.push(&code[from..]);
        }
        out
    }

    /// The crate-root paths of a file at `file` (relative to `src/`): by
    /// `crate::`, or by as many `super::` as take it to the root.
    fn root_paths(file: &Path, code: &str) -> Vec<String> {
        let depth = module_path(file).len();
        let mut out: Vec<String> = paths(code, "crate::")
            .into_iter()
            .flat_map(first_segments)
            .collect();
        for rest in paths(code, "super::") {
            let mut rest = rest;
            let mut up = 1;
            while let Some(r) = rest.strip_prefix("super::") {
                rest = r;
                up += 1;
            }
            if up >= depth {
                out.extend(first_segments(rest));
            }
        }
        out
    }

    /// `engine/apply/plan.rs` is `engine::apply::plan`; a `mod.rs` is its
    /// folder's module.
    fn module_path(file: &Path) -> Vec<String> {
        let mut path: Vec<String> = file
            .components()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string()
            })
            .collect();
        if path.last().is_some_and(|l| l == "mod") {
            path.pop();
        }
        path
    }

    /// What is wrong with the paths of the file at `file` (relative to
    /// `src/`), given the modules each layer holds.
    fn violations(file: &Path, text: &str, modules: &[(String, usize)]) -> Vec<String> {
        let module = module_path(file);
        let Some(own) = module.first().and_then(|m| layer(m)) else {
            return vec![format!("{}: in no layer's folder", file.display())];
        };
        let mut wrong = Vec::new();
        for used in root_paths(file, outside_tests(text)) {
            if let Some(theirs) = layer(&used) {
                if theirs > own {
                    wrong.push(format!(
                        "{} ({}) uses crate::{used}, a layer above it",
                        file.display(),
                        LAYERS[own]
                    ));
                }
            } else if let Some((_, theirs)) = modules.iter().find(|(m, _)| *m == used) {
                wrong.push(format!(
                    "{} names crate::{used} without its layer: crate::{}::{used}",
                    file.display(),
                    LAYERS[*theirs]
                ));
            }
        }
        wrong
    }

    fn files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("source folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// Each layer's modules (its files and folders), by name.
    fn modules_of_layers(src: &Path) -> Vec<(String, usize)> {
        let mut out = Vec::new();
        for (i, l) in LAYERS.iter().enumerate() {
            for entry in std::fs::read_dir(src.join(l)).expect("layer folder") {
                let name = entry.expect("entry").file_name();
                let name = name.to_string_lossy().trim_end_matches(".rs").to_string();
                if name != "mod" {
                    out.push((name, i));
                }
            }
        }
        out
    }

    #[test]
    fn no_module_reaches_into_a_layer_above_it() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let modules = modules_of_layers(&src);
        let mut all = Vec::new();
        files(&src, &mut all);
        let mut wrong = Vec::new();
        let mut checked = 0;
        for file in &all {
            let relative = file.strip_prefix(&src).expect("under src");
            if ROOT_FILES.iter().any(|r| Path::new(r) == relative) {
                continue;
            }
            let text = std::fs::read_to_string(file).expect("source");
            checked += root_paths(relative, outside_tests(&text)).len();
            wrong.extend(violations(relative, &text, &modules));
        }
        assert!(
            checked > 100,
            "only {checked} paths read: the reader is broken"
        );
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn every_folder_of_src_is_a_layer() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        for entry in std::fs::read_dir(&src).expect("source folder") {
            let path = entry.expect("entry").path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            if path.is_dir() {
                assert!(
                    layer(&name).is_some(),
                    "src/{name} is no layer: add it to LAYERS in its place"
                );
            } else {
                assert!(
                    ROOT_FILES.contains(&name.as_str()),
                    "src/{name} is in no layer's folder"
                );
            }
        }
    }

    /// The first segments of the library's paths an operator's source
    /// names (`kubeflow_operator::...`), grouped or not, tests included.
    fn library_paths(text: &str) -> Vec<String> {
        paths(text, "kubeflow_operator::")
            .into_iter()
            .flat_map(first_segments)
            .collect()
    }

    #[test]
    fn no_operator_names_the_engine() {
        let operators = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../operators");
        let mut all = Vec::new();
        for entry in std::fs::read_dir(&operators).expect("operators folder") {
            let src = entry.expect("entry").path().join("src");
            if src.is_dir() {
                files(&src, &mut all);
            }
        }
        let mut wrong = Vec::new();
        let mut checked = 0;
        for file in &all {
            let text = std::fs::read_to_string(file).expect("source");
            for used in library_paths(&text) {
                checked += 1;
                if used == "engine" {
                    wrong.push(format!(
                        "{}: names kubeflow_operator::engine (the framework drives the engine)",
                        file.display()
                    ));
                }
            }
        }
        assert!(
            checked > 100,
            "only {checked} paths read in {} files: the reader is broken",
            all.len()
        );
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// The check itself, on sources held in memory.
    #[test]
    fn grouped_and_nested_upward_imports_are_reported() {
        let modules = vec![
            ("kinds".to_string(), 0),
            ("openshift".to_string(), 1),
            ("apply".to_string(), 2),
        ];
        let render = Path::new("render/common.rs");

        let grouped = "use crate::{base::kinds, engine::apply::Engine};\n";
        let wrong = violations(render, grouped, &modules);
        assert_eq!(wrong.len(), 1, "{wrong:?}");
        assert!(wrong[0].contains("crate::engine"), "{wrong:?}");

        let nested = "use crate::{\n    base::{kinds, labels},\n    render::{openshift, transform},\n    framework::{component::{Component, Context}, runner},\n};\n";
        let wrong = violations(render, nested, &modules);
        assert_eq!(wrong.len(), 1, "{wrong:?}");
        assert!(wrong[0].contains("crate::framework"), "{wrong:?}");

        // Through the root's re-export the layer is hidden: reported too.
        let flat = "use crate::{openshift, transform, validate};\n";
        let wrong = violations(Path::new("base/kinds.rs"), flat, &modules);
        assert_eq!(wrong.len(), 1, "{wrong:?}");
        assert!(wrong[0].contains("crate::render::openshift"), "{wrong:?}");

        // Up to the root by `super::`, from two folders down.
        let relative = "use super::super::super::report::status;\nuse super::plan;\n";
        let wrong = violations(Path::new("engine/apply/diff.rs"), relative, &modules);
        assert_eq!(wrong.len(), 1, "{wrong:?}");
        assert!(wrong[0].contains("crate::report"), "{wrong:?}");

        // An operator's import of the engine, however grouped.
        let operator = "use kubeflow_operator::{\n    component::{Component, Rendered},\n    engine::{cleanup::delete_if_present},\n};\nuse kubeflow_operator::transform;\n";
        assert_eq!(
            library_paths(operator),
            ["component", "engine", "transform"]
        );

        // Downward and sideways are fine; the module's own tests may use anything.
        let fine = "use crate::base::kinds;\nuse crate::{render::{transform, validate}, base::labels};\nfn f() { crate::engine::apply::describe(o) }\n#[cfg(test)]\nmod tests { use crate::framework::component::testing; }\n";
        assert_eq!(
            violations(Path::new("engine/apply/mod.rs"), fine, &modules),
            Vec::<String>::new()
        );
        assert_eq!(
            root_paths(Path::new("engine/apply/mod.rs"), outside_tests(fine)),
            ["base", "render", "base", "engine"]
        );
    }
}
