//! Platforms: everything that differs between clouds lives behind [`PlatformRule`].
//!
//! Each platform lives in its own file and reads the same: resolve the target from the stream,
//! compare with the current value, decide; then where its image lives (for `revert`) and how a
//! person reads it. Rules are pure: no I/O, no logging, no status. They return a meaning
//! ([`ImageOutcome`]); the planner turns it into a JSON Patch. Adding a platform is one file, a
//! [`Platform`] variant and its arms here (docs/architecture.md, "Adding things", lists them).

mod aws;
mod azure;
mod gcp;
pub mod vsphere;

use serde_json::{Map, Value};
use std::borrow::Cow;

use crate::arch::Arch;
use crate::facts::Lookup;
use crate::golden_stream::GoldenStream;
use crate::known_images::KnownImages;
use crate::reason::Reason;

/// The cloud a cluster runs on, from `Infrastructure.status.platformStatus.type`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Platform {
    Aws,
    Gcp,
    Azure,
    /// Azure Stack Hub: Azure's API on premises, without the marketplace images.
    AzureStackHub,
    VSphere,
    /// Any other platform; boot images there are not managed automatically.
    Other(String),
}

/// Every platform's rule (those [`Platform::rule`] gives), for the questions about a provider
/// spec whose platform is not known.
const RULES: [&dyn PlatformRule; 4] = [&aws::Aws, &gcp::Gcp, &azure::Azure, &vsphere::VSphere];

impl Platform {
    /// The platform an Infrastructure's `status.platformStatus` describes.
    pub fn from_status(status: &crate::api::PlatformStatus) -> Self {
        let cloud = status.azure.as_ref().and_then(|a| a.cloud_name.as_deref());
        match (status.type_.as_str(), cloud) {
            // The installer's name for Azure Stack Hub (openshift/api AzureCloudEnvironment).
            ("Azure", Some("AzureStackCloud")) => Platform::AzureStackHub,
            ("AWS", _) => Platform::Aws,
            ("GCP", _) => Platform::Gcp,
            ("Azure", _) => Platform::Azure,
            ("VSphere", _) => Platform::VSphere,
            (other, _) => Platform::Other(other.to_string()),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Platform::Aws => "AWS",
            Platform::Gcp => "GCP",
            Platform::Azure => "Azure",
            Platform::AzureStackHub => "AzureStackHub",
            Platform::VSphere => "VSphere",
            Platform::Other(name) => name,
        }
    }

    /// Whether the Machine Config Operator has boot image management here on some release
    /// (`CheckBootImagePlatform`, pkg/controller/common/featuregates.go: AWS, GCP, vSphere and
    /// Azure except Azure Stack Hub), and so publishes an effective selection.
    pub fn managed_by_default(&self) -> bool {
        matches!(
            self,
            Platform::Aws | Platform::Gcp | Platform::Azure | Platform::VSphere
        )
    }

    /// Whether the Machine Config Operator of `release` (major, minor) opts MachineSets in when
    /// nobody declared a selection, read at its source per release:
    /// - before 4.19 it enrolls only what `spec.managedBootImages` names (4.16 to 4.18 have no
    ///   default at all);
    /// - 4.19 and 4.20: AWS and GCP (`isDefaultOnBootImageUpdatePlatform`, pkg/operator/sync.go);
    /// - 4.21: AWS and GCP; vSphere and Azure opt-in (`enabledByDefault` of
    ///   `CheckBootImagePlatform`, pkg/controller/common/featuregates.go);
    /// - 4.22: AWS, GCP, vSphere and Azure (same function, release-4.22).
    ///
    /// An unknown release (no ClusterVersion) is treated as opt-in: nothing is written that the
    /// administrator did not ask for.
    pub fn mco_opts_in_by_default(&self, release: Option<(u64, u64)>) -> bool {
        let Some(release) = release else {
            return false;
        };
        match self {
            Platform::Aws | Platform::Gcp => release >= (4, 19),
            Platform::Azure | Platform::VSphere => release >= (4, 22),
            Platform::AzureStackHub | Platform::Other(_) => false,
        }
    }

    /// Whether the Machine Config Operator updates ControlPlaneMachineSets here at all
    /// (`cpmsSupported` of `CheckBootImagePlatform`, pkg/controller/common/featuregates.go: AWS,
    /// GCP and Azure, not vSphere); elsewhere the effective configuration names only MachineSets.
    pub fn control_plane_boot_images_supported(&self) -> bool {
        matches!(self, Platform::Aws | Platform::Gcp | Platform::Azure)
    }

    /// The rule that updates boot images on this platform, if we have one.
    pub fn rule(&self) -> Option<&'static dyn PlatformRule> {
        match self {
            Platform::Aws => Some(&aws::Aws),
            Platform::Gcp => Some(&gcp::Gcp),
            Platform::Azure => Some(&azure::Azure),
            Platform::VSphere => Some(&vsphere::VSphere),
            Platform::AzureStackHub | Platform::Other(_) => None,
        }
    }

    /// Why a platform without a rule is left alone.
    pub fn unsupported_message(&self) -> String {
        match self {
            Platform::AzureStackHub => "Azure Stack Hub boot images are uploaded at install time \
                                        and no marketplace image exists there, so they are not \
                                        updated automatically"
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
    /// What EC2 said about the AMIs of the snapshot (AWS only; empty elsewhere).
    pub ec2: &'a crate::facts::ec2::Ec2Facts,
    /// `Infrastructure.spec.platformSpec`: vSphere's failure domains say where templates live.
    pub platform_spec: Option<&'a Value>,
    /// What vCenter said about the templates vSphere rules want (vSphere only; empty elsewhere).
    pub vcenter: &'a crate::facts::vcenter::VcenterFacts,
}

/// A JSON Pointer relative to `providerSpec.value`, e.g. `/ami/id`. Most are constants and
/// borrowed as such; GCP's name a disk by its index.
pub type Pointer = Cow<'static, str>;

/// Where an update writes its target image in the provider spec.
#[derive(Clone, Debug, PartialEq)]
pub enum Changes {
    /// The image is one value, at this pointer, which goes from the outcome's `current` to its
    /// `target` (an AMI ID, an Azure image object, a vSphere template): nothing is copied for
    /// the patch, which reads both.
    Whole(Pointer),
    /// Values each replaced by the outcome's `target`, from its own current value in the
    /// provider spec (GCP's boot disks).
    Each(Vec<Pointer>),
}

impl Changes {
    /// Every value replaced, as `(pointer, from, to)`, given the provider spec the outcome was
    /// judged on and the outcome's `current` and `target`.
    pub fn iter<'a>(
        &'a self,
        spec: &'a Value,
        current: &'a Value,
        target: &'a Value,
    ) -> impl Iterator<Item = (&'a str, &'a Value, &'a Value)> {
        let (whole, each): (Option<(&str, _, _)>, &[Pointer]) = match self {
            Changes::Whole(pointer) => (Some((pointer, current, target)), &[]),
            Changes::Each(pointers) => (None, pointers),
        };
        let from = |pointer: &'a str| spec.pointer(pointer).unwrap_or(&Value::Null);
        let each = each.iter().map(move |p| (&**p, from(p), target));
        whole.into_iter().chain(each)
    }
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
        changes: Changes,
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

impl ImageOutcome {
    /// The image the provider spec holds, when the rule could read one.
    pub fn current(&self) -> Option<&Value> {
        match self {
            ImageOutcome::UpToDate { current } | ImageOutcome::Update { current, .. } => {
                Some(current)
            }
            ImageOutcome::Skip { current, .. } | ImageOutcome::Error { current, .. } => {
                current.as_ref()
            }
        }
    }

    /// The image an update moves to.
    pub fn target(&self) -> Option<&Value> {
        match self {
            ImageOutcome::Update { target, .. } => Some(target),
            _ => None,
        }
    }
}

/// Everything the rest of the controller needs to know about one platform.
pub trait PlatformRule: Sync {
    /// The platform's key in a CoreOS stream (`architectures.<arch>.artifacts.<key>`), which is
    /// not always its name in the Infrastructure (vSphere's is `vmware`).
    fn stream_key(&self) -> &'static str;

    /// What the boot image of `provider_spec` should be, and the question to a cloud that
    /// outcome rests on (AWS: the owner of an AMI no list names; vSphere: the golden template):
    /// whatever the outcome, so that the look-ups also refresh an answer or retry a failure the
    /// decision read.
    fn evaluate(
        &self,
        provider_spec: &Value,
        ctx: &RuleContext<'_>,
    ) -> (ImageOutcome, Option<Lookup>);

    /// The RHCOS release `image` (an image [`evaluate`] returned for `provider_spec`) boots,
    /// where the image itself says so. The skew status records it instead of the golden
    /// release: the Machine Config Operator does so for AWS Marketplace AMIs only, whose RHCOS
    /// release may lag the golden one (`updateClusterBootImage`,
    /// pkg/controller/bootimage/boot_image_controller.go). By default, none.
    ///
    /// [`evaluate`]: PlatformRule::evaluate
    fn rhcos_release(
        &self,
        _provider_spec: &Value,
        _image: &Value,
        _ctx: &RuleContext<'_>,
    ) -> Option<String> {
        None
    }

    /// Where this platform keeps the boot image in `provider_spec`, as JSON Pointers relative to
    /// it with their current values, for putting back `written` (a value [`evaluate`] once
    /// targeted). `None` when the provider spec is not of this platform.
    ///
    /// [`evaluate`]: PlatformRule::evaluate
    fn image_locations(
        &self,
        provider_spec: &Value,
        written: &Value,
    ) -> Option<Vec<(String, Value)>>;

    /// A boot image of this platform as people write it; `None` when `image` is not one of this
    /// platform's structured images (plain strings need no help): by default, none has any.
    fn display(&self, _image: &Value) -> Option<String> {
        None
    }

    /// The values of `provider_spec` besides the image that chose the target (a region, a boot
    /// flag, a security profile). The planner tests them in its patch, so that an edit between
    /// plan and patch fails the patch instead of applying an image chosen for other inputs.
    fn decision_inputs(&self, provider_spec: &Value) -> Vec<Input>;

    /// The top-level fields of a provider spec that [`evaluate`], [`image_locations`] and
    /// [`decision_inputs`] read. The watch keeps only these (and the stub secret's) of each
    /// object, which is most of the memory a MachineSet costs; a test checks that planning the
    /// slimmed object decides exactly what planning the whole one does.
    ///
    /// [`evaluate`]: PlatformRule::evaluate
    /// [`image_locations`]: PlatformRule::image_locations
    /// [`decision_inputs`]: PlatformRule::decision_inputs
    fn provider_spec_fields(&self) -> &'static [&'static str];

    /// Drops what the rule does not read inside its own [`provider_spec_fields`] (by default,
    /// nothing), under the same test.
    ///
    /// [`provider_spec_fields`]: PlatformRule::provider_spec_fields
    fn keep_only_what_it_reads(&self, _spec: &mut Map<String, Value>) {}
}

/// Every rule's [`PlatformRule::keep_only_what_it_reads`], for a provider spec of a platform
/// not known yet: a rule only trims inside the fields that it alone reads.
pub fn keep_only_what_the_rules_read(spec: &mut Map<String, Value>) {
    for rule in RULES {
        rule.keep_only_what_it_reads(spec);
    }
}

/// A value a decision depended on, at a JSON Pointer relative to the provider spec; `None` when
/// the field was absent (JSON Patch cannot test absence: the planner then guards on the object's
/// resourceVersion).
#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    pub pointer: Pointer,
    pub value: Option<Value>,
}

impl Input {
    pub fn at(provider_spec: &Value, pointer: impl Into<Pointer>) -> Self {
        let pointer = pointer.into();
        // `jsonptr` unescapes a token only when it must; `Value::pointer` allocates for each.
        let value = (jsonptr::Pointer::parse(pointer.as_ref()).ok())
            .and_then(|p| p.resolve(provider_spec).ok())
            .cloned();
        Input { pointer, value }
    }
}

/// Where the boot image lives in a provider spec, asking each platform in turn: `revert` reads
/// objects without knowing the cluster's platform.
pub fn image_locations(provider_spec: &Value, written: &Value) -> Option<Vec<(String, Value)>> {
    (RULES.iter()).find_map(|rule| rule.image_locations(provider_spec, written))
}

/// Whether any platform's rule reads the top-level provider-spec field `field`.
pub fn read_by_a_rule(field: &str) -> bool {
    (RULES.iter()).any(|rule| rule.provider_spec_fields().contains(&field))
}

/// A boot image as a person reads it: the id, the path, or an Azure URN.
pub fn display_image(image: Option<&Value>) -> String {
    match image {
        None | Some(Value::Null) => "-".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => (RULES.iter())
            .find_map(|rule| rule.display(other))
            .unwrap_or_else(|| other.to_string()),
    }
}

/// Compares a current value with the target and builds the outcome for an image that is one
/// string at one place (AWS `ami.id`). The target is copied only for an update.
fn compare_single(current: &Value, target: &str, pointer: Pointer) -> ImageOutcome {
    if current.as_str() == Some(target) {
        return ImageOutcome::UpToDate {
            current: current.clone(),
        };
    }
    ImageOutcome::Update {
        current: current.clone(),
        target: Value::String(target.to_string()),
        changes: Changes::Whole(pointer),
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

/// A skip that leaves `current` as it is.
fn skip(reason: Reason, message: String, current: &Value) -> ImageOutcome {
    ImageOutcome::Skip {
        reason,
        message,
        current: Some(current.clone()),
    }
}

fn invalid(message: impl Into<String>, current: Option<Value>) -> ImageOutcome {
    ImageOutcome::Error {
        reason: Reason::InvalidProviderSpec,
        message: message.into(),
        current,
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::rules::Outcome;
    use serde_json::{Value, json};

    use super::*;
    use crate::testkit::rules::Cluster;
    use crate::testkit::streams::stream_421_all_platforms as stream_4_21;

    /// Every platform with a rule; each must answer every question of [`PlatformRule`].
    const WITH_RULES: [Platform; 4] = [
        Platform::Aws,
        Platform::Gcp,
        Platform::Azure,
        Platform::VSphere,
    ];

    #[test]
    fn the_rules_asked_of_any_provider_spec_are_those_of_the_platforms_with_rules() {
        let keys = |rules: Vec<&dyn PlatformRule>| {
            rules.iter().map(|r| r.stream_key()).collect::<Vec<_>>()
        };
        let of_platforms = WITH_RULES.iter().filter_map(Platform::rule).collect();
        assert_eq!(keys(of_platforms), keys(RULES.to_vec()));
        let others = [Platform::AzureStackHub, Platform::Other("BareMetal".into())];
        assert!(others.iter().all(|p| p.rule().is_none()));
    }

    /// A provider spec of `platform` on an older image than the compact 4.21 stream's.
    fn outdated_spec(platform: &Platform) -> Value {
        match platform {
            Platform::Aws => json!({
                "ami": {"id": "ami-09d23adad19cdb25c"},
                "placement": {"region": "us-east-1"}
            }),
            Platform::Gcp => json!({"disks": [{
                "boot": true,
                "image": "projects/rhcos-cloud/global/images/rhcos-9-6-20250826-1-gcp-x86-64"
            }]}),
            Platform::Azure => json!({"image": {
                "publisher": "azureopenshift", "offer": "aro4", "sku": "420-v2",
                "version": "9.6.20250101", "resourceID": "", "type": "MarketplaceNoPlan"
            }}),
            Platform::VSphere => crate::testkit::provider_specs::vsphere(&format!(
                "{}-rhcos",
                crate::testkit::provider_specs::INFRASTRUCTURE_NAME
            )),
            other => panic!("no sample provider spec for {other:?}"),
        }
    }

    #[test]
    fn every_platform_with_a_rule_answers_every_question() {
        // vCenter already has the template of the release in the kit's failure domain.
        let infra = crate::testkit::provider_specs::INFRASTRUCTURE_NAME;
        let mut vcenter = crate::facts::vcenter::VcenterFacts::default();
        let template = vsphere::template_name(
            infra,
            crate::testkit::provider_specs::VSPHERE_FAILURE_DOMAIN,
            crate::testkit::streams::VMWARE_RELEASE_421,
        );
        let key = crate::facts::vcenter::TemplateKey {
            server: crate::testkit::provider_specs::VSPHERE_SERVER.into(),
            datacenter: "dc1".into(),
            name: template,
        };
        // The sample's template is of an earlier release.
        let installer = crate::facts::vcenter::TemplateKey {
            name: format!("{infra}-rhcos"),
            ..key.clone()
        };
        vcenter
            .templates
            .insert(key, crate::facts::vcenter::TemplateState::Ready);
        let earlier = crate::facts::vcenter::TemplateVersion::Release("9.6.20250826-1".into());
        vcenter.versions.insert(installer, earlier);
        let cluster = Cluster::new(stream_4_21())
            .knowing(&["ami-09d23adad19cdb25c"])
            .named(infra)
            .on_vsphere()
            .with_vcenter(vcenter);
        let ctx = cluster.ctx(Arch::Amd64);
        for platform in WITH_RULES {
            let rule = platform
                .rule()
                .expect("WITH_RULES lists platforms with a rule");
            let status = crate::api::PlatformStatus {
                type_: platform.name().into(),
                ..Default::default()
            };
            assert_eq!(Platform::from_status(&status), platform);
            let mut spec = outdated_spec(&platform);
            let ImageOutcome::Update {
                current,
                target,
                changes,
            } = rule.outcome(&spec, &ctx)
            else {
                panic!("{platform:?}: the outdated sample is not updated");
            };
            let changed: Vec<String> = (changes.iter(&spec, &current, &target))
                .map(|c| c.0.to_string())
                .collect();
            for pointer in &changed {
                *spec.pointer_mut(pointer).unwrap() = target.clone();
            }
            assert!(
                matches!(rule.outcome(&spec, &ctx), ImageOutcome::UpToDate { .. }),
                "{platform:?}"
            );
            let located = rule
                .image_locations(&spec, &target)
                .expect("the image is found");
            let pointers: Vec<&str> = located.iter().map(|(p, _)| p.as_str()).collect();
            assert_eq!(pointers, changed, "{platform:?}");
            assert!(located.iter().all(|(_, v)| *v == target), "{platform:?}");
            let shown = display_image(Some(&target));
            assert!(
                !shown.starts_with('{') && !shown.is_empty(),
                "{platform:?}: {shown}"
            );
            // Only the owner of a provider spec recognises it.
            for other in WITH_RULES.iter().filter(|p| **p != platform) {
                let other_rule = other.rule().unwrap();
                assert_eq!(
                    other_rule.image_locations(&outdated_spec(&platform), &target),
                    None,
                    "{other:?} claims a {platform:?} provider spec"
                );
            }
            // The watch keeps only the fields the rule says it reads: they are enough.
            let outdated = outdated_spec(&platform);
            let kept: serde_json::Map<String, Value> = (outdated.as_object().unwrap().iter())
                .filter(|(field, _)| rule.provider_spec_fields().contains(&field.as_str()))
                .map(|(field, value)| (field.clone(), value.clone()))
                .collect();
            assert_eq!(
                rule.outcome(&Value::Object(kept), &ctx),
                rule.outcome(&outdated, &ctx),
                "{platform:?}"
            );
        }
    }
}
