//! Ignition pointer configs: a spec-2 one read and written again as spec 3.
//!
//! The Machine Config Operator upgrades a spec-2 stub in place before it moves a MachineSet to
//! a new boot image (openshift/machine-config-operator, pkg/controller/bootimage/helpers.go,
//! `upgradeStubIgnitionIfRequired`), with its general converter (pkg/controller/common,
//! `ParseAndConvertConfig`: Ignition's v2_2 parser, then ign-converter's `v23tov30` and the
//! v3 translations). A stub is a pointer config: where to fetch the real config and which CAs
//! to trust. We convert exactly that part, the `ignition` section, as `v23tov30.Translate` does
//! (`config.append` becomes `config.merge`; `replace`, the CAs and the timeouts keep their
//! shape); a stub that carries more (files, units, users, disks) is not converted here, and its
//! MachineSet keeps its boot image until an administrator converts it.

use serde_json::{Map, Value, json};

/// The spec the upgraded stub is written in. The MCO goes from spec 2 to 3.2 first (the
/// `v2.2 -> v3.2` step of `buildConverterList`, pkg/controller/common/ignition_converter.go)
/// and then on to its internal 3.5.0; we stop at 3.2.0, which carries every field of a spec-2
/// pointer config and which the Ignition of every spec-3 boot image of the releases we serve
/// reads, older ones included.
pub const TARGET_VERSION: &str = "3.2.0";

/// The spec-2 versions the MCO's converter reads: its v2_2 parser takes 2.0 to 2.2
/// (pkg/controller/common/helpers.go, `IgnParseWrapper`, `ign2.Parse`).
const SPEC2_VERSIONS: [&str; 3] = ["2.0.0", "2.1.0", "2.2.0"];

/// Why a config is not converted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotConverted {
    #[error(
        "has Ignition version {0:?}, which is not a spec-2 version this controller converts (2.0.0, 2.1.0, 2.2.0)"
    )]
    Version(String),
    #[error(
        "holds more than a pointer config ({0}); this controller converts only the pointer \
         part (the ignition section) of a spec-2 stub"
    )]
    NotPointerOnly(String),
    #[error("has an invalid {0}")]
    Invalid(String),
}

/// Whether `version` is a spec-2 version the converter reads.
pub fn is_spec2(version: &str) -> bool {
    SPEC2_VERSIONS.contains(&version)
}

/// The spec-3 form of a spec-2 pointer config.
pub fn to_spec3(config: &Value) -> Result<Value, NotConverted> {
    let top = config
        .as_object()
        .ok_or_else(|| NotConverted::Invalid("config (not a JSON object)".into()))?;
    for (section, value) in top {
        if section != "ignition" && !is_empty_section(value) {
            return Err(NotConverted::NotPointerOnly(format!(
                "a non-empty {section} section"
            )));
        }
    }
    let ignition = object(top.get("ignition"), "ignition section")?.unwrap_or_default();
    let version = ignition
        .get("version")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !is_spec2(version) {
        return Err(NotConverted::Version(version.to_string()));
    }
    let mut out = Map::new();
    for (key, value) in &ignition {
        match key.as_str() {
            "version" => {}
            "config" => {
                let config = convert_config(value)?;
                if !config.is_empty() {
                    out.insert("config".into(), Value::Object(config));
                }
            }
            "security" => {
                if let Some(security) = convert_security(value)? {
                    out.insert("security".into(), security);
                }
            }
            "timeouts" => {
                let timeouts = object(Some(value), "ignition.timeouts")?.unwrap_or_default();
                for (name, t) in &timeouts {
                    let known = matches!(name.as_str(), "httpResponseHeaders" | "httpTotal");
                    if !known || !(t.is_null() || t.is_i64()) {
                        return Err(NotConverted::Invalid(format!("ignition.timeouts.{name}")));
                    }
                }
                out.insert("timeouts".into(), Value::Object(timeouts));
            }
            other => return Err(NotConverted::Invalid(format!("field ignition.{other}"))),
        }
    }
    out.insert("version".into(), Value::String(TARGET_VERSION.into()));
    Ok(json!({ "ignition": out }))
}

/// `passwd`, `storage`, `systemd` or `networkd` as installers wrote them in a stub: absent,
/// `{}`, or lists that are all empty.
fn is_empty_section(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(fields) => fields.values().all(|v| match v {
            Value::Array(items) => items.is_empty(),
            Value::Null => true,
            _ => false,
        }),
        _ => false,
    }
}

/// `ignition.config`: `append` becomes `merge`, `replace` stays.
fn convert_config(value: &Value) -> Result<Map<String, Value>, NotConverted> {
    let mut out = Map::new();
    for (key, value) in object(Some(value), "ignition.config")?.unwrap_or_default() {
        match key.as_str() {
            "append" => {
                let merged = resources(&value, "ignition.config.append")?;
                if !merged.is_empty() {
                    out.insert("merge".into(), Value::Array(merged));
                }
            }
            "replace" if value.is_null() => {}
            "replace" => {
                out.insert(
                    "replace".into(),
                    resource(&value, "ignition.config.replace")?,
                );
            }
            other => {
                return Err(NotConverted::Invalid(format!(
                    "field ignition.config.{other}"
                )));
            }
        }
    }
    Ok(out)
}

/// `ignition.security.tls.certificateAuthorities`, the one security field of spec 2.
fn convert_security(value: &Value) -> Result<Option<Value>, NotConverted> {
    let security = object(Some(value), "ignition.security")?.unwrap_or_default();
    let mut cas = Vec::new();
    for (key, value) in &security {
        if key != "tls" {
            return Err(NotConverted::Invalid(format!(
                "field ignition.security.{key}"
            )));
        }
        for (key, value) in object(Some(value), "ignition.security.tls")?.unwrap_or_default() {
            if key != "certificateAuthorities" {
                return Err(NotConverted::Invalid(format!(
                    "field ignition.security.tls.{key}"
                )));
            }
            cas = resources(&value, "ignition.security.tls.certificateAuthorities")?;
        }
    }
    Ok((!cas.is_empty()).then(|| json!({ "tls": { "certificateAuthorities": cas } })))
}

fn resources(value: &Value, what: &str) -> Result<Vec<Value>, NotConverted> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items.iter().map(|item| resource(item, what)).collect(),
        _ => Err(NotConverted::Invalid(format!("{what} (not a list)"))),
    }
}

/// A config or CA reference: its `source` and the `hash` of its `verification`, the fields a
/// spec-2 reference has, the same in spec 3.
fn resource(value: &Value, what: &str) -> Result<Value, NotConverted> {
    let invalid = || NotConverted::Invalid(what.to_string());
    let fields = value.as_object().ok_or_else(invalid)?;
    for (key, field) in fields {
        match key.as_str() {
            "source" if field.is_string() => {}
            "verification" => {
                let verification = object(Some(field), what)?.unwrap_or_default();
                let hash_only = verification
                    .iter()
                    .all(|(k, v)| k == "hash" && (v.is_string() || v.is_null()));
                if !hash_only {
                    return Err(invalid());
                }
            }
            _ => return Err(invalid()),
        }
    }
    if !fields.contains_key("source") {
        return Err(invalid());
    }
    Ok(value.clone())
}

/// An optional object field: `None` when absent or null.
fn object(value: Option<&Value>, what: &str) -> Result<Option<Map<String, Value>>, NotConverted> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(fields)) => Ok(Some(fields.clone())),
        Some(_) => Err(NotConverted::Invalid(format!("{what} (not an object)"))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// An installer's spec-2 worker stub, as OpenShift 4.5 and earlier wrote it.
    fn installer_stub() -> Value {
        json!({
            "ignition": {
                "config": {"append": [{
                    "source": "https://api-int.demo.example.com:22623/config/worker",
                    "verification": {}
                }]},
                "security": {"tls": {"certificateAuthorities": [{
                    "source": "data:text/plain;charset=utf-8;base64,LS0tLS1CRUdJTi==",
                    "verification": {}
                }]}},
                "timeouts": {},
                "version": "2.2.0"
            },
            "networkd": {}, "passwd": {}, "storage": {}, "systemd": {}
        })
    }

    #[test]
    fn an_installer_stub_becomes_a_spec3_pointer_to_the_same_config() {
        let converted = to_spec3(&installer_stub()).unwrap();
        assert_eq!(
            converted,
            json!({"ignition": {
                "config": {"merge": [{
                    "source": "https://api-int.demo.example.com:22623/config/worker",
                    "verification": {}
                }]},
                "security": {"tls": {"certificateAuthorities": [{
                    "source": "data:text/plain;charset=utf-8;base64,LS0tLS1CRUdJTi==",
                    "verification": {}
                }]}},
                "timeouts": {},
                "version": "3.2.0"
            }})
        );
    }

    #[test]
    fn replace_hashes_and_timeouts_keep_their_values() {
        let stub = json!({"ignition": {
            "version": "2.1.0",
            "config": {"replace": {"source": "https://x/config", "verification": {"hash": "sha512-ab"}}},
            "timeouts": {"httpTotal": 30}
        }});
        let converted = to_spec3(&stub).unwrap();
        assert_eq!(
            converted["ignition"]["config"]["replace"],
            json!({"source": "https://x/config", "verification": {"hash": "sha512-ab"}})
        );
        assert_eq!(converted["ignition"]["timeouts"], json!({"httpTotal": 30}));
    }

    #[test]
    fn a_stub_with_files_units_or_users_is_not_converted() {
        for (section, content) in [
            (
                "storage",
                json!({"files": [{"path": "/etc/x", "filesystem": "root"}]}),
            ),
            ("systemd", json!({"units": [{"name": "a.service"}]})),
            ("passwd", json!({"users": [{"name": "core"}]})),
            ("networkd", json!({"units": [{"name": "a.network"}]})),
        ] {
            let mut stub = installer_stub();
            stub[section] = content;
            let error = to_spec3(&stub).unwrap_err();
            assert!(
                matches!(error, NotConverted::NotPointerOnly(_)),
                "{section}: {error}"
            );
        }
    }

    #[test]
    fn other_versions_and_malformed_configs_are_not_converted() {
        for version in ["2.3.0", "1.0.0", "3.2.0", ""] {
            let mut stub = installer_stub();
            stub["ignition"]["version"] = json!(version);
            assert_eq!(
                to_spec3(&stub),
                Err(NotConverted::Version(version.into())),
                "{version}"
            );
        }
        for broken in [
            json!([1]),
            json!({"ignition": "x"}),
            json!({"ignition": {"version": "2.2.0", "config": {"append": {"source": "x"}}}}),
            json!({"ignition": {"version": "2.2.0", "config": {"append": [{"url": "x"}]}}}),
            json!({"ignition": {"version": "2.2.0", "proxy": {}}}),
        ] {
            assert!(
                matches!(to_spec3(&broken), Err(NotConverted::Invalid(_))),
                "{broken}"
            );
        }
    }
}
