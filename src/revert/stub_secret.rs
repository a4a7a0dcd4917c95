//! Reverting a stub secret the controller upgraded in place (see `plan::stub`): its spec-2
//! `userData`, kept by the upgrade under [`PREVIOUS_USER_DATA_KEY`], is put back, because the
//! boot image a revert restores is old enough to read only spec 2.
//!
//! A stub is shared: every MachineSet of a role usually names `worker-user-data`. Putting spec
//! 2 back for one of them would leave the others, on new images, with a stub they cannot read;
//! so the revert refuses while other machine resources name it, unless told to keep the stub
//! as it is.

use serde::Serialize;
use serde_json::Value;

use crate::api::Secret;
use crate::names::{
    PREVIOUS_USER_DATA_KEY, STUB_IGNITION_UPGRADED_AT_ANNOTATION,
    STUB_IGNITION_UPGRADED_TO_ANNOTATION,
};
use crate::plan::Patch;
use crate::plan::patch::{Guarded, RESOURCE_VERSION, annotation, remove_annotation};
use crate::plan::stub::{PREVIOUS_USER_DATA, USER_DATA, USER_DATA_KEY};

/// The restore of one stub secret, ready to send, and the patch that undoes it should the
/// machine resource's own revert fail after it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StubRestore {
    pub name: String,
    /// The version the upgrade wrote, as its annotation says.
    pub upgraded_to: Option<String>,
    /// Guarded by the resourceVersion and the `userData` read: the spec-2 `userData` back, the
    /// kept copy and the upgrade's annotations removed.
    pub patch: Patch,
    /// The secret as it was read, written back over the restore (guarded by the restored
    /// `userData`).
    #[serde(skip)]
    pub undo: Patch,
}

/// The restore of `secret`, when the controller upgraded it (it keeps the previous `userData`).
pub fn restore(secret: &Secret) -> Option<StubRestore> {
    let data = secret.data.as_ref()?;
    let previous = data.get(PREVIOUS_USER_DATA_KEY)?;
    let current = data.get(USER_DATA_KEY)?;
    let base64 = |bytes: &k8s_openapi::ByteString| {
        serde_json::to_value(bytes).expect("bytes serialize as base64")
    };
    let (previous, current) = (base64(previous), base64(current));
    let meta = &secret.metadata;
    let mut patch = Patch::default();
    if let Some(rv) = &meta.resource_version {
        patch.test(RESOURCE_VERSION.to_buf(), rv.as_str());
    }
    patch.guarded_replace(USER_DATA.to_buf(), current.clone(), previous.clone());
    patch.test(PREVIOUS_USER_DATA.to_buf(), previous.clone());
    patch.remove(PREVIOUS_USER_DATA.to_buf());
    for key in [
        STUB_IGNITION_UPGRADED_TO_ANNOTATION,
        STUB_IGNITION_UPGRADED_AT_ANNOTATION,
    ] {
        remove_annotation(&mut patch, meta, key);
    }
    let mut undo = Patch::default();
    undo.guarded_replace(USER_DATA.to_buf(), previous.clone(), current.clone());
    undo.add(PREVIOUS_USER_DATA.to_buf(), previous.clone());
    for key in [
        STUB_IGNITION_UPGRADED_TO_ANNOTATION,
        STUB_IGNITION_UPGRADED_AT_ANNOTATION,
    ] {
        if let Some(value) = meta.annotations.as_ref().and_then(|a| a.get(key)) {
            undo.add(annotation(key), value.as_str());
        }
    }
    let upgraded_to = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(STUB_IGNITION_UPGRADED_TO_ANNOTATION))
        .cloned();
    Some(StubRestore {
        name: meta.name.clone().unwrap_or_default(),
        upgraded_to,
        patch,
        undo,
    })
}

/// The machine resources among `objects` (as JSON, of any kind) other than `except` whose
/// provider spec names the stub secret `name`.
pub fn other_users<'a>(
    objects: impl IntoIterator<Item = &'a Value>,
    except: &str,
    name: &str,
) -> Vec<String> {
    objects
        .into_iter()
        .filter(|o| o.pointer("/metadata/name").and_then(Value::as_str) != Some(except))
        .filter(|o| {
            crate::machine_kind::MachineKind::ALL
                .iter()
                .filter(|k| !k.is_cluster_api())
                .filter_map(|k| o.pointer(k.provider_spec_path().as_str()))
                .any(|spec| crate::plan::stub::current_name(spec) == Some(name))
        })
        .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::stub::{StubState, check};

    /// A spec-2 stub upgraded by the planner's own patch, as the API server would store it.
    fn upgraded() -> (Value, Value) {
        let old = r#"{"ignition":{"config":{"append":[{"source":"https://m:22623/config/worker"}]},"version":"2.2.0"}}"#;
        let b64 = serde_json::to_value(k8s_openapi::ByteString(old.as_bytes().to_vec())).unwrap();
        let before = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "worker-user-data", "namespace": "ns", "resourceVersion": "5",
                         "annotations": {"kept": "yes"}},
            "data": {"userData": b64, "disableTemplating": "dHJ1ZQ=="}
        });
        let secret: Secret = serde_json::from_value(before.clone()).unwrap();
        let Ok(StubState::Upgrade(upgrade)) = check("ns", "worker-user-data", Some(&secret), "t")
        else {
            panic!("a spec-2 stub is upgraded");
        };
        let mut after = before.clone();
        json_patch::patch(&mut after, &upgrade.patch.0).unwrap();
        after["metadata"]["resourceVersion"] = json!("6");
        (before, after)
    }

    #[test]
    fn the_restore_puts_back_exactly_what_the_upgrade_replaced() {
        let (before, after) = upgraded();
        let secret: Secret = serde_json::from_value(after.clone()).unwrap();
        let restore = restore(&secret).expect("an upgraded stub can be restored");
        assert_eq!(restore.upgraded_to.as_deref(), Some("3.2.0"));
        let mut restored = after.clone();
        json_patch::patch(&mut restored, &restore.patch.0).unwrap();
        restored["metadata"]["resourceVersion"] = json!("5");
        assert_eq!(restored, before);
        // And the undo gives the upgraded secret back.
        let mut undone = restored.clone();
        json_patch::patch(&mut undone, &restore.undo.0).unwrap();
        undone["metadata"]["resourceVersion"] = json!("6");
        assert_eq!(undone, after);
    }

    #[test]
    fn a_stub_the_controller_never_upgraded_has_nothing_to_restore() {
        let (before, _) = upgraded();
        assert_eq!(restore(&serde_json::from_value(before).unwrap()), None);
    }

    #[test]
    fn other_users_are_the_other_objects_naming_the_stub() {
        let ms = |name: &str, stub: &str| {
            json!({"metadata": {"name": name},
                   "spec": {"template": {"spec": {"providerSpec": {"value": {"userDataSecret": {"name": stub}}}}}}})
        };
        let objects = [
            ms("a", "worker-user-data"),
            ms("b", "worker-user-data"),
            ms("c", "infra-user-data"),
        ];
        assert_eq!(other_users(&objects, "a", "worker-user-data"), ["b"]);
        assert!(other_users(&objects, "c", "infra-user-data").is_empty());
    }
}
