//! Webhook configurations and CRDs' conversion webhooks: only the
//! bundles', calling the bundle's Service in an allowed namespace.

use super::cel::check;
use super::{Check, WEBHOOK_CONFIGS};

/// The checks of webhook configurations and CRDs.
pub(super) fn checks() -> Vec<Check> {
    vec![
    check(
        &WEBHOOK_CONFIGS,
        "object.metadata.name in variables.webhooks[request.resource.resource] && \
         (!has(object.webhooks) || object.webhooks.all(w, !has(w.clientConfig.url) && has(w.clientConfig.service) && \
         w.clientConfig.service.namespace in variables.allowedNamespaces && \
         (w.name + ' ' + w.clientConfig.service.name + ' ' + (has(w.clientConfig.service.path) ? w.clientConfig.service.path : '')) \
         in variables.webhooks[request.resource.resource][object.metadata.name]))"
            .to_string(),
        "the operator may write only its bundles' webhook configurations, each webhook calling the bundle's Service in an allowed namespace",
    ),
    check(
        &["customresourcedefinitions"],
        "object.metadata.name in variables.conversions && \
         (!has(object.spec.conversion) || !has(object.spec.conversion.webhook) || \
         !has(object.spec.conversion.webhook.clientConfig) || \
         (!has(object.spec.conversion.webhook.clientConfig.url) && \
         has(object.spec.conversion.webhook.clientConfig.service) && \
         object.spec.conversion.webhook.clientConfig.service.namespace in variables.allowedNamespaces && \
         (object.spec.conversion.webhook.clientConfig.service.name + ' ' + \
         (has(object.spec.conversion.webhook.clientConfig.service.path) ? object.spec.conversion.webhook.clientConfig.service.path : '')) \
         in variables.conversions[object.metadata.name]))"
            .to_string(),
        "the operator may write only its bundles' CRDs, a conversion webhook calling the bundle's Service in an allowed namespace",
    ),
    ]
}
