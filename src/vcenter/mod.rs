//! vCenter: the VM templates vSphere MachineSets clone.
//!
//! What it answers is plain data the planner reads (`VcenterFacts`, in `crate::facts`);
//! [`credentials`] reads the machine API's Secret; [`soap`] speaks the Web Services API and
//! [`client`] makes the few calls we need; [`ova`] downloads and verifies an OVA; [`import`]
//! turns one into a template, all or nothing; [`retention`] destroys old templates of ours;
//! [`version`] reads which release a template MachineSets clone now is.

pub mod client;
pub mod credentials;
pub mod import;
pub mod ova;
pub mod retention;
pub mod soap;
pub mod version;

use std::time::Duration;

/// What went wrong talking to vCenter or getting an OVA; the message is for people.
#[derive(Debug, thiserror::Error)]
pub enum VcenterError {
    #[error("vCenter cannot be reached: {0}")]
    Unreachable(String),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    /// A SOAP fault: its vSphere type (`InvalidLogin`, `DuplicateName`, ...) and message.
    #[error("vCenter refused: {kind}: {message}")]
    Fault { kind: String, message: String },
    #[error("unexpected answer from vCenter: {0}")]
    Protocol(String),
    #[error("{0} not found in vCenter")]
    NotFound(String),
    #[error("no credentials for vCenter {server}: {why}")]
    Credentials { server: String, why: String },
    #[error("downloading the OVA {url} failed: {message}")]
    Download { url: String, message: String },
    /// The OVA's host could not be connected to (no name, no route, refused, no TLS): a
    /// cluster without egress to it needs a mirror.
    #[error("the OVA {url} cannot be reached: {message}; {}", ova_advice(*.mirrored))]
    OvaUnreachable {
        url: String,
        /// Whether `url` is the administrator's mirror rather than the stream's location.
        mirrored: bool,
        message: String,
    },
    #[error(
        "the OVA {url} has sha256 {actual}, not the {expected} the golden stream publishes; refused"
    )]
    DigestMismatch {
        url: String,
        expected: String,
        actual: String,
    },
    #[error("the OVA is not usable: {0}")]
    InvalidOva(String),
    /// Another import of the same template is under way (its temporary VM is younger than the
    /// import timeout).
    #[error("another import is under way ({0})")]
    ImportInProgress(String),
    #[error("the import failed: {0}")]
    Import(String),
    #[error("local file: {0}")]
    Io(#[from] std::io::Error),
}

fn ova_advice(mirrored: bool) -> &'static str {
    if mirrored {
        "check that the mirror serves it and that the controller's pod can reach the mirror"
    } else {
        "without egress to it, serve the OVA from a mirror the controller can reach \
         (--vsphere-ova-mirror or --vsphere-ova-url), or let the controller's pod reach this host"
    }
}

impl VcenterError {
    /// Whether vCenter itself could not be asked (rather than refusing one thing): the whole
    /// server is then reported unavailable.
    pub fn is_unavailable(&self) -> bool {
        match self {
            VcenterError::Unreachable(_) | VcenterError::TimedOut(_) => true,
            VcenterError::Credentials { .. } => true,
            VcenterError::Fault { kind, .. } => {
                kind == "InvalidLogin" || kind == "NotAuthenticated"
            }
            _ => false,
        }
    }
}
