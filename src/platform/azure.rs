//! Azure: marketplace images at `image`, and migration of legacy installer uploads (a
//! `resourceID` named after the cluster) to the free marketplace image.
//!
//! The marketplace variant (free `no-purchase-plan`, or a paid `ocp`/`opp`/`oke` offer, with or
//! without `-emea`) is a billing choice made at install time, so an image keeps its variant and
//! only moves to the variant's newest image. Only installer uploads, which predate marketplace
//! images, are moved to the free variant.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{BootImageRule, FieldChange, ImageOutcome, RuleContext, invalid};
use crate::arch::Arch;
use crate::reason::Reason;
use crate::stream::AzureMarketplaceImage;

/// The variant installer uploads migrate to: the only one that carries no purchase plan, so
/// moving to it cannot start charging anyone.
const NO_PURCHASE_PLAN: &str = "no-purchase-plan";
const GEN1: &str = "hyperVGen1";
const GEN2: &str = "hyperVGen2";

/// Marketplace images of one arch: variant -> Hyper-V generation -> image.
type Variants = BTreeMap<String, BTreeMap<String, AzureMarketplaceImage>>;

pub(super) struct Azure;

impl BootImageRule for Azure {
    fn evaluate(&self, spec: &Value, ctx: &RuleContext<'_>) -> ImageOutcome {
        let image = spec.get("image");
        if let Some(security_type) = spec
            .pointer("/securityProfile/settings/securityType")
            .filter(|t| !t.is_null() && t.as_str() != Some(""))
        {
            return ImageOutcome::Skip {
                reason: Reason::SecurityTypeUnsupported,
                message: format!(
                    "securityType {security_type} (trusted launch or confidential VMs) needs a \
                     security-enabled image, and the golden stream publishes none; update this \
                     boot image by hand"
                ),
                current: image.cloned(),
            };
        }
        if matches!(ctx.arch, Arch::Ppc64le | Arch::S390x) {
            return ImageOutcome::Skip {
                reason: Reason::ArchitectureNotSupported,
                message: format!(
                    "Azure has no {} virtual machines, so there is no boot image to manage; check \
                     the architecture in the MachineSet's capacity annotation",
                    ctx.arch
                ),
                current: image.cloned(),
            };
        }
        let Some(image) = image.and_then(Value::as_object) else {
            return invalid(
                "providerSpec has no image object; set image to a marketplace image \
                 (publisher, offer, sku, version) or a resourceID",
                image.cloned(),
            );
        };
        let current = Value::Object(image.clone());
        let Some(variants) = ctx.stream.azure_marketplace(ctx.arch) else {
            let reason = if ctx.stream.has_arch(ctx.arch) {
                Reason::ImageNotInStream
            } else {
                Reason::ArchitectureNotInStream
            };
            return ImageOutcome::Error {
                reason,
                message: format!(
                    "the golden stream {} publishes no Azure marketplace images for {}; the \
                     coreos-bootimages ConfigMap should carry them (rhel-coreos-extensions.\
                     marketplace.azure), check the release's Machine Config Operator",
                    ctx.stream.stream, ctx.arch
                ),
                current: Some(current),
            };
        };
        let fields = match ImageFields::read(image) {
            Ok(fields) => fields,
            Err(message) => return invalid(message, Some(current)),
        };

        let (variant, generation) = if !fields.resource_id.is_empty() {
            match installer_upload_generation(fields.resource_id, ctx.infrastructure_name) {
                Ok(generation) => (NO_PURCHASE_PLAN, generation),
                Err(message) => return custom(message, current),
            }
        } else if !fields.publisher.is_empty() && !fields.offer.is_empty() {
            let Some((variant, generations)) = find_variant(variants, &fields) else {
                return custom(
                    format!(
                        "marketplace image {}:{}:{}:{} is not from a publisher and offer the \
                         golden stream publishes; custom images are never replaced (switch the \
                         MachineSet to a published image to have it managed)",
                        fields.publisher, fields.offer, fields.sku, fields.version
                    ),
                    current,
                );
            };
            (variant, choose_generation(generations, fields.sku))
        } else {
            return invalid(
                "image has neither a resourceID nor a marketplace publisher and offer; set one \
                 of them",
                Some(current),
            );
        };

        let Some(golden) = variants.get(variant).and_then(|g| g.get(generation)) else {
            return ImageOutcome::Error {
                reason: Reason::ImageNotInStream,
                message: format!(
                    "the golden stream {} publishes no {generation} image of the Azure \
                     marketplace variant {variant} for {}; the boot image is left as is until \
                     the stream carries one",
                    ctx.stream.stream, ctx.arch
                ),
                current: Some(current),
            };
        };
        let target = Value::Object(target_image(image, golden, variant));
        if target == current {
            return ImageOutcome::UpToDate { current };
        }
        ImageOutcome::Update {
            changes: vec![FieldChange {
                // One change for the whole object: publisher, offer, sku, version and type only
                // make sense together, and the planner's `test` on the whole object makes any
                // concurrent edit of one of them fail the patch instead of producing a mix.
                pointer: "/image".into(),
                from: current.clone(),
                to: target.clone(),
            }],
            current,
            target,
        }
    }
}

/// The string fields of `image` we read; an absent or `null` field reads as empty.
struct ImageFields<'a> {
    publisher: &'a str,
    offer: &'a str,
    sku: &'a str,
    version: &'a str,
    resource_id: &'a str,
}

impl<'a> ImageFields<'a> {
    fn read(image: &'a Map<String, Value>) -> Result<Self, String> {
        let field = |key: &str| match image.get(key) {
            None | Some(Value::Null) => Ok(""),
            Some(Value::String(s)) => Ok(s.as_str()),
            Some(other) => Err(format!(
                "image.{key} is {other}, not a string; fix the MachineSet"
            )),
        };
        Ok(ImageFields {
            publisher: field("publisher")?,
            offer: field("offer")?,
            sku: field("sku")?,
            version: field("version")?,
            resource_id: field("resourceID")?,
        })
    }
}

/// The variant whose images have the current publisher and offer.
///
/// Publisher and offer identify a variant in real streams (the `-emea` variants use the
/// `redhat-limited` publisher); should two variants ever share them, the one that also lists the
/// current sku wins, so an image never changes billing variant on a tie.
fn find_variant<'v>(
    variants: &'v Variants,
    current: &ImageFields<'_>,
) -> Option<(&'v str, &'v BTreeMap<String, AzureMarketplaceImage>)> {
    let same_offer = |image: &AzureMarketplaceImage| {
        image.publisher.eq_ignore_ascii_case(current.publisher)
            && image.offer.eq_ignore_ascii_case(current.offer)
    };
    let candidates: Vec<_> = variants
        .iter()
        .filter(|(_, generations)| generations.values().any(same_offer))
        .collect();
    candidates
        .iter()
        .find(|(_, generations)| {
            generations
                .values()
                .any(|image| same_offer(image) && image.sku.eq_ignore_ascii_case(current.sku))
        })
        .or(candidates.first())
        .map(|(name, generations)| (name.as_str(), *generations))
}

/// The Hyper-V generation of the current image, judged by its sku within its variant.
///
/// A VM size supports one generation or both, so guessing wrong can make new machines fail to
/// start; hence the evidence is weighed from strongest to weakest:
/// 1. the sku equals one generation's sku (a current or recent image);
/// 2. the sku has the shape of one generation's sku once digits are ignored: ARO skus embed the
///    release (`aro_419` -> `aro_420` for Gen1, `419-v2` -> `420-v2` for Gen2);
/// 3. otherwise Gen2, unless the sku says `gen1`: Gen2 is what the installer picks for every VM
///    size that supports it, and paid Gen1 skus end in `-gen1`.
fn choose_generation(
    generations: &BTreeMap<String, AzureMarketplaceImage>,
    sku: &str,
) -> &'static str {
    let sku_of = |generation: &str| generations.get(generation).map(|image| image.sku.as_str());
    let unique_match = |matches: &dyn Fn(&str) -> bool| {
        let gen1 = sku_of(GEN1).is_some_and(matches);
        let gen2 = sku_of(GEN2).is_some_and(matches);
        match (gen1, gen2) {
            (true, false) => Some(GEN1),
            (false, true) => Some(GEN2),
            _ => None,
        }
    };
    unique_match(&|golden| golden.eq_ignore_ascii_case(sku))
        .or_else(|| unique_match(&|golden| sku_shape(golden) == sku_shape(sku)))
        .unwrap_or(if sku.to_ascii_lowercase().contains("gen1") {
            GEN1
        } else {
            GEN2
        })
}

/// The sku with every run of digits replaced by `#` and letters lowercased, so skus of different
/// releases of the same generation compare equal.
fn sku_shape(sku: &str) -> String {
    let mut shape = String::with_capacity(sku.len());
    for c in sku.chars() {
        if !c.is_ascii_digit() {
            shape.push(c.to_ascii_lowercase());
        } else if !shape.ends_with('#') {
            shape.push('#');
        }
    }
    shape
}

/// The Hyper-V generation of an installer-uploaded image, or why `resource_id` is not one.
///
/// Before marketplace images, the installer uploaded the boot image into the cluster's own
/// resource group (`<infra>-rg`), as a managed image `images/<infra>` or, later, into the gallery
/// `gallery_<infra with _ for ->` with image definitions `<infra>` (Gen1) and `<infra>-gen2`.
/// Anything else is an image an administrator chose. Azure resource names are case-insensitive,
/// and the segment keys are compared the same way since tools differ in their casing.
fn installer_upload_generation(
    resource_id: &str,
    infrastructure_name: Option<&str>,
) -> Result<&'static str, String> {
    let Some(infra) = infrastructure_name.filter(|name| !name.is_empty()) else {
        return Err(format!(
            "image resourceID {resource_id} cannot be recognised as an installer upload because \
             the cluster's infrastructure name is unknown; it is treated as a custom image and \
             never replaced"
        ));
    };
    let not_ours = || {
        format!(
            "image resourceID {resource_id} is not an installer upload of cluster {infra} (not \
             the image {infra} or {infra}-gen2 in resource group {infra}-rg or gallery \
             gallery_{}); custom images are never replaced",
            infra.replace('-', "_")
        )
    };
    let segments: Vec<&str> = resource_id.split('/').filter(|s| !s.is_empty()).collect();
    let is = |segment: &str, key: &str| segment.eq_ignore_ascii_case(key);
    // MachineSets usually omit the `/subscriptions/<id>` prefix.
    let rest = match segments.as_slice() {
        [sub, _, rest @ ..] if is(sub, "subscriptions") => rest,
        rest => rest,
    };
    let [rg_key, resource_group, providers, namespace, resource @ ..] = rest else {
        return Err(not_ours());
    };
    if !is(rg_key, "resourceGroups")
        || !is(providers, "providers")
        || !is(namespace, "Microsoft.Compute")
    {
        return Err(not_ours());
    }
    let in_cluster_group = is(resource_group, &format!("{infra}-rg"));
    let in_cluster_gallery =
        |gallery: &str| is(gallery, &format!("gallery_{}", infra.replace('-', "_")));
    let name = match resource {
        [images, name] if is(images, "images") && in_cluster_group => name,
        [galleries, gallery, images, name, version @ ..]
            if is(galleries, "galleries")
                && is(images, "images")
                && matches!(version, [] | [_, _])
                && version.first().is_none_or(|key| is(key, "versions"))
                && (in_cluster_group || in_cluster_gallery(gallery)) =>
        {
            name
        }
        _ => return Err(not_ours()),
    };
    if is(name, infra) {
        Ok(GEN1)
    } else if is(name, &format!("{infra}-gen2")) {
        Ok(GEN2)
    } else {
        Err(not_ours())
    }
}

/// The current image object pointed at `golden`, keeping any keys we do not manage.
fn target_image(
    current: &Map<String, Value>,
    golden: &AzureMarketplaceImage,
    variant: &str,
) -> Map<String, Value> {
    let mut target = current.clone();
    for (key, value) in [
        ("publisher", &golden.publisher),
        ("offer", &golden.offer),
        ("sku", &golden.sku),
        ("version", &golden.version),
    ] {
        target.insert(key.into(), Value::String(value.clone()));
    }
    // The Azure machine controller uses resourceID whenever it is non-empty, so it must be
    // cleared for the marketplace fields to take effect; an absent one stays absent.
    if target.contains_key("resourceID") {
        target.insert("resourceID".into(), Value::String(String::new()));
    }
    // Paid images only boot with their purchase plan attached, which the machine controller
    // does only for MarketplaceWithPlan.
    let image_type = if variant == NO_PURCHASE_PLAN {
        "MarketplaceNoPlan"
    } else {
        "MarketplaceWithPlan"
    };
    target.insert("type".into(), Value::String(image_type.into()));
    target
}

fn custom(message: String, current: Value) -> ImageOutcome {
    ImageOutcome::Skip {
        reason: Reason::CustomImage,
        message,
        current: Some(current),
    }
}
