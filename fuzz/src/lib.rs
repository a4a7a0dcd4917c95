//! Input generators shared by the fuzz targets.
//!
//! Raw bytes rarely form a providerSpec that reaches a platform rule's interesting branches, so
//! the targets build their inputs from `arbitrary` data: values are mostly drawn from pools of
//! the strings the rules compare against (published AMIs, regions, marketplace offers, installer
//! resource IDs), then arbitrary JSON is grafted in at random places. The pools are the test
//! kit's (`testkit::generators`), which the property tests draw from too. A pure byte-level
//! target (`stream`) covers the parsers themselves.

use arbitrary::{Result, Unstructured};
use boot_image_controller::testkit::streams::*;
use serde_json::{Map, Number, Value, json};

pub use boot_image_controller::testkit::generators::{
    AMIS, AZURE_OFFERS, AZURE_PUBLISHERS, AZURE_RESOURCE_IDS, AZURE_SKUS, AZURE_VERSIONS,
    GCP_IMAGES, KEYS, KUBE_ARCHES, REGIONS, SECRET_NAMES, STREAM_ARCHES,
};
pub use boot_image_controller::testkit::provider_specs::INFRASTRUCTURE_NAME;

/// True about once in `one_in` draws, and false once the input is used up, so that short inputs
/// take the common branches (`Unstructured::ratio` answers true when out of data).
pub fn rarely(u: &mut Unstructured<'_>, one_in: u8) -> Result<bool> {
    Ok(!u.ratio(one_in - 1, one_in)?)
}

/// Picks one element of a non-empty pool.
pub fn pick<'a>(u: &mut Unstructured<'_>, pool: &[&'a str]) -> Result<&'a str> {
    Ok(*u.choose(pool)?)
}

/// A string: mostly from the pools above, sometimes anything.
pub fn string(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(match u.int_in_range(0..=7)? {
        0 => pick(u, AMIS)?.to_string(),
        1 => pick(u, REGIONS)?.to_string(),
        2 => pick(u, GCP_IMAGES)?.to_string(),
        3 => pick(u, AZURE_RESOURCE_IDS)?.to_string(),
        4 => pick(u, SECRET_NAMES)?.to_string(),
        5 => pick(u, KEYS)?.to_string(),
        _ => u.arbitrary()?,
    })
}

fn key(u: &mut Unstructured<'_>) -> Result<String> {
    if u.ratio(3, 4)? {
        Ok(pick(u, KEYS)?.to_string())
    } else {
        u.arbitrary()
    }
}

/// Any JSON value, at most `depth` levels deep.
pub fn value(u: &mut Unstructured<'_>, depth: u32) -> Result<Value> {
    let top = if depth == 0 { 4 } else { 6 };
    Ok(match u.int_in_range(0..=top)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => {
            if u.arbitrary()? {
                Value::Number(Number::from(u.arbitrary::<i64>()?))
            } else {
                Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number)
            }
        }
        3 | 4 => Value::String(string(u)?),
        5 => {
            let len = u.int_in_range(0..=3)?;
            Value::Array(
                (0..len)
                    .map(|_| value(u, depth - 1))
                    .collect::<Result<_>>()?,
            )
        }
        _ => {
            let len = u.int_in_range(0..=4)?;
            let mut map = Map::new();
            for _ in 0..len {
                map.insert(key(u)?, value(u, depth - 1)?);
            }
            Value::Object(map)
        }
    })
}

/// Randomly replaces, removes or adds nodes of `v`, keeping most of its shape.
pub fn mutate(u: &mut Unstructured<'_>, v: &mut Value, depth: u32) -> Result<()> {
    if u.is_empty() {
        return Ok(());
    }
    if rarely(u, 12)? {
        *v = value(u, depth.min(2))?;
        return Ok(());
    }
    match v {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                if rarely(u, 16)? {
                    map.remove(&k);
                } else if depth > 0
                    && let Some(child) = map.get_mut(&k)
                {
                    mutate(u, child, depth - 1)?;
                }
            }
            if rarely(u, 10)? {
                map.insert(key(u)?, value(u, depth.min(2))?);
            }
        }
        Value::Array(items) => {
            for item in items.iter_mut() {
                if depth > 0 {
                    mutate(u, item, depth - 1)?;
                }
            }
            if rarely(u, 10)? {
                items.push(value(u, depth.min(2))?);
            }
        }
        _ => {}
    }
    Ok(())
}

/// A stream in the CoreOS format with arbitrary content, occasionally bent out of shape.
pub fn stream(u: &mut Unstructured<'_>) -> Result<Value> {
    if u.ratio(1, 3)? {
        let mut s = stream_421_all_platforms();
        if rarely(u, 2)? {
            mutate(u, &mut s, 6)?;
        }
        return Ok(s);
    }
    let mut arches = Map::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let arch = if u.ratio(7, 8)? {
            pick(u, STREAM_ARCHES)?.to_string()
        } else {
            u.arbitrary()?
        };
        let release = pick(u, &["9.6.20251023-0", "9.6.20250826-1", ""])?;
        let mut regions = Map::new();
        for _ in 0..u.int_in_range(0..=3)? {
            regions.insert(
                pick(u, REGIONS)?.to_string(),
                json!({"release": release, "image": pick(u, AMIS)?}),
            );
        }
        let mut entry = json!({
            "artifacts": {"aws": {"release": release}, "gcp": {"release": release}},
            "images": {"aws": {"regions": regions}}
        });
        if u.arbitrary()? {
            let name = pick(u, GCP_IMAGES)?;
            let name = name.rsplit('/').next().unwrap_or(name);
            entry["images"]["gcp"] = json!({
                "release": release,
                "project": pick(u, &["rhcos-cloud", "acme", ""])?,
                "name": name
            });
        }
        if u.arbitrary()? {
            let mut variants = Map::new();
            for _ in 0..u.int_in_range(0..=3)? {
                let variant = pick(
                    u,
                    &["no-purchase-plan", "ocp", "opp", "oke", "ocp-emea", "x"],
                )?;
                variants.insert(
                    variant.to_string(),
                    marketplace(
                        pick(u, AZURE_PUBLISHERS)?,
                        pick(u, AZURE_OFFERS)?,
                        pick(u, AZURE_SKUS)?,
                        pick(u, AZURE_SKUS)?,
                        pick(u, AZURE_VERSIONS)?,
                    ),
                );
            }
            entry["rhel-coreos-extensions"] = json!({"marketplace": {"azure": variants}});
        }
        arches.insert(arch, entry);
    }
    let mut s = json!({
        "stream": pick(u, &["rhcos-4.21", "rhcos-4.20", "rhel-coreos-10", ""])?,
        "architectures": arches
    });
    if rarely(u, 4)? {
        mutate(u, &mut s, 6)?;
    }
    Ok(s)
}

/// Which platform a generated providerSpec imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, arbitrary::Arbitrary)]
pub enum Shape {
    Aws,
    Gcp,
    Azure,
    Anything,
}

/// A providerSpec in the shape of `shape`, with stray values grafted in now and then.
pub fn provider_spec(u: &mut Unstructured<'_>, shape: Shape) -> Result<Value> {
    let mut spec = match shape {
        Shape::Aws => {
            let ami = match u.int_in_range(0..=5)? {
                4 => json!({"arn": string(u)?}),
                5 => json!({"filters": [{"name": "tag:Name", "values": [string(u)?]}]}),
                _ => json!({"id": pick(u, AMIS)?}),
            };
            json!({
                "apiVersion": "machine.openshift.io/v1beta1", "kind": "AWSMachineProviderConfig",
                "ami": ami,
                "placement": {"availabilityZone": "a", "region": pick(u, REGIONS)?},
                "instanceType": "m6i.xlarge",
                "metadata": {"creationTimestamp": null}
            })
        }
        Shape::Gcp => {
            let mut disks = Vec::new();
            for _ in 0..u.int_in_range(0..=3)? {
                disks.push(json!({
                    "autoDelete": true,
                    "boot": u.ratio(2, 3)?,
                    "image": pick(u, GCP_IMAGES)?,
                    "sizeGb": 128
                }));
            }
            json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "GCPMachineProviderSpec", "disks": disks})
        }
        Shape::Azure => {
            let image = if u.arbitrary()? {
                json!({"publisher": "", "offer": "", "sku": "", "version": "",
                       "resourceID": pick(u, AZURE_RESOURCE_IDS)?})
            } else {
                json!({
                    "publisher": pick(u, AZURE_PUBLISHERS)?,
                    "offer": pick(u, AZURE_OFFERS)?,
                    "sku": pick(u, AZURE_SKUS)?,
                    "version": pick(u, AZURE_VERSIONS)?,
                    "resourceID": "",
                    "type": pick(u, &["MarketplaceWithPlan", "MarketplaceNoPlan", "ID", ""])?
                })
            };
            let mut spec = json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "AzureMachineProviderSpec", "image": image});
            if rarely(u, 6)? {
                spec["securityProfile"] = json!({"settings": {"securityType": pick(u, &["TrustedLaunch", "ConfidentialVM", ""])?}});
            }
            spec
        }
        Shape::Anything => value(u, 5)?,
    };
    if let Some(map) = spec.as_object_mut()
        && u.ratio(7, 8)?
    {
        map.insert(
            "userDataSecret".into(),
            json!({"name": pick(u, SECRET_NAMES)?}),
        );
    }
    if rarely(u, 3)? {
        mutate(u, &mut spec, 5)?;
    }
    Ok(spec)
}
