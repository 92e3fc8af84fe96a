//! The base layer: what every other layer speaks in. Kinds, labels,
//! conditions, refusals, quantities, bundles, the namespaces allowed, the
//! platform, the allocator, the retry policy and error chains. It uses no
//! other layer.

pub mod allocator;
pub mod bundle;
pub mod conditions;
pub mod errors;
pub mod kinds;
pub mod labels;
pub mod platform;
pub mod quantity;
pub mod refusal;
pub mod retry;
pub mod scope;
