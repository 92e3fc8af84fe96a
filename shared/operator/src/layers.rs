//! The library's layers, enforced: each module may use the layers below it,
//! never one above. From the bottom:
//!
//! 1. **base**: kinds, labels, conditions, refusals, quantities, bundles,
//!    namespaces allowed, the platform;
//! 2. **render**: what the objects are (transforms, validation, images,
//!    overrides, certificates, OpenShift, Pod Security levels, RBAC
//!    derivation, upgrade plans);
//! 3. **engine**: what is on the cluster (apply, prune, the live index,
//!    inventory, discovery, cleanup, health);
//! 4. **report**: status, Events, telemetry;
//! 5. **framework**: the controller skeleton, the component framework, the
//!    process runner.
//!
//! A test reads the sources: a `crate::<module>` path from a lower layer
//! into a higher one fails it (tests inside a module are left out: they
//! may use anything).

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Each top-level module's layer (0: base ... 4: framework).
    const LAYERS: &[(&str, u8)] = &[
        ("kinds", 0),
        ("labels", 0),
        ("conditions", 0),
        ("refusal", 0),
        ("quantity", 0),
        ("bundle", 0),
        ("scope", 0),
        ("platform", 0),
        ("allocator", 0),
        ("retry", 0),
        ("errors", 0),
        ("transform", 1),
        ("validate", 1),
        ("images", 1),
        ("images_in_bundles", 1),
        ("overrides", 1),
        ("known_secrets", 1),
        ("certs", 1),
        ("secrets", 1),
        ("openshift", 1),
        ("pod_security", 1),
        ("render", 1),
        ("rbac", 1),
        ("upgrade_plan", 1),
        ("foreign_fields", 1),
        ("apply", 2),
        ("live_index", 2),
        ("inventory", 2),
        ("discovery", 2),
        ("cleanup", 2),
        ("health", 2),
        ("watches", 2),
        ("status", 3),
        ("events", 3),
        ("telemetry", 3),
        ("controller", 4),
        ("component", 4),
        ("runner", 4),
        ("layers", 4),
    ];

    fn layer(module: &str) -> Option<u8> {
        LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
    }

    /// The `crate::<module>` paths a source file uses outside its tests.
    fn uses(text: &str) -> Vec<String> {
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
        let mut out = Vec::new();
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let module: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.push(module);
        }
        out
    }

    fn module_of(src: &Path, file: &Path) -> String {
        let relative = file.strip_prefix(src).unwrap_or(file);
        let first = relative
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().to_string())
            .unwrap_or_default();
        first.trim_end_matches(".rs").to_string()
    }

    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("source folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    #[test]
    fn no_module_reaches_into_a_layer_above_it() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut all = Vec::new();
        files(&src, &mut all);
        let mut wrong = Vec::new();
        let mut checked = 0;
        for file in &all {
            let module = module_of(&src, file);
            if module == "lib" {
                continue;
            }
            let Some(own) = layer(&module) else {
                wrong.push(format!("{module}: in no layer (add it to LAYERS)"));
                continue;
            };
            let text = std::fs::read_to_string(file).expect("source");
            for used in uses(&text) {
                checked += 1;
                if let Some(theirs) = layer(&used)
                    && theirs > own
                {
                    wrong.push(format!(
                        "{} (layer {own}) uses crate::{used} (layer {theirs})",
                        file.display()
                    ));
                }
            }
        }
        assert!(
            checked > 100,
            "only {checked} uses read: the reader is broken"
        );
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn uses_are_read_outside_tests_only() {
        let text = "use crate::apply::Engine;\nfn f() { crate::kinds::kind(x) }\n#[cfg(test)]\nmod tests { use crate::controller::Skeleton; }";
        assert_eq!(uses(text), ["apply", "kinds"]);
        assert_eq!(layer("render"), Some(1));
        assert!(
            layer("apply") > layer("render"),
            "the render layer may not use the engine"
        );
    }
}
