//! The stub secret rule: point MachineSets at the user-data secret the MCO keeps current.
//!
//! The installer writes `<role>-user-data` once, with an Ignition config of its release; spec-2
//! stubs from old installs cannot boot current images. The MCO maintains
//! `<role>-user-data-managed` in the same namespace, so we switch to it, but only after checking
//! it exists and holds an Ignition 3.x config: pointing at a broken secret breaks scale-up.

use std::borrow::Cow;

use serde_json::Value;

use crate::api::{ProviderSpec, Secret};
use crate::machine_kind::MachineKind;
use crate::reason::Reason;

/// The stubs the installer writes (openshift/installer, pkg/asset/machines: the worker and
/// master user-data secrets). A MachineSet on one of them must move to its managed twin: an old
/// installer stub may not boot a new image. Any other name is an administrator's own stub.
pub const INSTALLER_STUBS: [&str; 2] = ["worker-user-data", "master-user-data"];

pub fn is_installer_stub(name: &str) -> bool {
    INSTALLER_STUBS.contains(&name)
}

/// Suffix of the secrets the Machine Config Operator manages.
pub const MANAGED_SUFFIX: &str = "-managed";
/// The key of the stub secret that holds the Ignition config.
pub const USER_DATA_KEY: &str = "userData";

/// The provider-spec field that names the stub secret, and the name's JSON Pointer in it.
pub const FIELD: &str = "userDataSecret";
pub const NAME_POINTER: &str = "/userDataSecret/name";

/// The provider spec's `userDataSecret.name`, whatever its type: the stub secret it names when
/// it is a string.
pub fn name_field(provider_spec: &Value) -> Option<&Value> {
    crate::json_pointer::get(provider_spec, NAME_POINTER)
}

/// The stub secret a provider spec names, if it names one.
pub fn current_name(provider_spec: &Value) -> Option<&str> {
    name_field(provider_spec)?.as_str()
}

/// [`current_name`] of a provider spec as a store keeps it, read without decoding the rest.
pub fn kept_name(provider_spec: &ProviderSpec) -> Option<Cow<'_, str>> {
    match provider_spec.at(NAME_POINTER)? {
        Cow::Borrowed(name) => name.as_str().map(Cow::Borrowed),
        Cow::Owned(Value::String(name)) => Some(Cow::Owned(name)),
        Cow::Owned(_) => None,
    }
}

/// The managed name for a stub secret, or `None` when it already is the managed one.
pub fn managed_name(current: &str) -> Option<String> {
    (!current.ends_with(MANAGED_SUFFIX)).then(|| [current, MANAGED_SUFFIX].concat())
}

/// The stub secret the planner must read for an object of `kind` whose stub is `current`: the
/// managed one it would be pointed at, or, for kinds whose stub name never changes, the current
/// one, which must be able to boot a new image.
pub fn secret_to_verify(kind: MachineKind, current: &str) -> Option<String> {
    if kind.may_change_stub_secret() {
        managed_name(current)
    } else {
        Some(current.to_string())
    }
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

/// Checks that a managed stub secret can be pointed at.
pub fn verify(
    namespace: &str,
    name: &str,
    secret: Option<&Secret>,
) -> Result<(), (Reason, String)> {
    let Some(secret) = secret else {
        return Err((
            Reason::ManagedSecretMissing,
            format!(
                "stub secret {namespace}/{name} does not exist or cannot be read; the Machine \
                 Config Operator creates it (check that it runs), and the controller reads only \
                 the secrets its RBAC names (add a custom role's secret to its Role)"
            ),
        ));
    };
    let invalid = |why: &str| {
        Err((
            Reason::ManagedSecretInvalid,
            format!(
                "stub secret {namespace}/{name} {why}; it must hold an Ignition 3.x config under {USER_DATA_KEY}"
            ),
        ))
    };
    let bytes: Option<Vec<u8>> = secret
        .data
        .as_ref()
        .and_then(|d| d.get(USER_DATA_KEY))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(USER_DATA_KEY))
                .map(|s| s.as_bytes().to_vec())
        });
    let Some(bytes) = bytes else {
        return invalid("has no userData");
    };
    // `oc adm inspect` (and so must-gather) keeps a secret's keys but replaces their values:
    // older releases with nothing, newer ones with "<N> bytes long" (openshift/oc,
    // pkg/cli/admin/inspect, `elideSecret`). Such a value says nothing about the real one:
    // unknown, not invalid Ignition.
    if is_elided(&bytes) {
        return Err((
            Reason::ManagedSecretUnverified,
            format!(
                "stub secret {namespace}/{name} has its {USER_DATA_KEY} blanked, as must-gather \
                 and `oc adm inspect` write secrets: it cannot be verified, so the stub secret is \
                 left as it is (plan on `oc get secret -o yaml` output to check it)"
            ),
        ));
    }
    let Ok(config) = serde_json::from_slice::<Value>(&bytes) else {
        return invalid("has a userData that is not JSON");
    };
    match crate::json_pointer::get(&config, "/ignition/version").and_then(Value::as_str) {
        Some(v) if is_ignition_3(v) => Ok(()),
        Some(v) => invalid(&format!("has Ignition version {v:?}")),
        None => invalid("has no ignition.version"),
    }
}

/// `3.<minor>.<patch>`, as Ignition spells its versions (a pre-release like `3.5.0-experimental`
/// included); `3.junk` is not one.
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

    use k8s_openapi::ByteString;

    use super::*;

    fn secret(user_data: &str) -> Secret {
        Secret {
            data: Some(BTreeMap::from([(
                USER_DATA_KEY.to_string(),
                ByteString(user_data.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        }
    }

    #[test]
    fn managed_name_appends_suffix_once() {
        assert_eq!(
            managed_name("worker-user-data").as_deref(),
            Some("worker-user-data-managed")
        );
        assert_eq!(managed_name("worker-user-data-managed"), None);
    }

    #[test]
    fn accepts_ignition_3() {
        let s = secret(r#"{"ignition":{"version":"3.2.0"}}"#);
        assert_eq!(verify("ns", "w", Some(&s)), Ok(()));
        let experimental = secret(r#"{"ignition":{"version":"3.6.0-experimental"}}"#);
        assert_eq!(verify("ns", "w", Some(&experimental)), Ok(()));
    }

    #[test]
    fn a_version_that_only_starts_like_3_is_not_ignition_3() {
        for version in ["3.junk", "3.", "3.2", "3.2.0.1", "30.1.0", "3.x.0"] {
            let s = secret(&format!(r#"{{"ignition":{{"version":"{version}"}}}}"#));
            let (reason, _) = verify("ns", "w", Some(&s)).unwrap_err();
            assert_eq!(reason, Reason::ManagedSecretInvalid, "{version}");
        }
    }

    #[test]
    fn rejects_missing_spec2_and_garbage() {
        assert_eq!(
            verify("ns", "w", None).unwrap_err().0,
            Reason::ManagedSecretMissing
        );
        let spec2 = secret(r#"{"ignition":{"version":"2.2.0"}}"#);
        let (reason, message) = verify("ns", "w", Some(&spec2)).unwrap_err();
        assert_eq!(reason, Reason::ManagedSecretInvalid);
        assert!(message.contains("2.2.0"), "{message}");
        let garbage = secret("#!/bin/bash");
        assert_eq!(
            verify("ns", "w", Some(&garbage)).unwrap_err().0,
            Reason::ManagedSecretInvalid
        );
        assert_eq!(
            verify("ns", "w", Some(&Secret::default())).unwrap_err().0,
            Reason::ManagedSecretInvalid
        );
    }

    #[test]
    fn a_blanked_secret_is_unverified_not_invalid() {
        for elided in ["", "1934 bytes long"] {
            let (reason, message) = verify("ns", "w", Some(&secret(elided))).unwrap_err();
            assert_eq!(reason, Reason::ManagedSecretUnverified, "{elided:?}");
            assert!(message.contains("must-gather"), "{message}");
        }
        let (reason, _) = verify("ns", "w", Some(&secret("bytes long"))).unwrap_err();
        assert_eq!(reason, Reason::ManagedSecretInvalid);
    }
}
