//! boot-image-controller: keeps the boot images of OpenShift MachineSets current.
//!
//! Data flows one way: observe -> decide ([`plan`]) -> act -> report, the last three carried
//! out by the controller. `docs/architecture.md` follows one MachineSet through the code.
#![forbid(unsafe_code)]

pub mod api;
mod api_client;
pub mod arch;
mod bounded_read;
pub mod cli;
pub mod controller;
mod ec2;
pub mod golden_stream;
pub mod http_client;
pub mod known_images;
mod kubeconfig;
pub mod machine_kind;
pub mod manifests;
pub mod metrics;
pub mod names;
pub mod plan;
pub mod platform;
mod quoted;
pub mod reason;
mod revert;
mod server;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod vcenter;
