//! Azure: marketplace images at `image`, and migration of legacy installer uploads (a
//! `resourceID` named after the cluster) to the free marketplace image.
//!
//! The marketplace variant (free `no-purchase-plan`, or a paid `ocp`/`opp`/`oke` offer, with or
//! without `-emea`) is a billing choice made at install time, so an image keeps its variant and
//! only moves to the variant's newest image. Only installer uploads, which predate marketplace
//! images, are moved to the free variant.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{
    Changes, ImageOutcome, Input, PlatformRule, RuleContext, invalid, not_in_stream, skip,
};
use crate::arch::Arch;
use crate::facts::Lookup;
use crate::golden_stream::AzureMarketplaceImage;
use crate::reason::Reason;

/// The variant installer uploads migrate to: the only one that carries no purchase plan, so
/// moving to it cannot start charging anyone.
const NO_PURCHASE_PLAN: &str = "no-purchase-plan";
const GEN1: &str = "hyperVGen1";
const GEN2: &str = "hyperVGen2";

/// Marketplace images of one arch: variant -> Hyper-V generation -> image.
type Variants = BTreeMap<String, BTreeMap<String, AzureMarketplaceImage>>;

pub(super) struct Azure;

/// Relative to the provider spec: the whole image object is one change.
const IMAGE: &str = "/image";

impl PlatformRule for Azure {
    fn stream_key(&self) -> &'static str {
        "azure"
    }

    fn image_locations(&self, spec: &Value, _written: &Value) -> Option<Vec<(String, Value)>> {
        let current = spec.get("image")?.clone();
        Some(vec![(IMAGE.into(), current)])
    }

    /// The resourceID of an upload, else the marketplace URN `publisher:offer:sku:version`.
    fn display(&self, image: &Value) -> Option<String> {
        let o = image.as_object()?;
        let field = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or_default();
        if o.get("publisher").is_none() && o.get("resourceID").is_none() {
            return None;
        }
        Some(if field("resourceID").is_empty() {
            ["publisher", "offer", "sku", "version"]
                .map(field)
                .join(":")
        } else {
            field("resourceID").to_string()
        })
    }

    fn provider_spec_fields(&self) -> &'static [&'static str] {
        &["image", "securityProfile"]
    }

    /// Trusted launch and confidential VMs need other images: the security profile decides.
    fn decision_inputs(&self, spec: &Value) -> Vec<Input> {
        vec![Input::at(spec, "/securityProfile")]
    }

    fn evaluate(&self, spec: &Value, ctx: &RuleContext<'_>) -> (ImageOutcome, Option<Lookup>) {
        (outcome(spec, ctx), None)
    }
}

/// What the boot image of `spec` should be; Azure asks no cloud.
fn outcome(spec: &Value, ctx: &RuleContext<'_>) -> ImageOutcome {
    let image = spec.get("image");
    if let Some(skip) = unsupported_machine(spec, ctx) {
        return skip;
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
        if !Arch::ALL
            .iter()
            .any(|a| ctx.stream.azure_marketplace(*a).is_some())
        {
            // OKD and other streams publish no marketplace images at all: nothing is wrong
            // with the MachineSet, and there is nothing to move it to. The Machine Config
            // Operator skips these too (`reconcileAzureProviderSpec`,
            // pkg/controller/bootimage/platform_helpers.go).
            return ImageOutcome::Skip {
                reason: Reason::MarketplaceImagesNotPublished,
                message: format!(
                    "the golden stream {} publishes no Azure marketplace images for any \
                     architecture, so Azure boot images are left as they are",
                    ctx.stream.stream
                ),
                current: Some(current),
            };
        }
        return not_in_stream(
            ctx,
            "Azure marketplace images (rhel-coreos-extensions.marketplace.azure in the \
             coreos-bootimages ConfigMap)",
            "Azure boot images stay as they are until the release ships them",
            Some(current),
        );
    };
    let fields = match ImageFields::read(image) {
        Ok(fields) => fields,
        Err(message) => return invalid(message, Some(current)),
    };
    let (variant, generation) = match golden_variant(&fields, variants, ctx, &current) {
        Ok(found) => found,
        Err(outcome) => return *outcome,
    };
    let Some(golden) = variants.get(variant).and_then(|g| g.get(generation)) else {
        return generation_not_published(ctx, variant, generation, current);
    };
    let Some(target) = target_image(image, golden, variant) else {
        return ImageOutcome::UpToDate { current };
    };
    let target = Value::Object(target);
    ImageOutcome::Update {
        current,
        target,
        // One change for the whole object: publisher, offer, sku, version and type only
        // make sense together, and the planner's `test` on the whole object makes any
        // concurrent edit of one of them fail the patch instead of producing a mix.
        changes: Changes::Whole(IMAGE.into()),
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
    let candidates =
        || (variants.iter()).filter(|(_, generations)| generations.values().any(same_offer));
    let same_sku = |image: &AzureMarketplaceImage| {
        same_offer(image) && image.sku.eq_ignore_ascii_case(current.sku)
    };
    candidates()
        .find(|(_, generations)| generations.values().any(same_sku))
        .or_else(|| candidates().next())
        .map(|(name, generations)| (name.as_str(), generations))
}

/// The Hyper-V generation of a marketplace image, as the Machine Config Operator decides it
/// (`reconcileAzureProviderSpec`, pkg/controller/bootimage/platform_helpers.go, with the `gen2`
/// skus of MCO PR 6404, commit e308231cc): a free image is Gen2 when its sku says `v2` (`420-v2`)
/// or `gen2` (`aro_5-0_x64_gen2`, the skus of the RHEL 10 streams) or the machine is arm64 (arm64
/// VMs are Gen2 only), else Gen1 (`aro_420`); a paid image is Gen2 unless its sku says `gen1`
/// (`rh-ocp-worker-gen1`). Upstream tells free from paid by the image's `type`; we tell them by
/// the variant whose publisher and offer the image has, which agrees for every image the
/// installer writes and needs no `type` (older MachineSets have none). Skus are compared without
/// case, as Azure compares them.
fn choose_generation(variant: &str, sku: &str, arch: Arch) -> &'static str {
    let sku = sku.to_ascii_lowercase();
    let gen2 = if variant == NO_PURCHASE_PLAN {
        sku.contains("v2") || sku.contains("gen2") || arch == Arch::Arm64
    } else {
        !sku.contains("gen1")
    };
    if gen2 { GEN2 } else { GEN1 }
}

/// The variant has no image of the generation the MachineSet's machines boot: the stream retired
/// it (the RHEL 10 streams publish no free Gen1 image). The other generation fails on VM sizes
/// that support only this one, so the image stays. Upstream skips a missing Gen1 image too
/// (`getTargetImageFromStream`, platform_helpers.go, MCO PR 6404 at e308231cc); a missing Gen2
/// image, where upstream still errs, is skipped here as well: nothing is wrong with the
/// MachineSet, and an error would degrade the cluster over a stream no administrator can change.
fn generation_not_published(
    ctx: &RuleContext<'_>,
    variant: &str,
    generation: &str,
    current: Value,
) -> ImageOutcome {
    let other = if generation == GEN1 { GEN2 } else { GEN1 };
    ImageOutcome::Skip {
        reason: Reason::HyperVGenerationNotPublished,
        message: format!(
            "the boot image is a {generation} image, and the golden stream {} publishes no \
             {generation} image of the Azure marketplace variant {variant} for {} (only \
             {other}), so the boot image is left as is; to have it managed, move this \
             MachineSet to a VM size that supports {other} and to the stream's {other} image, \
             or opt it out and manage its boot image by hand",
            ctx.stream.stream, ctx.arch
        ),
        current: Some(current),
    }
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

/// Machines whose boot image we cannot manage whatever it is.
fn unsupported_machine(spec: &Value, ctx: &RuleContext<'_>) -> Option<ImageOutcome> {
    let image = spec.get("image");
    // Indexed rather than `pointer`ed: a pointer is parsed anew for every MachineSet.
    if let Some(security_type) = Some(&spec["securityProfile"]["settings"]["securityType"])
        .filter(|t| !t.is_null() && t.as_str() != Some(""))
    {
        return Some(ImageOutcome::Skip {
            reason: Reason::SecurityTypeUnsupported,
            message: format!(
                "securityType {security_type} (trusted launch or confidential VMs) needs a \
                     security-enabled image, and the golden stream publishes none; update this \
                     boot image by hand"
            ),
            current: image.cloned(),
        });
    }
    if matches!(ctx.arch, Arch::Ppc64le | Arch::S390x) {
        return Some(ImageOutcome::Skip {
            reason: Reason::ArchitectureNotSupported,
            message: format!(
                "Azure has no {} virtual machines, so there is no boot image to manage; check \
                     the architecture in the MachineSet's capacity annotation",
                ctx.arch
            ),
            current: image.cloned(),
        });
    }
    None
}

/// The marketplace variant and Hyper-V generation the current image moves to: installer uploads
/// go to the free variant, marketplace images keep theirs.
fn golden_variant<'v>(
    fields: &ImageFields<'_>,
    variants: &'v Variants,
    ctx: &RuleContext<'_>,
    current: &Value,
) -> Result<(&'v str, &'static str), Box<ImageOutcome>> {
    if !fields.resource_id.is_empty() {
        return match installer_upload_generation(fields.resource_id, ctx.infrastructure_name) {
            Ok(generation) => Ok((NO_PURCHASE_PLAN, generation)),
            Err(message) => Err(Box::new(skip(Reason::CustomImage, message, current))),
        };
    }
    if fields.publisher.is_empty() || fields.offer.is_empty() {
        return Err(Box::new(invalid(
            "image has neither a resourceID nor a marketplace publisher and offer; set one of \
             them",
            Some(current.clone()),
        )));
    }
    let Some((variant, _)) = find_variant(variants, fields) else {
        let message = format!(
            "marketplace image {}:{}:{}:{} is not from a publisher and offer the golden stream \
             publishes; custom images are never replaced (switch the MachineSet to a published \
             image to have it managed)",
            fields.publisher, fields.offer, fields.sku, fields.version
        );
        return Err(Box::new(skip(Reason::CustomImage, message, current)));
    };
    Ok((variant, choose_generation(variant, fields.sku, ctx.arch)))
}

/// The current image object pointed at `golden`, keeping any keys we do not manage; `None` when
/// it already is. Copied only once a field differs: most images a pass reads are up to date.
fn target_image(
    current: &Map<String, Value>,
    golden: &AzureMarketplaceImage,
    variant: &str,
) -> Option<Map<String, Value>> {
    // Paid images only boot with their purchase plan attached, which the machine controller
    // does only for MarketplaceWithPlan.
    let image_type = if variant == NO_PURCHASE_PLAN {
        "MarketplaceNoPlan"
    } else {
        "MarketplaceWithPlan"
    };
    // A non-empty resourceID beside publisher, offer, sku or version is refused by the Machine
    // API's admission webhook (openshift/machine-api-operator, pkg/webhooks/machine_webhook.go,
    // `validateAzureImage`: "resourceID is already specified, other fields ... should not be
    // set"), so it is cleared for the marketplace fields to take effect; an absent one stays
    // absent.
    let resource_id = current.get("resourceID").map(|_| "");
    let managed = [
        ("publisher", Some(golden.publisher.as_str())),
        ("offer", Some(golden.offer.as_str())),
        ("sku", Some(golden.sku.as_str())),
        ("version", Some(golden.version.as_str())),
        ("type", Some(image_type)),
        ("resourceID", resource_id),
    ];
    let mut target = None;
    for (key, value) in managed {
        let Some(value) = value.filter(|v| current.get(key).and_then(Value::as_str) != Some(v))
        else {
            continue;
        };
        let target = target.get_or_insert_with(|| current.clone());
        target.insert(key.to_string(), Value::String(value.to_string()));
    }
    target
}

#[cfg(test)]
mod tests {
    use crate::testkit::rules::Outcome;
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use super::{
        Azure, GEN1, GEN2, ImageFields, NO_PURCHASE_PLAN, choose_generation, find_variant,
    };
    use crate::arch::Arch;
    use crate::golden_stream::AzureMarketplaceImage;
    use crate::platform::{Changes, ImageOutcome};
    use crate::reason::Reason;
    use crate::testkit::provider_specs::{
        azure as spec, azure_marketplace as marketplace, azure_upload as upload,
    };
    use crate::testkit::rules::{Cluster, message, reason, target};
    use crate::testkit::streams::stream_421_all_platforms as stream_4_21;

    /// The installer's infrastructure name, which its image uploads carry.
    const INFRA: &str = "mycluster-x7k2p";

    fn cluster() -> Cluster {
        Cluster::new(stream_4_21()).named(INFRA)
    }

    fn evaluate(spec: &Value) -> ImageOutcome {
        Azure.outcome(spec, &cluster().ctx(Arch::Amd64))
    }

    /// The URN and type of the image a MachineSet on `current` moves to.
    fn urn_and_type_of_target(current: Value) -> (String, String) {
        let outcome = evaluate(&spec(current));
        let image = target(&outcome);
        let field = |key: &str| image[key].as_str().unwrap_or_default().to_string();
        let urn = ["publisher", "offer", "sku", "version"]
            .map(field)
            .join(":");
        (urn, field("type"))
    }

    #[test]
    fn an_older_free_marketplace_image_moves_to_the_golden_one_as_one_change() {
        let current = marketplace("azureopenshift", "aro4", "419-v2", "419.6.20250523");
        let outcome = evaluate(&spec(current.clone()));
        let expected = marketplace("azureopenshift", "aro4", "420-v2", "9.6.20251015");
        assert_eq!(
            outcome,
            ImageOutcome::Update {
                current,
                target: expected,
                changes: Changes::Whole("/image".into()),
            }
        );
    }

    #[test]
    fn the_generation_follows_the_sku_as_upstream_reads_it() {
        let cases = [
            // Gen1 skus of this and earlier releases.
            ("aro_420", "azureopenshift:aro4:aro_420:9.6.20251015"),
            ("aro_419", "azureopenshift:aro4:aro_420:9.6.20251015"),
            // Gen2: `v2`, or `gen2` as the RHEL 10 skus say it.
            ("420-v2", "azureopenshift:aro4:420-v2:9.6.20251015"),
            ("418-v2", "azureopenshift:aro4:420-v2:9.6.20251015"),
            (
                "aro_5-0_x64_gen2",
                "azureopenshift:aro4:420-v2:9.6.20251015",
            ),
            // A free sku that says neither is Gen1, as upstream reads it.
            ("something-else", "azureopenshift:aro4:aro_420:9.6.20251015"),
        ];
        for (sku, expected) in cases {
            let got = urn_and_type_of_target(marketplace("azureopenshift", "aro4", sku, "1"));
            assert_eq!(got, (expected.into(), "MarketplaceNoPlan".into()), "{sku}");
        }
    }

    /// `reconcileAzureProviderSpec` (MCO platform_helpers.go, `gen2` since PR 6404): free images
    /// by `v2`/`gen2` or arm64, paid ones by `gen1`.
    #[test]
    fn the_upstream_generation_rule() {
        let free = |sku, arch| choose_generation(NO_PURCHASE_PLAN, sku, arch);
        assert_eq!(free("aro_420", Arch::Amd64), GEN1);
        assert_eq!(free("420-v2", Arch::Amd64), GEN2);
        assert_eq!(free("aro_5-0_x64_gen2", Arch::Amd64), GEN2);
        assert_eq!(free("ARO_5-0_X64_GEN2", Arch::Amd64), GEN2);
        assert_eq!(free("420-arm", Arch::Arm64), GEN2);
        assert_eq!(free("aro_420", Arch::Arm64), GEN2);
        let paid = |sku| choose_generation("ocp", sku, Arch::Amd64);
        assert_eq!(paid("rh-ocp-worker"), GEN2);
        assert_eq!(paid("rh-ocp-worker-gen1"), GEN1);
    }

    #[test]
    fn a_paid_image_keeps_its_variant_and_gets_its_purchase_plan() {
        let cases = [
            (
                "redhat",
                "rh-ocp-worker-gen1",
                "redhat:rh-ocp-worker:rh-ocp-worker-gen1:4.18.2025031114",
            ),
            (
                "redhat",
                "rh-ocp-worker",
                "redhat:rh-ocp-worker:rh-ocp-worker:4.18.2025031114",
            ),
            (
                "redhat-limited",
                "rh-ocp-worker",
                "redhat-limited:rh-ocp-worker:rh-ocp-worker:4.18.2025031114",
            ),
        ];
        for (publisher, sku, expected) in cases {
            let current = marketplace(publisher, "rh-ocp-worker", sku, "4.16.2024101109");
            let got = urn_and_type_of_target(current);
            assert_eq!(
                got,
                (expected.into(), "MarketplaceWithPlan".into()),
                "{publisher} {sku}"
            );
        }
    }

    #[test]
    fn the_golden_image_is_up_to_date() {
        let current = marketplace("azureopenshift", "aro4", "420-v2", "9.6.20251015");
        assert_eq!(
            evaluate(&spec(current.clone())),
            ImageOutcome::UpToDate { current }
        );

        let mut paid = marketplace(
            "redhat",
            "rh-ocp-worker",
            "rh-ocp-worker",
            "4.18.2025031114",
        );
        paid["type"] = json!("MarketplaceWithPlan");
        assert_eq!(
            evaluate(&spec(paid.clone())),
            ImageOutcome::UpToDate { current: paid }
        );
    }

    #[test]
    fn a_missing_type_is_filled_in_and_other_keys_survive() {
        let current = json!({
            "publisher": "azureopenshift",
            "offer": "aro4",
            "sku": "420-v2",
            "version": "9.6.20251015",
            "futureField": {"kept": null}
        });
        let outcome = evaluate(&spec(current));
        assert_eq!(
            *target(&outcome),
            json!({
                "publisher": "azureopenshift",
                "offer": "aro4",
                "sku": "420-v2",
                "version": "9.6.20251015",
                "futureField": {"kept": null},
                "type": "MarketplaceNoPlan"
            })
        );
    }

    #[test]
    fn a_marketplace_image_from_another_publisher_or_offer_is_custom() {
        for (publisher, offer) in [
            ("mycorp", "aro4"),
            ("azureopenshift", "my-offer"),
            ("RedHat", "rhel-byos"),
        ] {
            let outcome = evaluate(&spec(marketplace(publisher, offer, "420-v2", "latest")));
            assert_eq!(
                reason(&outcome),
                Some(Reason::CustomImage),
                "{publisher}:{offer}"
            );
        }
    }

    #[test]
    fn installer_uploads_migrate_to_the_free_marketplace_image() {
        let gallery = format!(
            "/resourceGroups/{INFRA}-rg/providers/Microsoft.Compute/galleries/gallery_mycluster_x7k2p/images/{INFRA}-gen2/versions/latest"
        );
        let outcome = evaluate(&spec(upload(&gallery)));
        assert_eq!(
            *target(&outcome),
            json!({
                "offer": "aro4",
                "publisher": "azureopenshift",
                "resourceID": "",
                "sku": "420-v2",
                "version": "9.6.20251015",
                "type": "MarketplaceNoPlan"
            })
        );
        let ImageOutcome::Update { changes, .. } = &outcome else {
            unreachable!()
        };
        assert_eq!(changes, &Changes::Whole("/image".into()));
    }

    #[test]
    fn the_upload_generation_and_location_are_read_from_the_resource_id() {
        let cases = [
            // The first installers' managed image: Gen1.
            format!("/resourceGroups/{INFRA}-rg/providers/Microsoft.Compute/images/{INFRA}"),
            // Azure names are case-insensitive, and tools spell the segments differently.
            format!(
                "/subscriptions/53b8f551-f0fc-4bea-8cba-6d1fefd54c8a/resourcegroups/MYCLUSTER-X7K2P-RG/providers/microsoft.compute/images/{INFRA}"
            ),
            // The cluster's gallery in a resource group the administrator supplied.
            format!(
                "/resourceGroups/shared-rg/providers/Microsoft.Compute/galleries/gallery_mycluster_x7k2p/images/{INFRA}/versions/412.86.20220810"
            ),
        ];
        for resource_id in cases {
            let outcome = evaluate(&spec(upload(&resource_id)));
            assert_eq!(target(&outcome)["sku"], "aro_420", "{resource_id}");
        }
        let gen2 = format!(
            "/resourceGroups/{INFRA}-rg/providers/Microsoft.Compute/galleries/gallery_mycluster_x7k2p/images/{}-GEN2",
            INFRA.to_uppercase()
        );
        assert_eq!(target(&evaluate(&spec(upload(&gen2))))["sku"], "420-v2");
    }

    #[test]
    fn other_resource_ids_are_custom_images() {
        let others = [
            // Another cluster's upload.
            "/resourceGroups/other-abcde-rg/providers/Microsoft.Compute/galleries/gallery_other_abcde/images/other-abcde-gen2/versions/latest".to_string(),
            // An administrator's image in the cluster's resource group.
            format!("/resourceGroups/{INFRA}-rg/providers/Microsoft.Compute/images/golden-rhcos"),
            // The right name outside the cluster's resource group and gallery.
            format!("/resourceGroups/images-rg/providers/Microsoft.Compute/images/{INFRA}"),
            format!("/resourceGroups/{INFRA}-rg/providers/Microsoft.Storage/images/{INFRA}"),
            "not-a-resource-id".to_string(),
        ];
        for resource_id in others {
            let outcome = evaluate(&spec(upload(&resource_id)));
            assert_eq!(reason(&outcome), Some(Reason::CustomImage), "{resource_id}");
            assert!(message(&outcome).contains(&resource_id));
        }
    }

    #[test]
    fn without_an_infrastructure_name_no_upload_is_recognised() {
        let resource_id =
            format!("/resourceGroups/{INFRA}-rg/providers/Microsoft.Compute/images/{INFRA}");
        let unnamed = Cluster::new(stream_4_21());
        let outcome = Azure.outcome(&spec(upload(&resource_id)), &unnamed.ctx(Arch::Amd64));
        assert_eq!(reason(&outcome), Some(Reason::CustomImage));
        assert!(message(&outcome).contains("infrastructure name is unknown"));
    }

    #[test]
    fn trusted_launch_and_confidential_vms_are_skipped() {
        for security_type in ["TrustedLaunch", "ConfidentialVM"] {
            let mut spec = spec(marketplace(
                "azureopenshift",
                "aro4",
                "419-v2",
                "419.6.20250523",
            ));
            spec["securityProfile"] = json!({"settings": {"securityType": security_type}});
            let outcome = evaluate(&spec);
            assert_eq!(reason(&outcome), Some(Reason::SecurityTypeUnsupported));
        }
        // An empty securityType is the default (no security features): managed as usual.
        let mut spec = spec(marketplace(
            "azureopenshift",
            "aro4",
            "419-v2",
            "419.6.20250523",
        ));
        spec["securityProfile"] = json!({"settings": {"securityType": ""}});
        assert!(matches!(evaluate(&spec), ImageOutcome::Update { .. }));
    }

    #[test]
    fn power_and_z_are_not_azure_architectures() {
        let spec = spec(marketplace(
            "azureopenshift",
            "aro4",
            "419-v2",
            "419.6.20250523",
        ));
        for arch in [Arch::Ppc64le, Arch::S390x] {
            let outcome = Azure.outcome(&spec, &cluster().ctx(arch));
            assert_eq!(
                reason(&outcome),
                Some(Reason::ArchitectureNotSupported),
                "{arch}"
            );
        }
    }

    #[test]
    fn a_stream_without_marketplace_images_is_an_error() {
        let spec = spec(marketplace(
            "azureopenshift",
            "aro4",
            "419-v2",
            "419.6.20250523",
        ));
        // The compact stream's aarch64 has AWS images only.
        let outcome = Azure.outcome(&spec, &cluster().ctx(Arch::Arm64));
        assert!(matches!(outcome, ImageOutcome::Error { .. }), "{outcome:?}");
        assert_eq!(reason(&outcome), Some(Reason::ImageNotInStream));

        let mut x86_only = stream_4_21();
        x86_only["architectures"]
            .as_object_mut()
            .unwrap()
            .remove("aarch64");
        let outcome = Azure.outcome(&spec, &Cluster::new(x86_only).ctx(Arch::Arm64));
        assert_eq!(reason(&outcome), Some(Reason::ArchitectureNotInStream));
    }

    #[test]
    fn a_stream_without_any_marketplace_image_is_a_skip_not_an_error() {
        let spec = spec(marketplace(
            "azureopenshift",
            "aro4",
            "419-v2",
            "419.6.20250523",
        ));
        let mut okd = stream_4_21();
        okd["architectures"]["x86_64"]
            .as_object_mut()
            .unwrap()
            .remove("rhel-coreos-extensions");
        let outcome = Azure.outcome(&spec, &Cluster::new(okd).ctx(Arch::Amd64));
        assert!(matches!(outcome, ImageOutcome::Skip { .. }), "{outcome:?}");
        assert_eq!(
            reason(&outcome),
            Some(Reason::MarketplaceImagesNotPublished)
        );
    }

    /// The free variant of a RHEL 10 stream, as the installer publishes it
    /// (data/data/coreos/marketplace/coreos-rhel-10.json): Gen2 only.
    fn stream_without_free_gen1() -> Value {
        let mut stream = stream_4_21();
        stream["architectures"]["x86_64"]["rhel-coreos-extensions"]["marketplace"]["azure"]["no-purchase-plan"] = json!({"hyperVGen2": {
            "publisher": "azureopenshift", "offer": "aro4",
            "sku": "aro_5-0_x64_gen2", "version": "10.2.20260423"
        }});
        stream
    }

    #[test]
    fn a_gen1_machine_set_stays_when_the_stream_retires_gen1() {
        let cluster = Cluster::new(stream_without_free_gen1()).named(INFRA);
        let evaluate = |image| Azure.outcome(&spec(image), &cluster.ctx(Arch::Amd64));
        let gen1_upload =
            format!("/resourceGroups/{INFRA}-rg/providers/Microsoft.Compute/images/{INFRA}");
        for gen1 in [
            marketplace("azureopenshift", "aro4", "aro_420", "9.6.20251015"),
            upload(&gen1_upload),
        ] {
            let outcome = evaluate(gen1.clone());
            assert!(
                matches!(
                    outcome,
                    ImageOutcome::Skip {
                        reason: Reason::HyperVGenerationNotPublished,
                        ..
                    }
                ),
                "{gen1}: {outcome:?}"
            );
            let said = message(&outcome);
            for part in ["hyperVGen1", "hyperVGen2", "VM size", "no-purchase-plan"] {
                assert!(said.contains(part), "{part} missing from {said}");
            }
        }
        // Gen2 images, of either sku style, move to the new sku.
        for sku in ["420-v2", "aro_5-0_x64_gen2"] {
            let outcome = evaluate(marketplace("azureopenshift", "aro4", sku, "9.6.20251015"));
            assert_eq!(
                target(&outcome)["sku"],
                "aro_5-0_x64_gen2",
                "{sku}: {outcome:?}"
            );
        }
        let current = marketplace(
            "azureopenshift",
            "aro4",
            "aro_5-0_x64_gen2",
            "10.2.20260423",
        );
        assert_eq!(
            evaluate(current.clone()),
            ImageOutcome::UpToDate { current }
        );
    }

    #[test]
    fn a_generation_the_stream_lacks_is_skipped_either_way() {
        // Arm64 VMs are Gen2 only, so the stream has no Gen1 image to move a Gen1 upload to.
        let mut stream = stream_4_21();
        stream["architectures"]["aarch64"]["rhel-coreos-extensions"] = json!({"marketplace": {"azure": {
            "no-purchase-plan": {"hyperVGen2": {
                "publisher": "azureopenshift", "offer": "aro4", "sku": "420-arm", "version": "9.6.20251015"
            }}
        }}});
        let cluster = Cluster::new(stream).named(INFRA);
        let gen1 = format!("/resourceGroups/{INFRA}-rg/providers/Microsoft.Compute/images/{INFRA}");
        let outcome = Azure.outcome(&spec(upload(&gen1)), &cluster.ctx(Arch::Arm64));
        assert_eq!(reason(&outcome), Some(Reason::HyperVGenerationNotPublished));

        // An arm64 marketplace image is Gen2 whatever its sku.
        let older = marketplace("azureopenshift", "aro4", "419-arm", "419.6.20250523");
        let outcome = Azure.outcome(&spec(older), &cluster.ctx(Arch::Arm64));
        assert_eq!(target(&outcome)["sku"], "420-arm");

        // A paid variant without its Gen2 image: skipped too, not an error.
        let mut stream = stream_4_21();
        stream["architectures"]["x86_64"]["rhel-coreos-extensions"]["marketplace"]["azure"]["ocp"]
            .as_object_mut()
            .unwrap()
            .remove("hyperVGen2");
        let cluster = Cluster::new(stream).named(INFRA);
        let paid = marketplace(
            "redhat",
            "rh-ocp-worker",
            "rh-ocp-worker",
            "4.16.2024101109",
        );
        let outcome = Azure.outcome(&spec(paid), &cluster.ctx(Arch::Amd64));
        assert_eq!(reason(&outcome), Some(Reason::HyperVGenerationNotPublished));
    }

    #[test]
    fn a_spec_without_a_usable_image_is_invalid() {
        let invalid = [
            json!({"vmSize": "Standard_D4s_v3"}),
            spec(json!("azureopenshift:aro4:420-v2:latest")),
            spec(json!({"publisher": "", "offer": "", "resourceID": "", "sku": "", "version": ""})),
            spec(
                json!({"publisher": "azureopenshift", "offer": "aro4", "sku": 420, "version": "1"}),
            ),
        ];
        for spec in invalid {
            let outcome = evaluate(&spec);
            assert!(matches!(outcome, ImageOutcome::Error { .. }), "{outcome:?}");
            assert_eq!(
                reason(&outcome),
                Some(Reason::InvalidProviderSpec),
                "{spec}"
            );
        }
    }

    /// Should two variants ever share a publisher and offer, the one that lists the current sku
    /// wins, whichever comes first; without one, the first.
    #[test]
    fn variants_sharing_an_offer_are_told_apart_by_the_sku() {
        let generation = |publisher: &str, sku: &str| {
            let image = AzureMarketplaceImage {
                publisher: publisher.into(),
                offer: "o".into(),
                sku: sku.into(),
                version: "1".into(),
            };
            BTreeMap::from([("hyperVGen2".to_string(), image)])
        };
        let variants = BTreeMap::from([
            ("a-other".to_string(), generation("elsewhere", "sku-1")),
            ("b-first".to_string(), generation("p", "sku-1")),
            ("c-second".to_string(), generation("P", "sku-2")),
        ]);
        let current = |sku| ImageFields {
            publisher: "p",
            offer: "O",
            sku,
            version: "1",
            resource_id: "",
        };
        let found = |sku| find_variant(&variants, &current(sku)).map(|(name, _)| name);
        assert_eq!(found("SKU-2"), Some("c-second"));
        assert_eq!(found("sku-1"), Some("b-first"));
        assert_eq!(found("sku-9"), Some("b-first"));
        let other = ImageFields {
            offer: "another",
            ..current("sku-1")
        };
        assert_eq!(find_variant(&variants, &other), None);
    }
}
