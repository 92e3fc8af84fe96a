//! The framework layer: the controller skeleton every operator runs, the
//! component framework on it, and the process runner. It may use every
//! layer; the component operators reach the engine only through it.

pub mod component;
pub mod controller;
pub mod runner;
