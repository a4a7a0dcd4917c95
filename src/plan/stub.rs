//! The stub secret rule: a machine resource keeps the stub secret it names, and its boot image
//! moves only when that stub holds Ignition spec 3.
//!
//! As the Machine Config Operator does since 4.19 (pkg/controller/bootimage/helpers.go,
//! `upgradeStubIgnitionIfRequired`, called by each platform's `reconcile*ProviderSpec` in
//! platform_helpers.go and vsphere_helpers.go only when the image is about to change): the name
//! never changes, since a renamed stub drops an administrator's own (a custom disk layout, say)
//! and, on a ControlPlaneMachineSet, would replace every control-plane machine. A spec-2 stub
//! (clusters installed before 4.6) is upgraded in place before the image moves, because new
//! images read spec 3 only. Where the MCO fails the MachineSet's sync when the stub cannot be
//! read or converted, we leave its image as it is with a reason that says what to do.

use std::borrow::Cow;
use std::sync::Arc;

use jsonptr::Pointer;
use k8s_openapi::ByteString;
use serde::Serialize;
use serde_json::Value;

use json_patch::Patch;

use super::patch::{Guarded, set_annotations};
use super::pointer_config;
use crate::api::{ProviderSpec, Secret};
use crate::names::{STUB_IGNITION_UPGRADED_AT_ANNOTATION, STUB_IGNITION_UPGRADED_TO_ANNOTATION};
use crate::reason::Reason;

/// The key of the stub secret that holds the Ignition config (the MCO's `UserDataKey`).
pub const USER_DATA_KEY: &str = "userData";

/// The name's JSON Pointer in a provider spec (its field: `names::STUB_SECRET_FIELD`).
pub const NAME_POINTER: &str = "/userDataSecret/name";

/// Where a Secret holds the stub, and the copy an upgrade keeps of it.
pub const USER_DATA: &Pointer = Pointer::from_static("/data/userData");
pub const PREVIOUS_USER_DATA: &Pointer =
    Pointer::from_static("/data/boot-image-controller.io-previous-userData");

/// The largest `userData` an upgrade converts, so that the copy it keeps for `revert` stays
/// small beside the secret's 1 MiB. A pointer config is a URL and a CA bundle: a few kilobytes.
const MAX_CONVERTED: usize = 64 * 1024;

/// The provider spec's `userDataSecret.name`, whatever its type: the stub secret it names when
/// it is a string.
pub fn name_field(provider_spec: &Value) -> Option<&Value> {
    // Resolved by `jsonptr`, which unescapes a token only when it has to: `Value::pointer`
    // allocates for every token, and every MachineSet of every pass is read here twice.
    Pointer::from_static(NAME_POINTER)
        .resolve(provider_spec)
        .ok()
}

/// The stub secret a provider spec names, if it names one.
pub fn current_name(provider_spec: &Value) -> Option<&str> {
    name_field(provider_spec)?.as_str()
}

/// [`current_name`] of a provider spec, if it has a value.
pub fn kept_name(provider_spec: &ProviderSpec) -> Option<&str> {
    current_name(provider_spec.value.as_ref()?)
}

/// What a stub secret needs before a new boot image can use it.
#[derive(Clone, Debug, PartialEq)]
pub enum StubState {
    /// Ignition spec 3: nothing.
    Spec3,
    /// Spec 2, convertible: this write first.
    Upgrade(Arc<StubUpgrade>),
}

/// Whether a stub secret can boot a new image, or the reason and message why not.
pub type StubCheck = Result<StubState, (Reason, String)>;

/// The in-place upgrade of a spec-2 stub secret: one guarded JSON Patch of the Secret, sent
/// before the patch of the machine resource that moves to the new image.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StubUpgrade {
    pub namespace: String,
    pub name: String,
    /// The Ignition version the stub has, and the one it is written in.
    pub from_version: String,
    pub to_version: &'static str,
    /// RFC 6902 operations on the Secret: a `test` of its resourceVersion and of the `userData`
    /// read, the new `userData`, the old one kept under [`PREVIOUS_USER_DATA_KEY`] for
    /// `revert`, and the MCO's annotations.
    pub patch: Patch,
}

/// Checks the stub secret `namespace/name` (`None`: absent or unreadable); `now` is the time an
/// upgrade records.
pub fn check(namespace: &str, name: &str, secret: Option<&Secret>, now: &str) -> StubCheck {
    let unconvertible = |why: &dyn std::fmt::Display| {
        Err((
            Reason::StubSecretUnconvertible,
            format!(
                "stub secret {namespace}/{name} {why}, so the boot image is not updated: new \
                 boot images read Ignition spec 3 only. Rewrite its {USER_DATA_KEY} as an \
                 Ignition 3 config (an installer's stub points ignition.config.merge at \
                 https://api-int.<cluster domain>:22623/config/<role>), and the update goes ahead"
            ),
        ))
    };
    let Some(secret) = secret else {
        return Err((
            Reason::StubSecretMissing,
            format!(
                "stub secret {namespace}/{name} does not exist or cannot be read, so the boot \
                 image is not updated: nothing shows that a new image can boot from it. Create \
                 it, or, for a custom stub, add its name to the controller's Role (it reads \
                 stub secrets by name, manifests/rbac-machine-api.yaml)"
            ),
        ));
    };
    let served = secret.data.as_ref().and_then(|d| d.get(USER_DATA_KEY));
    // A manifest file may give it as stringData, which the API server never serves.
    let given = || {
        let text = secret.string_data.as_ref()?.get(USER_DATA_KEY)?;
        Some(Cow::Owned(text.as_bytes().to_vec()))
    };
    let Some(bytes) = served.map(|b| Cow::Borrowed(&b.0[..])).or_else(given) else {
        return unconvertible(&"has no userData");
    };
    // `oc adm inspect` (and so must-gather) keeps a secret's keys but replaces their values:
    // older releases with nothing, newer ones with "<N> bytes long" (openshift/oc,
    // pkg/cli/admin/inspect, `elideSecret`). Such a value says nothing about the real one.
    if is_elided(&bytes) {
        return Err((
            Reason::StubSecretUnverified,
            format!(
                "stub secret {namespace}/{name} has its {USER_DATA_KEY} blanked, as must-gather \
                 and `oc adm inspect` write secrets: whether it is Ignition 3 cannot be told, so \
                 this plan does not move the boot image (plan on `oc get secret -o yaml` output \
                 to check it)"
            ),
        ));
    }
    let Ok(config) = serde_json::from_slice::<Value>(&bytes) else {
        return unconvertible(&"has a userData that is not JSON");
    };
    let version = &config.pointer("/ignition/version").and_then(Value::as_str);
    match version {
        Some(v) if is_ignition_3(v) => return Ok(StubState::Spec3),
        None => return unconvertible(&"has no ignition.version"),
        Some(_) if bytes.len() > MAX_CONVERTED => {
            return unconvertible(&format!(
                "is Ignition spec 2 and larger than the {} KiB this controller converts",
                MAX_CONVERTED / 1024
            ));
        }
        Some(_) => {}
    }
    let converted = match pointer_config::to_spec3(&config) {
        Ok(converted) => converted,
        Err(why) => return unconvertible(&why),
    };
    let from_version = version.unwrap_or_default().to_string();
    let new_user_data = serde_json::to_vec(&converted).expect("JSON values serialize");
    let patch = upgrade_patch(secret, &bytes, &new_user_data, now);
    Ok(StubState::Upgrade(Arc::new(StubUpgrade {
        namespace: namespace.to_string(),
        name: name.to_string(),
        from_version,
        to_version: pointer_config::TARGET_VERSION,
        patch,
    })))
}

/// The Secret's patch. The resourceVersion guards the whole read (the MCO's `Update` carries it
/// too); the `test` of the old `userData` says in the patch itself what it replaces, and guards
/// it alone where a secret comes without one (a manifest file given to `plan`).
fn upgrade_patch(secret: &Secret, old: &[u8], new: &[u8], now: &str) -> Patch {
    let base64 = |bytes: &[u8]| {
        serde_json::to_value(ByteString(bytes.to_vec())).expect("bytes serialize as base64")
    };
    let (old, new) = (base64(old), base64(new));
    let mut patch = Patch::default();
    patch.guarded_replace(USER_DATA.to_buf(), old.clone(), new);
    patch.add(PREVIOUS_USER_DATA.to_buf(), old);
    let annotations = [
        (
            STUB_IGNITION_UPGRADED_TO_ANNOTATION,
            pointer_config::TARGET_VERSION,
        ),
        (STUB_IGNITION_UPGRADED_AT_ANNOTATION, now),
    ];
    set_annotations(&mut patch, &secret.metadata, annotations);
    if let Some(rv) = &secret.metadata.resource_version {
        patch.guard_resource_version(rv);
    }
    patch
}

/// A value as `oc adm inspect` writes secrets: empty, or `<N> bytes long`.
fn is_elided(bytes: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    text.is_empty()
        || text
            .strip_suffix(" bytes long")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// `3.<minor>.<patch>`, as Ignition spells its versions (a pre-release like `3.5.0-experimental`
/// included); `3.junk` is not one. Stricter than the MCO's prefix test
/// (`MinimumAcceptableStubIgnitionSpec`), which would take `30.1.0` for spec 3.
fn is_ignition_3(version: &str) -> bool {
    let core = version.split_once('-').map_or(version, |(core, _)| core);
    let mut parts = core.split('.');
    parts.next() == Some("3")
        && parts.clone().count() == 2
        && parts.all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::names::PREVIOUS_USER_DATA_KEY;

    const NOW: &str = "2026-11-27T13:00:00Z";

    fn secret(user_data: &str) -> Secret {
        let mut secret = Secret {
            data: Some(BTreeMap::from([(
                USER_DATA_KEY.to_string(),
                ByteString(user_data.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        };
        secret.metadata.resource_version = Some("42".into());
        secret
    }

    fn reason(check: StubCheck) -> Reason {
        check.unwrap_err().0
    }

    #[test]
    fn accepts_ignition_3() {
        let s = secret(r#"{"ignition":{"version":"3.2.0"}}"#);
        assert_eq!(check("ns", "w", Some(&s), NOW), Ok(StubState::Spec3));
        let experimental = secret(r#"{"ignition":{"version":"3.6.0-experimental"}}"#);
        assert_eq!(
            check("ns", "w", Some(&experimental), NOW),
            Ok(StubState::Spec3)
        );
    }

    #[test]
    fn a_version_that_only_starts_like_3_is_not_ignition_3() {
        for version in ["3.junk", "3.", "3.2", "3.2.0.1", "30.1.0", "3.x.0"] {
            let s = secret(&format!(r#"{{"ignition":{{"version":"{version}"}}}}"#));
            let check = check("ns", "w", Some(&s), NOW);
            assert_eq!(reason(check), Reason::StubSecretUnconvertible, "{version}");
        }
    }

    #[test]
    fn a_spec2_pointer_config_is_upgraded_by_a_guarded_patch_keeping_the_old_one() {
        let old = r#"{"ignition":{"config":{"append":[{"source":"https://m:22623/config/worker"}]},"version":"2.2.0"}}"#;
        let Ok(StubState::Upgrade(upgrade)) = check("ns", "w", Some(&secret(old)), NOW) else {
            panic!("a spec-2 installer stub is upgraded");
        };
        assert_eq!(
            (upgrade.from_version.as_str(), upgrade.to_version),
            ("2.2.0", "3.2.0")
        );
        let mut object = serde_json::to_value(secret(old)).unwrap();
        json_patch::patch(&mut object, &upgrade.patch.0).unwrap();
        let upgraded: Secret = serde_json::from_value(object).unwrap();
        let data = upgraded.data.unwrap();
        let config: Value = serde_json::from_slice(&data[USER_DATA_KEY].0).unwrap();
        assert_eq!(config["ignition"]["version"], "3.2.0");
        assert_eq!(
            config["ignition"]["config"]["merge"][0]["source"],
            "https://m:22623/config/worker"
        );
        assert_eq!(data[PREVIOUS_USER_DATA_KEY].0, old.as_bytes());
        let annotations = upgraded.metadata.annotations.unwrap();
        assert_eq!(annotations[STUB_IGNITION_UPGRADED_TO_ANNOTATION], "3.2.0");
        assert_eq!(annotations[STUB_IGNITION_UPGRADED_AT_ANNOTATION], NOW);
        // Written against the resourceVersion read.
        let ops = serde_json::to_value(&upgrade.patch).unwrap();
        let rv =
            serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": "42"});
        assert!(ops.as_array().unwrap().contains(&rv), "{ops}");
    }

    #[test]
    fn missing_unconvertible_and_garbage_stubs_say_why() {
        assert_eq!(
            reason(check("ns", "w", None, NOW)),
            Reason::StubSecretMissing
        );
        for broken in [
            "#!/bin/bash",
            r#"{"ignition":{"version":"2.2.0"},"storage":{"files":[{"path":"/x"}]}}"#,
            r#"{"ignition":{"version":"1.0.0"}}"#,
            r#"{"ignition":{}}"#,
        ] {
            let check = check("ns", "w", Some(&secret(broken)), NOW);
            assert_eq!(reason(check), Reason::StubSecretUnconvertible, "{broken}");
        }
        let (reason, message) = check("ns", "w", Some(&Secret::default()), NOW).unwrap_err();
        assert_eq!(reason, Reason::StubSecretUnconvertible);
        assert!(message.contains("Rewrite its userData"), "{message}");
    }

    #[test]
    fn a_blanked_secret_is_unverified_not_unconvertible() {
        for elided in ["", "1934 bytes long"] {
            let (reason, message) = check("ns", "w", Some(&secret(elided)), NOW).unwrap_err();
            assert_eq!(reason, Reason::StubSecretUnverified, "{elided:?}");
            assert!(message.contains("must-gather"), "{message}");
        }
        let check = check("ns", "w", Some(&secret("bytes long")), NOW);
        assert_eq!(reason(check), Reason::StubSecretUnconvertible);
    }
}
