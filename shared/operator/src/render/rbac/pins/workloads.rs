//! Deployments, StatefulSets, DaemonSets and Jobs: only the bundles' names, each
//! as the bundle's ServiceAccount, with no more of the host and no other
//! images than the bundles give it; deletes of the namespaced kinds by the
//! bundles' names.

use super::cel::{cel_repository, check, quote};
use super::tenant::tenant_delete;
use super::{Check, Extra, WORKLOADS};

/// The key of a workload's entry in the variables, by the name of `of`
/// (`object` or `oldObject`).
pub(super) fn workload_key(extra: &Extra<'_>, of: &str) -> String {
    match extra.workload_suffix {
        Some(suffix) => format!(
            "{of}.metadata.name.endsWith({s}) ? {named} : {of}.metadata.name",
            s = quote(suffix),
            named = quote(&format!("*{suffix}"))
        ),
        None => format!("{of}.metadata.name"),
    }
}

/// The checks of workloads and of namespaced deletes.
pub(super) fn checks(extra: &Extra<'_>) -> Vec<Check> {
    let pod = "object.spec.template.spec";
    let containers = |list: &str| {
        format!(
            "(!has({pod}.{list}) || {pod}.{list}.all(c, \
             (!has(c.securityContext) || ((!has(c.securityContext.privileged) || !c.securityContext.privileged || 'privileged' in f) && \
             (!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || \
             c.securityContext.capabilities.add.all(x, ('cap:' + x) in f)))) && \
             (!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0 || 'hostPort' in f))))"
        )
    };
    let host = |h: &str| format!("(!has({pod}.{h}) || !{pod}.{h} || '{h}' in f)");
    // Each container's image: a repository of the workload's in the bundles
    // (`i`), that repository's path under a mirror the chart names (`p`), or
    // under a prefix the chart allows as extra images.
    let images_allowed = |list: &str| {
        let repo = cel_repository("c.image");
        format!(
            "(!has({pod}.{list}) || {pod}.{list}.all(c, {repo} in i || \
             variables.imageMirrors.exists(m, {repo}.startsWith(m + '/') && {repo}.substring(size(m) + 1) in p) || \
             variables.extraImages.exists(e, {repo}.startsWith(e))))"
        )
    };
    let workload_names: Vec<&str> = WORKLOADS.iter().map(|(_, r)| *r).collect();
    let workload_key = |of: &str| workload_key(extra, of);
    vec![
        check(
            &workload_names,
            format!(
                "variables.workloadName in variables.workloadAccounts[request.resource.resource] && \
             (has({pod}.serviceAccountName) ? {pod}.serviceAccountName : 'default') in \
             variables.workloadAccounts[request.resource.resource][variables.workloadName] && \
             (!has({pod}.serviceAccount) || {pod}.serviceAccount == '' || \
             {pod}.serviceAccount in variables.workloadAccounts[request.resource.resource][variables.workloadName]) && \
             [variables.workloadFeatures[request.resource.resource][variables.workloadName]].all(f, \
             {} && {} && {} && \
             (!has({pod}.volumes) || {pod}.volumes.all(v, !has(v.hostPath) || ('hostPath:' + v.hostPath.path) in f)) && \
             {} && {})",
                host("hostNetwork"),
                host("hostPID"),
                host("hostIPC"),
                containers("containers"),
                containers("initContainers"),
            ),
            "the operator may write only its bundles' workloads, each running as the bundle's ServiceAccount with no more of the host than the bundle gives it",
        ),
        check(
            &workload_names,
            format!(
                "variables.workloadName in variables.workloadImages[request.resource.resource] && \
             [variables.workloadImages[request.resource.resource][variables.workloadName]].all(i, \
             [variables.workloadImagePaths[request.resource.resource][variables.workloadName]].all(p, \
             {} && {}))",
                images_allowed("containers"),
                images_allowed("initContainers"),
            ),
            "the operator may run in each workload only the images its bundles run there: from the bundle's repository, the same path under one of the chart's image mirrors, or one of the chart's extra images",
        ),
        deletes(
            &workload_key("oldObject"),
            (!extra.tenant_roles.is_empty()).then(|| tenant_delete(extra)),
        ),
    ]
}

/// Deletes of the namespaced kinds: only the bundles' names (as their
/// writes), so an operator's token cannot remove another party's role,
/// binding or workload in an allowed namespace.
pub(super) fn deletes(workload_key: &str, tenant: Option<String>) -> Check {
    let tenant = tenant
        .map(|t| format!("(request.resource.resource == 'rolebindings' && {t}) || "))
        .unwrap_or_default();
    Check {
        expression: format!(
            "request.operation != 'DELETE' || \
             !(request.resource.resource in ['roles', 'rolebindings', 'deployments', 'statefulsets', 'daemonsets']) || \
             (request.resource.resource == 'roles' && oldObject.metadata.name in variables.roleRules) || {tenant}\
             (request.resource.resource == 'rolebindings' && (oldObject.metadata.name in variables.bindingRoles || \
             (oldObject.roleRef.name.startsWith('system:openshift:scc:') && \
             oldObject.metadata.name.endsWith('-scc-' + oldObject.roleRef.name.substring(21))))) || \
             (request.resource.resource in ['deployments', 'statefulsets', 'daemonsets'] && \
             ({workload_key}) in variables.workloadAccounts[request.resource.resource])"
        ),
        message: "the operator may delete only its bundles' Roles, RoleBindings and workloads"
            .into(),
    }
}
