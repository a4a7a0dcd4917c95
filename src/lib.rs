//! boot-image-controller: keeps the boot images of OpenShift MachineSets current.
//!
//! Data flows one way: observe (controller) -> decide ([`plan`]) -> act (controller) -> report.
#![forbid(unsafe_code)]

pub mod api;
pub mod arch;
pub mod cli;
pub mod controller;
pub mod known_images;
pub mod kubeconfig;
pub mod manifests;
pub mod metrics;
pub mod names;
pub mod plan;
pub mod platform;
pub mod reason;
pub mod revert;
pub mod server;
pub mod stream;
