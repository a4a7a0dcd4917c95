//! GCP: the `image` of every boot disk (data disks are never touched).

use serde_json::{Map, Value};

use super::{
    Changes, ImageOutcome, Input, PlatformRule, RuleContext, invalid, not_in_stream, skip,
};
use crate::facts::Lookup;
use crate::reason::Reason;

/// Images published by the CoreOS team live in this project; anything else was chosen by an
/// administrator (or uploaded by an old installer) and is left alone.
const RHCOS_IMAGE_PREFIX: &str = "projects/rhcos-cloud/global/images/";

pub(super) struct Gcp;

/// The boot disks of a provider spec with their images (`null` when absent); `None` without a
/// disks list.
fn boot_disks(spec: &Value) -> Option<Vec<(usize, &Value)>> {
    let disks = spec.get("disks")?.as_array()?;
    Some(
        disks
            .iter()
            .enumerate()
            .filter(|(_, d)| d.get("boot").and_then(Value::as_bool) == Some(true))
            .map(|(i, d)| (i, d.get("image").unwrap_or(&Value::Null)))
            .collect(),
    )
}

/// `/disks/<index>/<field>`.
fn disk_pointer(index: usize, field: &str) -> String {
    format!("/disks/{index}/{field}")
}

fn disk_image_pointer(index: usize) -> String {
    disk_pointer(index, "image")
}

impl PlatformRule for Gcp {
    fn stream_key(&self) -> &'static str {
        "gcp"
    }

    /// The boot disks holding `written`: the planner replaced every boot disk not yet on the
    /// target. None holding it: the first boot disk, which `revert` then reports as changed.
    fn image_locations(&self, spec: &Value, written: &Value) -> Option<Vec<(String, Value)>> {
        let boot = boot_disks(spec)?;
        let located = |disks: &mut dyn Iterator<Item = &(usize, &Value)>| -> Vec<(String, Value)> {
            disks
                .map(|(i, image)| (disk_image_pointer(*i), (*image).clone()))
                .collect()
        };
        let ours = located(&mut boot.iter().filter(|(_, image)| *image == written));
        if ours.is_empty() {
            let first = located(&mut boot.iter().take(1));
            return (!first.is_empty()).then_some(first);
        }
        Some(ours)
    }

    fn provider_spec_fields(&self) -> &'static [&'static str] {
        &["disks"]
    }

    /// Of each disk, its boot flag and image; every disk stays, so that indexes still point at
    /// the same disks.
    fn keep_only_what_it_reads(&self, spec: &mut Map<String, Value>) {
        if let Some(Value::Array(disks)) = spec.get_mut("disks") {
            for disk in disks {
                if let Value::Object(disk) = disk {
                    disk.retain(|field, _| field == "boot" || field == "image");
                }
            }
        }
    }

    /// Which disks are boot disks decides which images change: every disk's boot flag.
    fn decision_inputs(&self, spec: &Value) -> Vec<Input> {
        let disks = spec.get("disks").and_then(Value::as_array);
        let count = disks.map_or(0, Vec::len);
        (0..count)
            .map(|i| Input::at(spec, disk_pointer(i, "boot")))
            .collect()
    }

    fn evaluate(&self, spec: &Value, ctx: &RuleContext<'_>) -> (ImageOutcome, Option<Lookup>) {
        (outcome(spec, ctx), None)
    }
}

/// What the boot image of `spec` should be; GCP asks no cloud.
fn outcome(spec: &Value, ctx: &RuleContext<'_>) -> ImageOutcome {
    let Some(boot) = boot_disks(spec) else {
        return invalid("providerSpec has no disks list; fix the MachineSet", None);
    };
    let Some(&(first_index, first)) = boot.first() else {
        return invalid(
            "providerSpec has no disk with boot: true; mark the boot disk in the MachineSet",
            None,
        );
    };
    if let Some((i, _)) = boot.iter().find(|(_, image)| !image.is_string()) {
        return invalid(
            format!("boot disk {i} has no string image"),
            Some(first.clone()),
        );
    }
    if let Some((_, custom)) = boot.iter().find(|(_, image)| {
        !image
            .as_str()
            .unwrap_or_default()
            .starts_with(RHCOS_IMAGE_PREFIX)
    }) {
        let message = format!(
            "boot image {} is outside {RHCOS_IMAGE_PREFIX}; custom images are never replaced (set \
             a {RHCOS_IMAGE_PREFIX} image by hand to have it managed)",
            custom.as_str().unwrap_or_default()
        );
        return skip(Reason::CustomImage, message, first);
    }
    let Some(golden) = ctx.stream.gcp_image(ctx.arch) else {
        return not_in_stream(
            ctx,
            "GCP image",
            "the boot image is left as is until the stream carries one",
            Some(first.clone()),
        );
    };
    let target = Value::String(golden.reference());
    let outdated = || boot.iter().filter(|(_, image)| **image != target);
    let mut found = outdated();
    let changes = match (found.next(), found.next()) {
        (None, _) => {
            return ImageOutcome::UpToDate {
                current: first.clone(),
            };
        }
        // The usual MachineSet: its one boot disk is the image, and nothing is copied.
        (Some(&(i, _)), None) if i == first_index => Changes::Whole(disk_image_pointer(i).into()),
        _ => Changes::Each(
            outdated()
                .map(|&(i, _)| disk_image_pointer(i).into())
                .collect(),
        ),
    };
    ImageOutcome::Update {
        current: first.clone(),
        target,
        changes,
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::rules::Outcome;
    use serde_json::{Value, json};

    use super::Gcp;
    use crate::arch::Arch;
    use crate::platform::ImageOutcome;
    use crate::reason::Reason;
    use crate::testkit::provider_specs::{
        gcp as spec, gcp_boot_disk as boot_disk, gcp_data_disk as data_disk,
    };
    use crate::testkit::rules::{Cluster, changed_pointers, reason, single_update};
    use crate::testkit::streams::{
        GCP_IMAGE_420 as IMAGE_4_20, GCP_IMAGE_421 as IMAGE_4_21, stream_421_all_platforms,
    };

    fn evaluate(spec: &Value, arch: Arch) -> ImageOutcome {
        Gcp.outcome(spec, &Cluster::new(stream_421_all_platforms()).ctx(arch))
    }

    #[test]
    fn an_older_rhcos_cloud_image_moves_to_the_golden_one() {
        let outcome = evaluate(&spec(json!([boot_disk(IMAGE_4_20)])), Arch::Amd64);
        assert_eq!(
            outcome,
            single_update("/disks/0/image", IMAGE_4_20, IMAGE_4_21)
        );
    }

    #[test]
    fn data_disks_are_never_touched() {
        // The predecessor overwrote data disks too; only boot disks change.
        let disks = json!([
            data_disk(IMAGE_4_20),
            boot_disk(IMAGE_4_20),
            data_disk("my-data-image")
        ]);
        let outcome = evaluate(&spec(disks), Arch::Amd64);
        assert_eq!(changed_pointers(&outcome), ["/disks/1/image"]);
    }

    #[test]
    fn only_the_outdated_boot_disks_change() {
        let disks = json!([boot_disk(IMAGE_4_21), boot_disk(IMAGE_4_20)]);
        let outcome = evaluate(&spec(disks), Arch::Amd64);
        assert_eq!(changed_pointers(&outcome), ["/disks/1/image"]);
    }

    #[test]
    fn the_golden_image_is_up_to_date() {
        let outcome = evaluate(
            &spec(json!([boot_disk(IMAGE_4_21), data_disk("x")])),
            Arch::Amd64,
        );
        assert_eq!(
            outcome,
            ImageOutcome::UpToDate {
                current: json!(IMAGE_4_21)
            }
        );
    }

    #[test]
    fn a_boot_image_outside_rhcos_cloud_is_a_custom_image() {
        // An installer upload named after the cluster, as 4.6-era installers made them.
        for image in [
            "ci-ln-fyvthbt-f76d1-nl2fh-rhcos-image",
            "projects/my-project/global/images/rhcos-9-6-20250826-1-gcp-x86-64",
        ] {
            let outcome = evaluate(&spec(json!([boot_disk(image)])), Arch::Amd64);
            assert_eq!(reason(&outcome), Some(Reason::CustomImage), "{image}");
        }
        // One custom boot disk keeps the whole MachineSet as it is.
        let disks = json!([boot_disk(IMAGE_4_20), boot_disk("my-image")]);
        let outcome = evaluate(&spec(disks), Arch::Amd64);
        assert_eq!(reason(&outcome), Some(Reason::CustomImage));
    }

    #[test]
    fn a_stream_without_a_gcp_image_for_the_arch_is_an_error() {
        let outcome = evaluate(&spec(json!([boot_disk(IMAGE_4_20)])), Arch::Arm64);
        assert!(matches!(outcome, ImageOutcome::Error { .. }), "{outcome:?}");
        assert_eq!(reason(&outcome), Some(Reason::ImageNotInStream));

        let outcome = evaluate(&spec(json!([boot_disk(IMAGE_4_20)])), Arch::S390x);
        assert_eq!(reason(&outcome), Some(Reason::ArchitectureNotInStream));
    }

    #[test]
    fn malformed_disks_are_invalid() {
        let no_image = json!([{"boot": true, "sizeGb": 128}]);
        for spec in [
            json!({"machineType": "n2-standard-4"}),
            spec(json!("not a list")),
            spec(json!([])),
            spec(json!([data_disk(IMAGE_4_20)])),
            spec(no_image),
        ] {
            let outcome = evaluate(&spec, Arch::Amd64);
            assert_eq!(
                reason(&outcome),
                Some(Reason::InvalidProviderSpec),
                "{spec}"
            );
        }
    }
}
