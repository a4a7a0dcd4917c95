//! The integration tests, as one test binary.
//!
//! Each file is a module named for what it covers: `cargo test --test suite controller::` runs
//! one. They share one binary because every test binary links kube, tokio and rustls again: as
//! 31 binaries they took 1.5 GB of `target/` (with line tables only), and `support` was compiled
//! 25 times. Separate processes never isolated them anyway: each test has its own namespace and
//! singleton names (see `support`), and the tests that stop an API server start a private one.

mod deploy;
mod metrics_tls;
mod support;

mod acm;
mod alert_runbooks;
mod alerts_and_dashboards_use_exported_metrics;
mod audit;
mod boot_evidence;
mod cluster_api;
mod cluster_selection;
mod control_plane;
mod controller;
mod docs;
mod ec2;
mod egress;
mod faults;
mod fleet;
mod holds;
mod hostile_objects;
mod hot_loop_whole_object_writer;
mod kube_api;
mod leader_election_bounds;
mod manifests_apply_and_wire;
mod memory_sizing;
mod metrics_access;
mod olm_bundle;
mod patch_failures;
mod plan_cli;
mod plan_for_ci;
mod plan_live;
mod plan_properties;
mod platform_fixtures;
mod prometheus;
mod rbac_least_privilege;
mod releases;
mod revert;
mod sharing_with_mco;
mod stub_secret_watches;
mod stub_upgrade;
mod vcenter;
mod vsphere;
mod watch_backoff;
