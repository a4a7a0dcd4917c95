//! The golden stream parsers on raw bytes: `GoldenStream::parse` (also of a stream with an
//! Azure marketplace overlay merged in, as the installer renders it) and
//! `GoldenConfig::from_config_map`. Seeds: the real streams under
//! `../shared/fixtures/streams` (hack/fuzz.sh passes them as a read-only corpus).
#![no_main]

use std::collections::BTreeMap;

use boot_image_controller::api::ConfigMap;
use boot_image_controller::arch::Arch;
use boot_image_controller::golden_stream::{GoldenConfig, GoldenStream};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

fn config_map(entries: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        data: Some(
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..ConfigMap::default()
    }
}

/// `stream` with an installer marketplace overlay (`marketplace-rhcos.json`: arch -> `azure` ->
/// variant -> generation -> image) in each architecture's `rhel-coreos-extensions.marketplace`,
/// as the installer merges it when it renders the golden ConfigMap (the library parses only the
/// result; tests/suite/platform_fixtures.rs merges the real overlay the same way).
fn with_overlay(stream: &str, overlay: &str) -> Option<String> {
    let mut stream: Value = serde_json::from_str(stream).ok()?;
    let overlay: Map<String, Value> = serde_json::from_str(overlay).ok()?;
    let arches = stream.get_mut("architectures")?.as_object_mut()?;
    for (arch, platforms) in overlay {
        let Some(entry) = arches.get_mut(&arch).and_then(Value::as_object_mut) else {
            continue;
        };
        // Beside the extensions the stream has (`azure-disk`, `aws-winli`).
        let extensions = (entry.entry("rhel-coreos-extensions")).or_insert_with(|| json!({}));
        let marketplace = (extensions.as_object_mut())
            .map(|e| e.entry("marketplace").or_insert_with(|| json!({})));
        if let Some(marketplace) = marketplace.and_then(Value::as_object_mut) {
            let azure = platforms.get("azure").cloned().unwrap_or(Value::Null);
            marketplace.insert("azure".into(), azure);
        }
    }
    Some(stream.to_string())
}

/// Every query the planner and the platform rules make of a parsed stream.
fn query(stream: &GoldenStream) {
    for arch in Arch::ALL {
        let _ = stream.has_arch(arch);
        for platform in ["aws", "gcp", "azure", "vmware", ""] {
            let _ = stream.release(arch, platform);
        }
        for region in ["us-east-1", "us-east-2", ""] {
            let _ = stream.aws_image(arch, region);
        }
        let _ = stream.gcp_image(arch).map(|g| g.reference());
        if let Some(variants) = stream.azure_marketplace(arch) {
            for image in variants.values().flat_map(|gens| gens.values()) {
                let _ = image.urn();
            }
        }
    }
    let _ = stream.image_references();
}

fuzz_target!(|data: &[u8]| {
    // Two documents when a 0xFF byte (never valid UTF-8) splits the input: the default stream
    // and the `streams` map.
    let (first, second) = match data.iter().position(|b| *b == 0xff) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    };
    let Ok(first) = std::str::from_utf8(first) else {
        return;
    };
    let second = second.and_then(|s| std::str::from_utf8(s).ok());

    if let Ok(stream) = GoldenStream::parse(first) {
        query(&stream);
    }
    if let Some(merged) = second.and_then(|overlay| with_overlay(first, overlay))
        && let Ok(stream) = GoldenStream::parse(&merged)
    {
        query(&stream);
    }

    let mut entries = vec![("stream", first), ("releaseVersion", "4.21.0")];
    if let Some(streams) = second {
        entries.push(("streams", streams));
    }
    if let Ok(golden) = GoldenConfig::from_config_map(&config_map(&entries)) {
        query(&golden.stream);
        let _ = golden.image_references();
    }
    // The input as the `streams` map itself, with a valid default stream beside it.
    let valid = boot_image_controller::testkit::streams::stream_421_all_platforms().to_string();
    let entries = [
        ("stream", valid.as_str()),
        ("streams", first),
        ("releaseVersion", first),
    ];
    if let Ok(golden) = GoldenConfig::from_config_map(&config_map(&entries)) {
        for s in golden.other_streams.values() {
            query(s);
        }
    }
});
