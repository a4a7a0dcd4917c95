//! `spec.managedBootImages` and label selectors: `Selection::for_kind` on arbitrary
//! MachineConfigurations, platforms and releases, then `selects` on arbitrary labels. No panic, and a Partial selection
//! agrees with a plain reading of the selector it was built from.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::Unstructured;
use boot_image_controller::api::MachineConfiguration;
use boot_image_controller::machine_kind::MachineKind;
use boot_image_controller::plan::selection::{Declared, Origin, Selection};
use boot_image_controller::platform::Platform;
use boot_image_controller_fuzz as g;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

const LABEL_KEYS: &[&str] = &[
    "boot",
    "zone",
    "tier",
    "machine.openshift.io/cluster-api-machine-role",
    "example.com/team",
    "",
    "bad key!",
];
const LABEL_VALUES: &[&str] = &["yes", "no", "a", "b", "", "worker", "x y"];
const OPERATORS: &[&str] = &["In", "NotIn", "Exists", "DoesNotExist", "in", "Near", ""];

fn label_key(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    if u.ratio(7, 8)? {
        Ok(g::pick(u, LABEL_KEYS)?.to_string())
    } else {
        u.arbitrary()
    }
}

fn label_value(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    if u.ratio(7, 8)? {
        Ok(g::pick(u, LABEL_VALUES)?.to_string())
    } else {
        u.arbitrary()
    }
}

struct Requirement {
    key: String,
    operator: String,
    values: Option<Vec<String>>,
}

/// The selector as the API documents it, to compare with what `selects` says.
fn expected(
    match_labels: &BTreeMap<String, String>,
    requirements: &[Requirement],
    labels: &BTreeMap<String, String>,
) -> Option<bool> {
    let mut ok = match_labels.iter().all(|(k, v)| labels.get(k) == Some(v));
    for r in requirements {
        let values = r.values.clone().unwrap_or_default();
        let label = labels.get(&r.key);
        ok &= match r.operator.as_str() {
            "In" => label.is_some_and(|l| values.contains(l)),
            "NotIn" => label.is_none_or(|l| !values.contains(l)),
            "Exists" => label.is_some(),
            "DoesNotExist" => label.is_none(),
            _ => return None,
        };
    }
    Some(ok)
}

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let mut match_labels = BTreeMap::new();
    for _ in 0..u.int_in_range(0..=3)? {
        match_labels.insert(label_key(u)?, label_value(u)?);
    }
    let mut requirements = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let values = if u.ratio(4, 5)? {
            let n = u.int_in_range(0..=3)?;
            Some(
                (0..n)
                    .map(|_| label_value(u))
                    .collect::<arbitrary::Result<_>>()?,
            )
        } else {
            None
        };
        requirements.push(Requirement {
            key: label_key(u)?,
            operator: g::pick(u, OPERATORS)?.to_string(),
            values,
        });
    }
    let expressions: Vec<Value> = requirements
        .iter()
        .map(|r| {
            let mut e = json!({"key": r.key, "operator": r.operator});
            if let Some(v) = &r.values {
                e["values"] = json!(v);
            }
            e
        })
        .collect();
    let mode = g::pick(u, &["All", "Partial", "None", "partial", ""])?;
    let mut selection = json!({"mode": mode});
    if u.ratio(4, 5)? {
        selection["partial"] = json!({"machineResourceSelector": {
            "matchLabels": match_labels, "matchExpressions": expressions
        }});
    }
    let mut managers = Vec::new();
    for _ in 0..u.int_in_range(0..=2)? {
        managers.push(json!({
            "resource": g::pick(u, &["machinesets", "controlplanemachinesets", "machines"])?,
            "apiGroup": g::pick(u, &["machine.openshift.io", "cluster.x-k8s.io", ""])?,
            "selection": selection.clone(),
        }));
    }
    let mut spec = match u.int_in_range(0..=3)? {
        0 => json!({}),
        1 => json!({"managedBootImages": {}}),
        _ => json!({"managedBootImages": {"machineManagers": managers}}),
    };
    let mutated = g::rarely(u, 4)?;
    if mutated {
        g::mutate(u, &mut spec, 8)?;
    }
    let object = json!({
        "apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
        "metadata": {"name": "cluster"}, "spec": spec,
    });
    let Ok(mc) = serde_json::from_value::<MachineConfiguration>(object) else {
        return Ok(());
    };
    let mut labels = BTreeMap::new();
    for _ in 0..u.int_in_range(0..=4)? {
        labels.insert(label_key(u)?, label_value(u)?);
    }
    let platform = match u.int_in_range(0..=4)? {
        0 => Platform::Aws,
        1 => Platform::Gcp,
        2 => Platform::Azure,
        3 => Platform::VSphere,
        _ => Platform::Other("None".into()),
    };
    let release = *u.choose(&[
        None,
        Some((4, 16)),
        Some((4, 19)),
        Some((4, 21)),
        Some((4, 22)),
    ])?;
    let declared = Declared::read(&mc);
    for resource in MachineKind::ALL {
        let (selection, origin) = Selection::for_kind(&declared, resource, &platform, release);
        let _ = selection.describe();
        let selected = selection.selects(Some(&labels));
        // Compare only when the selector we generated is the one in effect.
        // (Cluster API MachineSets follow the MachineSets' entry.)
        let ours = !mutated
            && mode == "Partial"
            && resource.selected_as() == MachineKind::MachineSet
            && managers.len() == 1
            && mc
                .spec
                .managed_boot_images
                .as_ref()
                .and_then(|m| m.machine_managers.as_ref())
                .is_some_and(|m| {
                    m.len() == 1
                        && m[0].resource == "machinesets"
                        && m[0].api_group == "machine.openshift.io"
                        && m[0]
                            .selection
                            .partial
                            .as_ref()
                            .and_then(|p| p.machine_resource_selector.as_ref())
                            .is_some_and(|s| {
                                s.match_labels.clone().unwrap_or_default() == match_labels
                                    && s.match_expressions.as_ref().map_or(0, Vec::len)
                                        == requirements.len()
                            })
                });
        if ours {
            assert_eq!(
                origin,
                Origin::Spec,
                "the selection of {resource:?} is not the spec's"
            );
        }
        if ours
            && let (Ok(got), Some(want)) =
                (selected, expected(&match_labels, &requirements, &labels))
        {
            assert_eq!(
                got,
                want,
                "selector {match_labels:?} {:?} on {labels:?}",
                requirements
                    .iter()
                    .map(|r| (&r.key, &r.operator, &r.values))
                    .collect::<Vec<_>>()
            );
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
