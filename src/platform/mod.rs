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
    /// The planner has already merged the current golden stream's own `image_references()` into
    /// it, so a rule asks only this set whether an image is one we published.
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

/// The stream lacks the image a rule needs for `ctx.arch`: either the whole architecture is
/// missing (a wrong arch annotation, usually) or only this platform's image (a release that does
/// not ship it yet). `what` names the missing image, `advice` says what happens or what to do.
fn not_in_stream(
    ctx: &RuleContext<'_>,
    what: &str,
    advice: &str,
    current: Option<Value>,
) -> ImageOutcome {
    let (reason, missing) = if ctx.stream.has_arch(ctx.arch) {
        (Reason::ImageNotInStream, format!("no {} {what}", ctx.arch))
    } else {
        (
            Reason::ArchitectureNotInStream,
            format!("no {} images at all", ctx.arch),
        )
    };
    ImageOutcome::Error {
        reason,
        message: format!(
            "the golden stream {} publishes {missing}; {advice}",
            ctx.stream.stream
        ),
        current,
    }
}

fn invalid(message: impl Into<String>, current: Option<Value>) -> ImageOutcome {
    ImageOutcome::Error {
        reason: Reason::InvalidProviderSpec,
        message: message.into(),
        current,
    }
}

/// Test inputs shared by the platform rules' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use serde_json::{Value, json};

    use super::{ImageOutcome, RuleContext};
    use crate::arch::Arch;
    use crate::known_images::KnownImages;
    use crate::reason::Reason;
    use crate::stream::GoldenStream;

    /// A compact 4.21 stream (real image ids, few regions): x86_64 has AWS, GCP and the Azure
    /// marketplace (from the installer's ARO overlay); aarch64 has AWS only; ppc64le and s390x
    /// are absent.
    pub(crate) fn stream_4_21() -> Value {
        let market = |publisher: &str, offer: &str, gen1: &str, gen2: &str, version: &str| {
            json!({
                "hyperVGen1": {"publisher": publisher, "offer": offer, "sku": gen1, "version": version},
                "hyperVGen2": {"publisher": publisher, "offer": offer, "sku": gen2, "version": version}
            })
        };
        let paid = "4.18.2025031114";
        json!({
            "stream": "rhcos-4.21",
            "architectures": {
                "x86_64": {
                    "artifacts": {"aws": {"release": "9.6.20251023-0"}},
                    "images": {
                        "aws": {"regions": {
                            "us-east-1": {"release": "9.6.20251023-0", "image": "ami-01095d1967818437c"},
                            "us-east-2": {"release": "9.6.20251023-0", "image": "ami-0bc8dda494f111572"}
                        }},
                        "gcp": {
                            "release": "9.6.20251023-0",
                            "project": "rhcos-cloud",
                            "name": "rhcos-9-6-20251023-0-gcp-x86-64"
                        }
                    },
                    "rhel-coreos-extensions": {"marketplace": {"azure": {
                        "no-purchase-plan": market("azureopenshift", "aro4", "aro_420", "420-v2", "9.6.20251015"),
                        "ocp": market("redhat", "rh-ocp-worker", "rh-ocp-worker-gen1", "rh-ocp-worker", paid),
                        "ocp-emea": market("redhat-limited", "rh-ocp-worker", "rh-ocp-worker-gen1", "rh-ocp-worker", paid)
                    }}}
                },
                "aarch64": {
                    "images": {"aws": {"regions": {
                        "us-east-1": {"release": "9.6.20251023-0", "image": "ami-08e3890b24e081680"}
                    }}}
                }
            }
        })
    }

    /// What the planner hands a rule about the cluster.
    pub(crate) struct Cluster {
        pub(crate) stream: GoldenStream,
        pub(crate) known_images: KnownImages,
        pub(crate) infrastructure_name: Option<String>,
    }

    impl Cluster {
        /// A cluster on `stream` whose known images are, as the planner builds them, the
        /// stream's own references.
        pub(crate) fn new(stream: Value) -> Self {
            let stream = GoldenStream::parse(&stream.to_string()).expect("test stream parses");
            let known_images = stream.image_references().into_iter().collect();
            Cluster {
                stream,
                known_images,
                infrastructure_name: None,
            }
        }

        /// Adds entries of the `--known-images-file` (images of earlier releases).
        pub(crate) fn knowing(mut self, images: &[&str]) -> Self {
            self.known_images
                .extend(images.iter().map(|image| image.to_string()));
            self
        }

        pub(crate) fn named(mut self, infrastructure_name: &str) -> Self {
            self.infrastructure_name = Some(infrastructure_name.into());
            self
        }

        pub(crate) fn ctx(&self, arch: Arch) -> RuleContext<'_> {
            RuleContext {
                stream: &self.stream,
                arch,
                known_images: &self.known_images,
                infrastructure_name: self.infrastructure_name.as_deref(),
            }
        }
    }

    /// The message of a skip or error, or `""` for UpToDate and Update.
    pub(crate) fn message(outcome: &ImageOutcome) -> &str {
        match outcome {
            ImageOutcome::Skip { message, .. } | ImageOutcome::Error { message, .. } => message,
            ImageOutcome::UpToDate { .. } | ImageOutcome::Update { .. } => "",
        }
    }

    /// The reason of a skip or error, or `None` for UpToDate and Update.
    pub(crate) fn reason(outcome: &ImageOutcome) -> Option<Reason> {
        match outcome {
            ImageOutcome::Skip { reason, .. } | ImageOutcome::Error { reason, .. } => Some(*reason),
            ImageOutcome::UpToDate { .. } | ImageOutcome::Update { .. } => None,
        }
    }
}
