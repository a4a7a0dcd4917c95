//! GCP: the `image` of every boot disk (data disks are never touched).

use serde_json::Value;

use super::{BootImageRule, FieldChange, ImageOutcome, RuleContext, invalid};
use crate::reason::Reason;

/// Images published by the CoreOS team live in this project; anything else was chosen by an
/// administrator (or uploaded by an old installer) and is left alone.
const RHCOS_IMAGE_PREFIX: &str = "projects/rhcos-cloud/global/images/";

pub(super) struct Gcp;

impl BootImageRule for Gcp {
    fn evaluate(&self, spec: &Value, ctx: &RuleContext<'_>) -> ImageOutcome {
        let Some(disks) = spec.get("disks").and_then(Value::as_array) else {
            return invalid("providerSpec has no disks list", None);
        };
        let boot: Vec<(usize, &Value)> = disks
            .iter()
            .enumerate()
            .filter(|(_, d)| d.get("boot").and_then(Value::as_bool) == Some(true))
            .map(|(i, d)| (i, d.get("image").unwrap_or(&Value::Null)))
            .collect();
        let Some(&(_, first)) = boot.first() else {
            return invalid("providerSpec has no disk with boot: true", None);
        };
        if let Some((i, _)) = boot.iter().find(|(_, image)| !image.is_string()) {
            return invalid(format!("boot disk {i} has no string image"), Some(first.clone()));
        }
        if let Some((_, custom)) = boot
            .iter()
            .find(|(_, image)| !image.as_str().unwrap_or_default().starts_with(RHCOS_IMAGE_PREFIX))
        {
            return ImageOutcome::Skip {
                reason: Reason::CustomImage,
                message: format!(
                    "boot image {} is outside {RHCOS_IMAGE_PREFIX}; custom images are never replaced",
                    custom.as_str().unwrap_or_default()
                ),
                current: Some(first.clone()),
            };
        }
        let Some(golden) = ctx.stream.gcp_image(ctx.arch) else {
            let reason = if ctx.stream.has_arch(ctx.arch) {
                Reason::ImageNotInStream
            } else {
                Reason::ArchitectureNotInStream
            };
            return ImageOutcome::Error {
                reason,
                message: format!(
                    "the golden stream {} publishes no {} GCP image",
                    ctx.stream.stream, ctx.arch
                ),
                current: Some(first.clone()),
            };
        };
        let target = Value::String(golden.reference());
        let changes: Vec<FieldChange> = boot
            .iter()
            .filter(|(_, image)| **image != target)
            .map(|(i, image)| FieldChange {
                pointer: format!("/disks/{i}/image"),
                from: (*image).clone(),
                to: target.clone(),
            })
            .collect();
        if changes.is_empty() {
            ImageOutcome::UpToDate {
                current: first.clone(),
            }
        } else {
            ImageOutcome::Update {
                current: first.clone(),
                target,
                changes,
            }
        }
    }
}
