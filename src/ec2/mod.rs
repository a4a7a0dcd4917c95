//! EC2: what Amazon says about the AMIs MachineSets boot, so that standard RHCOS,
//! AWS Marketplace and custom AMIs can be told apart by their owner, as the Machine Config
//! Operator does since it stopped compiling in a list of AMIs.
//!
//! What it answers is plain data the planner reads ([`Ec2Facts`], in `crate::facts`); [`query`] and
//! [`sigv4`] build and read DescribeImages requests; [`sts`] reads credentials Secrets and
//! exchanges a ServiceAccount token for temporary credentials; [`client`] sends both.

pub(crate) mod client;
pub(crate) mod query;
pub(crate) mod sigv4;
pub(crate) mod sts;

use std::collections::BTreeSet;

use crate::facts::ec2::{AmiOrigin, Ec2Facts};

/// Asks EC2 about `wanted` at once, region by region, and the marketplace products they belong
/// to: for `plan`, which waits for the answers (the controller asks in the background).
pub async fn gather(
    client: &client::Ec2Client,
    credentials: &sigv4::Credentials,
    wanted: &BTreeSet<(String, String)>,
) -> Ec2Facts {
    let mut facts = Ec2Facts::consulted();
    let mut by_region: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (region, id) in wanted {
        by_region.entry(region).or_default().push(id);
    }
    for (region, ids) in by_region {
        if let Err(e) = gather_region(client, credentials, region, &ids, &mut facts).await {
            facts.set_unavailable(region, e.to_string());
        }
    }
    facts
}

async fn gather_region(
    client: &client::Ec2Client,
    credentials: &sigv4::Credentials,
    region: &str,
    ids: &[&str],
    facts: &mut Ec2Facts,
) -> Result<(), query::Ec2Error> {
    let found = client.describe_ids(region, credentials, ids).await?;
    let mut products = BTreeSet::new();
    for id in ids {
        match found.iter().find(|i| i.image_id == *id) {
            Some(image) => {
                if let AmiOrigin::Marketplace { product } = image.origin() {
                    products.insert(product);
                }
                facts.add_image(image.clone());
            }
            None => facts.add_not_found(region, id),
        }
    }
    for product in products {
        let images = (client.describe_marketplace(region, credentials, &product)).await?;
        for image in images {
            facts.add_image(image);
        }
        facts.add_search(region, &product);
    }
    Ok(())
}
