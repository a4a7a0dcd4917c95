//! What a platform rule is handed, and readers of what it answers, for the rules' unit tests
//! and the fuzz targets.

use serde_json::{Value, json};

use crate::arch::Arch;
use crate::golden_stream::GoldenStream;
use crate::known_images::KnownImages;
use crate::platform::{Changes, ImageOutcome, RuleContext};
use crate::reason::Reason;

/// What the planner hands a rule about the cluster.
pub struct Cluster {
    pub stream: GoldenStream,
    pub known_images: KnownImages,
    pub infrastructure_name: Option<String>,
    pub ec2: crate::facts::ec2::Ec2Facts,
    pub platform_spec: Option<Value>,
    pub vcenter: crate::facts::vcenter::VcenterFacts,
}

impl Cluster {
    /// A cluster on `stream` whose known images are, as the planner builds them, the
    /// stream's own references.
    pub fn new(stream: Value) -> Self {
        let stream = GoldenStream::parse(&stream.to_string()).expect("test stream parses");
        let known_images = stream.image_references().into_iter().collect();
        Cluster {
            stream,
            known_images,
            infrastructure_name: None,
            ec2: crate::facts::ec2::Ec2Facts::default(),
            platform_spec: None,
            vcenter: crate::facts::vcenter::VcenterFacts::default(),
        }
    }

    /// Adds entries of the `--known-images-file` (images of earlier releases).
    pub fn knowing(mut self, images: &[&str]) -> Self {
        self.known_images
            .extend(images.iter().map(|image| image.to_string()));
        self
    }

    /// What EC2 says about AMIs.
    pub fn with_ec2(mut self, ec2: crate::facts::ec2::Ec2Facts) -> Self {
        self.ec2 = ec2;
        self
    }

    /// A vSphere cluster with the kit's one failure domain.
    pub fn on_vsphere(mut self) -> Self {
        self.platform_spec = Some(crate::testkit::provider_specs::vsphere_platform_spec());
        self
    }

    /// What vCenter says about templates.
    pub fn with_vcenter(mut self, vcenter: crate::facts::vcenter::VcenterFacts) -> Self {
        self.vcenter = vcenter;
        self
    }

    pub fn named(mut self, infrastructure_name: &str) -> Self {
        self.infrastructure_name = Some(infrastructure_name.into());
        self
    }

    pub fn ctx(&self, arch: Arch) -> RuleContext<'_> {
        RuleContext {
            stream: &self.stream,
            arch,
            known_images: &self.known_images,
            infrastructure_name: self.infrastructure_name.as_deref(),
            ec2: &self.ec2,
            platform_spec: self.platform_spec.as_ref(),
            vcenter: &self.vcenter,
        }
    }
}

/// The message of a skip or error, or `""` for UpToDate and Update.
pub fn message(outcome: &ImageOutcome) -> &str {
    match outcome {
        ImageOutcome::Skip { message, .. } | ImageOutcome::Error { message, .. } => message,
        ImageOutcome::UpToDate { .. } | ImageOutcome::Update { .. } => "",
    }
}

/// The reason of a skip or error, or `None` for UpToDate and Update.
pub fn reason(outcome: &ImageOutcome) -> Option<Reason> {
    match outcome {
        ImageOutcome::Skip { reason, .. } | ImageOutcome::Error { reason, .. } => Some(*reason),
        ImageOutcome::UpToDate { .. } | ImageOutcome::Update { .. } => None,
    }
}

/// An update of the one field at `pointer` from `from` to `to`, the image being that field.
pub fn single_update(pointer: &str, from: &str, to: &str) -> ImageOutcome {
    ImageOutcome::Update {
        current: json!(from),
        target: json!(to),
        changes: Changes::Whole(pointer.to_string().into()),
    }
}

/// The image an update moves to, or a panic naming the outcome.
pub fn target(outcome: &ImageOutcome) -> &Value {
    match outcome {
        ImageOutcome::Update { target, .. } => target,
        other => panic!("expected an update, got {other:?}"),
    }
}

/// The pointers an update changes, or a panic naming the outcome.
pub fn changed_pointers(outcome: &ImageOutcome) -> Vec<&str> {
    let ImageOutcome::Update {
        current,
        target,
        changes,
    } = outcome
    else {
        panic!("expected an update, got {outcome:?}");
    };
    changes
        .iter(&Value::Null, current, target)
        .map(|c| c.0)
        .collect()
}

/// A rule's outcome without the look-up it asks for, for tests that only read the outcome.
pub trait Outcome {
    fn outcome(&self, spec: &Value, ctx: &RuleContext<'_>) -> ImageOutcome;
}

impl<R: crate::platform::PlatformRule + ?Sized> Outcome for R {
    fn outcome(&self, spec: &Value, ctx: &RuleContext<'_>) -> ImageOutcome {
        self.evaluate(spec, ctx).0
    }
}
