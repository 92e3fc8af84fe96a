//! Every image a rendered component would run, wherever it hides, and the
//! one rewrite an air-gapped install needs: each of them moved to a mirror
//! registry, repository path, tag and digest kept.
//!
//! Where images hide in the bundles: container images of workloads and of
//! runtime CRs (KServe's ClusterServingRuntimes and ClusterStorageContainer,
//! Trainer's ClusterTrainingRuntimes); environment variables named `*IMAGE*`
//! or holding a registry-qualified reference (Pipelines' launcher and
//! driver); arguments (`--executor-image <ref>`, `--x-image=<ref>`); and
//! fields named `image`/`*Image` inside JSON or YAML held in ConfigMaps
//! (KServe's `inferenceservice-config`). Helm's `hub` convention (Istio's
//! injector values: `hub` + image name + `tag`) is a registry prefix:
//! rewritten here, its composed images listed by the Istio operator.
//!
//! The registry rule: the first path segment is a registry when it holds a
//! `.` or a `:` or is `localhost`; otherwise the image is Docker Hub's, whose
//! one-segment names live under `library/`. Moving `mysql:8.4` to
//! `registry.local:5000` gives `registry.local:5000/library/mysql:8.4`,
//! `kserve/agent:v0.16.0` gives `registry.local:5000/kserve/agent:v0.16.0`,
//! `gcr.io/istio-release/pilot:1.29.0` gives
//! `registry.local:5000/istio-release/pilot:1.29.0` (the layout `skopeo sync`
//! and `crane copy` produce when given the same paths).

use std::collections::BTreeSet;
use std::sync::OnceLock;

use kube::api::DynamicObject;
use regex::Regex;
use serde_json::Value;

use crate::base::kinds::describe;
use crate::base::kinds::kind;

/// Marks the path of an image a Helm `hub` composes: listed for mirroring,
/// never written anywhere (moving the hub moves it; it cannot be pinned).
const COMPOSED: &str = "<hub>";

/// The (path, image) pairs of one object.
fn found_in(o: &DynamicObject) -> Vec<(String, String)> {
    let mut found = Vec::new();
    walk(
        &o.data,
        String::new(),
        &Context::new(kind(o) == "ConfigMap"),
        &mut found,
    );
    found
}

/// The references written in one object's strings (hubs included, composed
/// images not), longest first so that a shorter one inside a longer one is
/// never replaced first; and of them, the untagged container images, which
/// are replaced only where they are a container's whole `image`. One walk
/// of the object for both.
fn written_in(o: &DynamicObject) -> (Vec<String>, BTreeSet<String>) {
    let found: Vec<(String, String)> = found_in(o)
        .into_iter()
        .filter(|(path, _)| !path.ends_with(COMPOSED))
        .collect();
    let untagged = found
        .iter()
        .filter(|(path, image)| path.ends_with(".image") && is_untagged(image))
        .map(|(_, image)| image.clone())
        .collect();
    let mut images: Vec<String> = found.into_iter().map(|(_, i)| i).collect();
    images.sort();
    images.dedup();
    images.sort_by_key(|i| std::cmp::Reverse(i.len()));
    (images, untagged)
}

/// One image and where it was found.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Found {
    /// The object, as "Kind namespace/name".
    pub object: String,
    /// The path inside it (`<json>`/`<yaml>` marks a parsed string).
    pub path: String,
    /// The image reference (for a `hub`, the registry prefix).
    pub image: String,
}

fn reference() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| Regex::new(kubeflow_api::IMAGE_PATTERN).ok())
        .as_ref()
}

/// Whether `s` names an image a mirror can copy: a reference with a tag or digest.
pub fn is_image(s: &str) -> bool {
    let last = s.rsplit('/').next().unwrap_or(s);
    (last.contains(':') || s.contains('@'))
        && !s.starts_with('/')
        && s.len() <= kubeflow_api::IMAGE_MAX_LENGTH
        && reference().is_some_and(|r| r.is_match(s))
}

/// Whether `s` is an image without tag or digest (`busybox`: its `latest`).
/// Only a container's `image` field is read so: anywhere else such a word
/// is no image.
fn is_untagged(s: &str) -> bool {
    let last = s.rsplit('/').next().unwrap_or(s);
    !last.contains(':')
        && !s.contains('@')
        && !s.starts_with('/')
        && s.len() <= kubeflow_api::IMAGE_MAX_LENGTH
        && reference().is_some_and(|r| r.is_match(s))
}

/// The registry of an image, if its first segment names one.
fn registry_of(image: &str) -> Option<&str> {
    let (first, _) = image.split_once('/')?;
    (first.contains('.') || first.contains(':') || first == "localhost").then_some(first)
}

/// Whether `s` is an image with an explicit registry: recognisable anywhere.
fn is_qualified_image(s: &str) -> bool {
    registry_of(s).is_some() && is_image(s)
}

/// The image moved to `registry` (see the module's rule).
pub fn moved(image: &str, registry: &str) -> String {
    let registry = registry.trim_end_matches('/');
    let path = match (registry_of(image), image.split_once('/')) {
        (Some(_), Some((_, rest))) => rest.to_string(),
        (None, Some(_)) => image.to_string(),
        _ => format!("library/{image}"),
    };
    format!("{registry}/{path}")
}

/// Whether a registry setting names a registry (host, optional port and
/// path), not a URL; the message says what is wrong.
pub fn check_registry(field: &str, registry: &str) -> Result<(), String> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    let grammar = RE.get_or_init(|| {
        Regex::new(
            r"^(localhost|[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+|[a-z0-9-]+:[0-9]{1,5})(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$",
        )
        .ok()
    });
    if registry.contains("://") {
        return Err(format!(
            "{field}: {registry:?} is a URL; give the registry's host[:port][/path], without a scheme"
        ));
    }
    let quoted = crate::base::conditions::truncate(registry, 256);
    if !grammar.as_ref().is_some_and(|g| g.is_match(registry)) {
        return Err(format!(
            "{field}: {quoted:?} is not a registry: host[:port][/path], lowercase, e.g. registry.local:5000 or harbor.example.com/mirror (a host needs a dot or a port)"
        ));
    }
    let host = registry.split('/').next().unwrap_or_default();
    if let Some((_, port)) = host.rsplit_once(':')
        && !port.parse::<u16>().is_ok_and(|p| p >= 1)
    {
        return Err(format!(
            "{field}: {quoted:?}: port {port} is not a port (1-65535)"
        ));
    }
    Ok(())
}

/// The longest image name (registry and repository, without tag or
/// digest) registries accept.
pub const NAME_MAX: usize = 255;

/// Refuses images moved to `registry` whose name has grown longer than
/// registries accept ([`NAME_MAX`]): the registry plus the longest
/// repository path of the bundle must fit.
pub fn check_moved(field: &str, registry: &str, objects: &[DynamicObject]) -> Result<(), String> {
    let longest = find(objects)
        .into_iter()
        .filter(|f| !f.path.ends_with(".hub"))
        .map(|f| name_of(&f.image).len())
        .max()
        .unwrap_or(0);
    if longest > NAME_MAX {
        return Err(format!(
            "{field}: {:?} makes image names {longest} characters long; registries accept {NAME_MAX} (use a shorter registry path)",
            crate::base::conditions::truncate(registry, 256)
        ));
    }
    Ok(())
}

/// An image's name: the reference without its tag and digest.
fn name_of(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or(image);
    match without_digest.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => name,
        _ => without_digest,
    }
}

/// Every image in the objects, with where it is.
pub fn find(objects: &[DynamicObject]) -> Vec<Found> {
    let mut out = Vec::new();
    for o in objects {
        let object = describe(o);
        out.extend(found_in(o).into_iter().map(|(path, image)| Found {
            object: object.clone(),
            path,
            image,
        }));
    }
    out
}

/// The distinct images (hub prefixes excluded), sorted: the list to mirror.
pub fn distinct(found: &[Found]) -> Vec<String> {
    found
        .iter()
        .filter(|f| !f.path.ends_with(".hub"))
        .map(|f| f.image.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The listing `images` prints: distinct images one per line, or with
/// `detailed` one line per place (image, object, path; hub prefixes too).
pub fn listing(found: &[Found], detailed: bool) -> String {
    let mut out = String::new();
    if detailed {
        let mut rows: Vec<&Found> = found.iter().collect();
        rows.sort_by(|a, b| (&a.image, &a.object, &a.path).cmp(&(&b.image, &b.object, &b.path)));
        for f in rows {
            out.push_str(&format!("{}\t{}\t{}\n", f.image, f.object, f.path));
        }
    } else {
        for i in distinct(found) {
            out.push_str(&i);
            out.push('\n');
        }
    }
    out
}

fn says_image(key: &str) -> bool {
    key.to_ascii_lowercase().ends_with("image")
}

/// What a value's surroundings say about it.
#[derive(Clone, Default)]
struct Context {
    /// Its key names an image.
    keyed: bool,
    /// Strings may hold JSON or YAML (ConfigMap data).
    blobs: bool,
    /// Helm's `hub` and `tag` of an enclosing map: a bare image name below
    /// them means `<hub>/<name>:<tag>`.
    hub: Option<(String, String)>,
}

impl Context {
    fn new(blobs: bool) -> Self {
        Context {
            blobs,
            ..Default::default()
        }
    }
}

/// Collects (path, image) pairs.
fn walk(v: &Value, path: String, ctx: &Context, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => walk_map(m, &path, ctx, out),
        Value::Array(items) => {
            let mut previous_names_image = false;
            for (i, x) in items.iter().enumerate() {
                let here = format!("{path}[{i}]");
                if let Some(s) = x.as_str() {
                    // `--executor-image <ref>` and `--x-image=<ref>`.
                    let flag_value = s
                        .split_once('=')
                        .filter(|(f, _)| f.starts_with('-') && says_image(f))
                        .map(|(_, v)| v);
                    if let Some(v) = flag_value.filter(|v| is_image(v)) {
                        out.push((here, v.to_string()));
                    } else if (previous_names_image || ctx.keyed) && is_image(s)
                        || is_qualified_image(s)
                    {
                        out.push((here, s.to_string()));
                    }
                    previous_names_image = s.starts_with('-') && says_image(s);
                } else {
                    walk(x, here, ctx, out);
                }
            }
        }
        Value::String(s) => {
            if (ctx.keyed && is_image(s)) || is_qualified_image(s) {
                out.push((path, s.clone()));
            } else if let Some((hub, tag)) = ctx.hub.as_ref().filter(|_| ctx.keyed)
                && !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
            {
                out.push((format!("{path}{COMPOSED}"), format!("{hub}/{s}:{tag}")));
            } else if ctx.blobs {
                match parse_blob(s) {
                    Some((parsed, marker)) => walk(
                        &parsed,
                        format!("{path}<{marker}>"),
                        &Context::default(),
                        out,
                    ),
                    // A template (Istio's injector): `image: <ref>` lines.
                    None => out.extend(image_lines(s, &path)),
                }
            }
        }
        _ => {}
    }
}

fn walk_map(
    m: &serde_json::Map<String, Value>,
    path: &str,
    ctx: &Context,
    out: &mut Vec<(String, String)>,
) {
    let hub = m.get("hub").and_then(Value::as_str);
    let tag = m.get("tag").and_then(Value::as_str);
    let mut inner = Context {
        keyed: false,
        ..ctx.clone()
    };
    if let (Some(hub), Some(tag)) = (hub, tag)
        && !hub.is_empty()
        && !tag.is_empty()
    {
        inner.hub = Some((hub.to_string(), tag.to_string()));
    }
    for (k, x) in m {
        let here = format!("{path}.{k}");
        // A container's image, even untagged (the model catalog's init
        // container runs `busybox`): it must move and be pinned like any
        // other, or an air-gapped node pulls it from Docker Hub.
        if k == "image"
            && m.contains_key("name")
            && let Some(s) = x.as_str().filter(|s| is_untagged(s))
        {
            out.push((here, s.to_string()));
            continue;
        }
        if k == "hub"
            && x.as_str()
                .is_some_and(|h| registry_of(&format!("{h}/x")).is_some())
        {
            out.push((here, x.as_str().unwrap_or_default().to_string()));
            continue;
        }
        let child = Context {
            keyed: says_image(k),
            ..inner.clone()
        };
        walk(x, here, &child, out);
    }
    // env entries: {name: *IMAGE*, value: ref}
    if let (Some(name), Some(value)) = (
        m.get("name").and_then(Value::as_str),
        m.get("value").and_then(Value::as_str),
    ) && name.to_ascii_uppercase().contains("IMAGE")
        && is_image(value)
        && !is_qualified_image(value)
    {
        out.push((format!("{path}.value"), value.to_string()));
    }
}

/// `image: <ref>` lines of a text that is no document (a template).
fn image_lines(text: &str, path: &str) -> Vec<(String, String)> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let (key, value) = line.trim().trim_start_matches("- ").split_once(':')?;
            let value = value.trim().trim_matches('"');
            (says_image(key.trim()) && is_image(value))
                .then(|| (format!("{path}<text>:{}", i + 1), value.to_string()))
        })
        .collect()
}

/// A string holding a JSON or YAML document (a map or a list).
fn parse_blob(s: &str) -> Option<(Value, &'static str)> {
    let t = s.trim_start();
    if (t.starts_with('{') || t.starts_with('['))
        && let Ok(v) = serde_json::from_str::<Value>(s)
    {
        return Some((v, "json"));
    }
    if !s.contains('\n') || s.contains("{{") {
        return None;
    }
    match serde_saphyr::from_str::<Value>(s) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) => Some((v, "yaml")),
        _ => None,
    }
}

/// Moves every image of the objects (and every `hub` prefix) to `registry`:
/// each found reference is replaced where it stands, so JSON and YAML held
/// in strings keep their formatting.
pub fn move_to(objects: &mut [DynamicObject], registry: &str) {
    for o in objects.iter_mut() {
        let (images, untagged) = written_in(o);
        let images = images.into_iter().filter(|i| !untagged.contains(i));
        let moves: Vec<(String, String)> = images
            .map(|i| {
                let to = if is_image(&i) {
                    moved(&i, registry)
                } else {
                    // A hub: the registry prefix itself.
                    moved(&format!("{i}/x"), registry)
                        .trim_end_matches("/x")
                        .to_string()
                };
                (i, to)
            })
            .collect();
        replace_strings(&mut o.data, &moves);
        let untagged: Vec<(String, String)> = untagged
            .into_iter()
            .map(|i| {
                let to = moved(&i, registry);
                (i, to)
            })
            .collect();
        set_untagged(&mut o.data, &untagged);
    }
}

/// Replaces untagged container images (`from` of `moves`) where they are a
/// container's `image` and nowhere else: in any other string such a word
/// (`busybox`) is no image.
fn set_untagged(v: &mut Value, moves: &[(String, String)]) {
    match v {
        Value::Object(m) => {
            let container = m.contains_key("name");
            for (k, x) in m.iter_mut() {
                match x {
                    Value::String(s) if container && k == "image" => {
                        if let Some((_, to)) = moves.iter().find(|(from, _)| from == s) {
                            *s = to.clone();
                        }
                    }
                    _ => set_untagged(x, moves),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|x| set_untagged(x, moves)),
        _ => {}
    }
}

fn replace_strings(v: &mut Value, moves: &[(String, String)]) {
    match v {
        Value::Object(m) => m.values_mut().for_each(|x| replace_strings(x, moves)),
        Value::Array(items) => items.iter_mut().for_each(|x| replace_strings(x, moves)),
        Value::String(s) => {
            for (from, to) in moves {
                if s == from {
                    *s = to.clone();
                    return;
                }
            }
            for (from, to) in moves {
                if s.contains(from.as_str()) && !s.contains(to.as_str()) {
                    *s = s.replace(from.as_str(), to);
                }
            }
        }
        _ => {}
    }
}

/// Parses a digest map: one `<image> <sha256:hex>` or `<image>@sha256:hex`
/// per line, `#` comments and blank lines allowed. An error names the line.
pub fn parse_digests(text: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    let digest = |d: &str| {
        d.strip_prefix("sha256:")
            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let mut out = std::collections::BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (image, d) = match line.split_once(char::is_whitespace) {
            Some((image, d)) => (image, d.trim()),
            None => line.split_once('@').unwrap_or((line, "")),
        };
        if !(is_image(image) || is_untagged(image)) || !digest(d) {
            return Err(format!(
                "line {}: {line:?} is not `<image> sha256:<64 hex digits>` (or `<image>@sha256:...`)",
                i + 1
            ));
        }
        out.insert(image.to_string(), d.to_string());
    }
    Ok(out)
}

/// Pins every image written in the objects by its digest from `digests`
/// (`image@sha256:...`, the tag kept). Returns the images the map lacks;
/// then nothing is changed.
pub fn pin(
    objects: &mut [DynamicObject],
    digests: &std::collections::BTreeMap<String, String>,
) -> Result<(), Vec<String>> {
    let mut untagged = BTreeSet::new();
    let mut written = Vec::new();
    for (images, bare) in objects.iter().map(written_in) {
        written.extend(images);
        untagged.extend(bare);
    }
    written.retain(|i: &String| (is_image(i) || untagged.contains(i)) && !i.contains('@'));
    written.sort();
    written.dedup();
    let missing: Vec<String> = written
        .iter()
        .filter(|i| !digests.contains_key(*i))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(missing);
    }
    let mut moves: Vec<(String, String)> = written
        .into_iter()
        .filter_map(|i| {
            let d = digests.get(&i)?;
            Some((i.clone(), format!("{i}@{d}")))
        })
        .collect();
    moves.sort_by_key(|(i, _)| std::cmp::Reverse(i.len()));
    let (untagged_moves, moves): (Vec<_>, Vec<_>) =
        moves.into_iter().partition(|(i, _)| untagged.contains(i));
    for o in objects.iter_mut() {
        replace_strings(&mut o.data, &moves);
        set_untagged(&mut o.data, &untagged_moves);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    #[test]
    fn docker_hub_names_get_their_implicit_paths() {
        let r = "registry.local:5000";
        assert_eq!(
            moved("mysql:8.4", r),
            "registry.local:5000/library/mysql:8.4"
        );
        assert_eq!(
            moved("kserve/agent:v0.16.0", r),
            "registry.local:5000/kserve/agent:v0.16.0"
        );
        assert_eq!(
            moved("gcr.io/istio-release/pilot:1.29.0", r),
            "registry.local:5000/istio-release/pilot:1.29.0"
        );
        assert_eq!(
            moved("localhost/a/b@sha256:00", "m.example/x/"),
            "m.example/x/a/b@sha256:00"
        );
    }

    #[test]
    fn images_are_pinned_by_digest_or_refused_when_the_map_lacks_one() {
        let d = format!("sha256:{}", "a".repeat(64));
        let map = parse_digests(&format!(
            "# mirrored 2026-11-22\nbusybox:1.36 {d}\n\nkserve/agent:v1@{d}\n"
        ))
        .expect("map");
        assert_eq!(map.len(), 2);
        let e = parse_digests("busybox:1.36 md5:00").expect_err("bad line");
        assert!(e.starts_with("line 1:"), "{e}");
        let mut objects = vec![obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "busybox:1.36"},
                {"name": "b", "image": "kserve/agent:v1"},
            ]}}},
        }))];
        let before = objects.clone();
        let mut short = map.clone();
        short.remove("kserve/agent:v1");
        assert_eq!(
            pin(&mut objects, &short),
            Err(vec!["kserve/agent:v1".to_string()])
        );
        assert_eq!(objects[0].data, before[0].data, "nothing changed");
        pin(&mut objects, &map).expect("pinned");
        let c = &objects[0].data["spec"]["template"]["spec"]["containers"];
        assert_eq!(c[0]["image"], json!(format!("busybox:1.36@{d}")));
        assert_eq!(c[1]["image"], json!(format!("kserve/agent:v1@{d}")));
    }

    #[test]
    fn registries_are_hosts_not_urls() {
        for ok in [
            "registry.local:5000",
            "harbor.example.com/mirror",
            "localhost",
            "mirror:5000/a",
        ] {
            assert!(check_registry("spec.imageRegistry", ok).is_ok(), "{ok}");
        }
        for bad in [
            "https://registry.local",
            "Registry.Local",
            "registry",
            "a b",
            "host/Path",
            "registry.local:99999",
            "registry.local:0",
            "mirror:65536/a",
        ] {
            let e = check_registry("spec.imageRegistry", bad).expect_err(bad);
            assert!(e.starts_with("spec.imageRegistry"), "{e}");
        }
        assert!(check_registry("spec.imageRegistry", "mirror:65535").is_ok());
    }

    #[test]
    fn a_registry_too_long_for_the_moved_names_is_refused() {
        let d = obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "c", "image": "ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.2.0"}
            ]}}},
        }));
        let fits = format!("mirror.example.com/{}", "a".repeat(150));
        let mut objects = vec![d.clone()];
        move_to(&mut objects, &fits);
        assert!(check_moved("spec.imageRegistry", &fits, &objects).is_ok());
        let long = format!("mirror.example.com/{}", "a".repeat(230));
        assert!(
            check_registry("spec.imageRegistry", &long).is_ok(),
            "a registry on its own"
        );
        let mut objects = vec![d];
        move_to(&mut objects, &long);
        let e = check_moved("spec.imageRegistry", &long, &objects).expect_err("too long");
        assert!(e.contains("255"), "{e}");
        assert_eq!(name_of("a.io/b/c:v1@sha256:00"), "a.io/b/c");
        assert_eq!(name_of("a.io:5000/b/c"), "a.io:5000/b/c");
    }

    #[test]
    fn an_untagged_container_image_moves_and_pins_and_nothing_else_does() {
        let d = "sha256:".to_string() + &"b".repeat(64);
        let deployment = || {
            obj(json!({
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"},
                "spec": {"template": {"spec": {
                    "initContainers": [{"name": "i", "image": "busybox",
                        "command": ["/bin/busybox", "sh", "-c", "echo busybox"]}],
                    "containers": [{"name": "c", "image": "ghcr.io/a/b:1",
                        "env": [{"name": "TOOL", "value": "busybox"}]}],
                }}},
            }))
        };
        let mut objects = vec![deployment()];
        assert_eq!(distinct(&find(&objects)), ["busybox", "ghcr.io/a/b:1"]);
        move_to(&mut objects, "registry.local:5000");
        let pod = &objects[0].data["spec"]["template"]["spec"];
        assert_eq!(
            pod["initContainers"][0]["image"],
            "registry.local:5000/library/busybox"
        );
        assert_eq!(
            pod["initContainers"][0]["command"],
            json!(["/bin/busybox", "sh", "-c", "echo busybox"])
        );
        assert_eq!(pod["containers"][0]["env"][0]["value"], "busybox");

        let mut objects = vec![deployment()];
        let map = parse_digests(&format!("ghcr.io/a/b:1 {d}\n")).expect("map");
        assert_eq!(pin(&mut objects, &map), Err(vec!["busybox".to_string()]));
        let map = parse_digests(&format!("ghcr.io/a/b:1 {d}\nbusybox {d}\n")).expect("map");
        pin(&mut objects, &map).expect("pinned");
        let pod = &objects[0].data["spec"]["template"]["spec"];
        assert_eq!(
            pod["initContainers"][0]["image"],
            json!(format!("busybox@{d}"))
        );
        assert_eq!(pod["initContainers"][0]["command"][0], "/bin/busybox");
    }

    #[test]
    fn images_are_found_where_they_hide_and_moved_in_place() {
        let deployment = obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"},
            "spec": {"template": {"spec": {
                "initContainers": [{"name": "i", "image": "busybox:1.36"}],
                "containers": [{"name": "c", "image": "ghcr.io/kubeflow/api:2.16.0",
                    "args": ["--executor-image", "quay.io/argoproj/argoexec:v3.7.3", "--x-image=kserve/x:1", "--port", "8080"],
                    "env": [
                        {"name": "V2_LAUNCHER_IMAGE", "value": "kfp/launcher:2"},
                        {"name": "DB_HOST", "value": "mysql:3306"},
                        {"name": "DRIVER", "value": "ghcr.io/kubeflow/driver:2"},
                    ]}],
            }}},
        }));
        let config = obj(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"},
            "data": {
                "agent": "{\n  \"image\": \"kserve/agent:v0.16.0\",\n  \"cpu\": \"1\"\n}",
                "values": "{\"global\": {\"hub\": \"gcr.io/istio-release\", \"tag\": \"1.29.0\"}}",
                "mesh": "accessLogFile: /dev/stdout\ndefaultConfig:\n  image: docker.io/a/b:1\n",
                "host": "mysql:3306",
            },
        }));
        let mut objects = vec![deployment, config];
        let found = find(&objects);
        let images = distinct(&found);
        assert_eq!(
            images,
            [
                "busybox:1.36",
                "docker.io/a/b:1",
                "ghcr.io/kubeflow/api:2.16.0",
                "ghcr.io/kubeflow/driver:2",
                "kfp/launcher:2",
                "kserve/agent:v0.16.0",
                "kserve/x:1",
                "quay.io/argoproj/argoexec:v3.7.3",
            ]
        );
        assert!(
            found
                .iter()
                .any(|f| f.path == ".data.values<json>.global.hub"),
            "{found:#?}"
        );
        let composed = obj(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "v", "namespace": "ns"},
            "data": {"values": "{\"global\": {\"hub\": \"gcr.io/istio-release\", \"tag\": \"1.29.0\", \"proxy\": {\"image\": \"proxyv2\"}}}"},
        }));
        assert_eq!(
            distinct(&find(&[composed])),
            ["gcr.io/istio-release/proxyv2:1.29.0"]
        );
        move_to(&mut objects, "registry.local:5000");
        let after = distinct(&find(&objects));
        assert!(
            after.iter().all(|i| i.starts_with("registry.local:5000/")),
            "{after:#?}"
        );
        assert_eq!(after.len(), images.len());
        let data = &objects[1].data["data"];
        assert!(
            data["agent"]
                .as_str()
                .unwrap_or("")
                .contains("\n  \"cpu\": \"1\""),
            "formatting kept"
        );
        assert!(
            data["values"]
                .as_str()
                .unwrap_or("")
                .contains("registry.local:5000/istio-release")
        );
        assert_eq!(data["host"], json!("mysql:3306"), "a host:port is no image");
        let env = &objects[0].data["spec"]["template"]["spec"]["containers"][0]["env"];
        assert_eq!(env[1]["value"], json!("mysql:3306"));
        let args = &objects[0].data["spec"]["template"]["spec"]["containers"][0]["args"];
        assert_eq!(args[2], json!("--x-image=registry.local:5000/kserve/x:1"));
        assert_eq!(args[4], json!("8080"));
    }
}
