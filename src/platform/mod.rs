//! Platform rules: given a provider spec and the golden stream, what the boot image should be.
//!
//! Each platform lives in its own file and reads the same: resolve the target from the stream,
//! compare with the current value, decide. Rules are pure: no I/O, no logging, no status. They
//! return a meaning ([`ImageOutcome`]); the planner turns it into a JSON Patch.

mod aws;
mod azure;
mod gcp;

use serde_json::Value;

use crate::arch::Arch;
use crate::known_images::KnownImages;
use crate::reason::Reason;
use crate::stream::GoldenStream;

/// The cloud a cluster runs on, from `Infrastructure.status.platformStatus.type`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Platform {
    Aws,
    Gcp,
    Azure,
    VSphere,
    /// Any other platform; boot images there are not managed automatically.
    Other(String),
}

impl Platform {
    pub fn from_type(type_: &str) -> Self {
        match type_ {
            "AWS" => Platform::Aws,
            "GCP" => Platform::Gcp,
            "Azure" => Platform::Azure,
            "VSphere" => Platform::VSphere,
            other => Platform::Other(other.to_string()),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Platform::Aws => "AWS",
            Platform::Gcp => "GCP",
            Platform::Azure => "Azure",
            Platform::VSphere => "VSphere",
            Platform::Other(name) => name,
        }
    }

    /// Whether MachineSets are selected when `managedBootImages` is absent (the platform's
    /// default, as the Machine Config Operator defines it).
    pub fn managed_by_default(&self) -> bool {
        matches!(
            self,
            Platform::Aws | Platform::Gcp | Platform::Azure | Platform::VSphere
        )
    }

    /// The rule that updates boot images on this platform, if we have one.
    pub fn rule(&self) -> Option<&'static dyn BootImageRule> {
        match self {
            Platform::Aws => Some(&aws::Aws),
            Platform::Gcp => Some(&gcp::Gcp),
            Platform::Azure => Some(&azure::Azure),
            Platform::VSphere | Platform::Other(_) => None,
        }
    }

    /// Why a platform without a rule is left alone.
    pub fn unsupported_message(&self) -> String {
        match self {
            Platform::VSphere => "vSphere boot images are vCenter templates; updating them needs \
                                  vCenter access, so they are not updated automatically"
                .to_string(),
            other => format!(
                "boot images on platform {:?} are not updated automatically",
                other.name()
            ),
        }
    }
}

/// Everything a rule may consult besides the provider spec.
#[derive(Clone, Copy, Debug)]
pub struct RuleContext<'a> {
    pub stream: &'a GoldenStream,
    pub arch: Arch,
    /// Images of every golden stream seen, the `--known-images-file` and remembered releases.
    pub known_images: &'a KnownImages,
    /// `Infrastructure.status.infrastructureName`; Azure installer uploads are named after it.
    pub infrastructure_name: Option<&'a str>,
}

/// One value to replace inside the provider spec.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldChange {
    /// JSON Pointer relative to `providerSpec.value`, e.g. `/ami/id`.
    pub pointer: String,
    pub from: Value,
    pub to: Value,
}

/// What a platform rule decided about one provider spec.
#[derive(Clone, Debug, PartialEq)]
pub enum ImageOutcome {
    UpToDate {
        current: Value,
    },
    Update {
        current: Value,
        target: Value,
        changes: Vec<FieldChange>,
    },
    Skip {
        reason: Reason,
        message: String,
        current: Option<Value>,
    },
    Error {
        reason: Reason,
        message: String,
        current: Option<Value>,
    },
}

/// A platform's boot-image rule.
pub trait BootImageRule: Sync {
    fn evaluate(&self, provider_spec: &Value, ctx: &RuleContext<'_>) -> ImageOutcome;
}

/// Compares a current value with the target and builds the outcome for a single field.
///
/// Shared by rules whose image is one string at one place (AWS `ami.id`, GCP boot disks).
fn compare_single(current: &Value, target: Value, pointers: Vec<String>) -> ImageOutcome {
    if *current == target {
        return ImageOutcome::UpToDate {
            current: current.clone(),
        };
    }
    let changes = pointers
        .into_iter()
        .map(|pointer| FieldChange {
            pointer,
            from: current.clone(),
            to: target.clone(),
        })
        .collect();
    ImageOutcome::Update {
        current: current.clone(),
        target,
        changes,
    }
}

fn invalid(message: impl Into<String>, current: Option<Value>) -> ImageOutcome {
    ImageOutcome::Error {
        reason: Reason::InvalidProviderSpec,
        message: message.into(),
        current,
    }
}
