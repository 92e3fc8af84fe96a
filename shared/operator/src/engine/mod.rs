//! The engine layer: what is on the cluster. Apply and prune, the live
//! index, the inventory, discovery, cleanup, health and the watches. It uses
//! the base and render layers. Component operators never name it: the
//! framework drives it for them (`layers.rs` checks).

pub mod apply;
pub mod cleanup;
pub mod discovery;
pub mod health;
pub mod inventory;
pub mod live_index;
pub mod watches;
