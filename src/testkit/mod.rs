//! One test kit shared by unit tests, integration tests, benchmarks and fuzz targets, so an
//! object or a stream is written once and every test agrees on what it looks like. Compiled only
//! for tests and with the `testkit` feature: nothing here reaches the shipped binary.

pub mod cluster_api;
pub mod decisions;
pub mod ec2;
pub mod generators;
pub mod objects;
pub mod provider_specs;
pub mod rules;
pub mod scratch;
pub mod skips;
pub mod snapshot;
pub mod streams;
