//! The report layer: what the operators tell people. Status, Events and
//! telemetry (metrics, probes). It uses the layers below it.

pub mod events;
pub mod status;
pub mod telemetry;
