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
use std::time::Duration;

use crate::facts::ec2::{AmiFacts, AmiOrigin, Ec2Facts};

/// A marketplace search waits this long after the call before it (EC2 throttles per account,
/// and the machine API shares the account's budget).
const MIN_CALL_INTERVAL: Duration = Duration::from_secs(1);

/// What to ask EC2 in one region: AMIs by id, and marketplace products to search.
#[derive(Debug)]
pub struct RegionLookup {
    pub region: String,
    pub ids: Vec<String>,
    pub products: BTreeSet<String>,
}

/// One answer of a [`RegionLookup`].
pub enum Answered {
    Image(AmiFacts),
    /// EC2 does not show this AMI (deregistered, or private to another account).
    NotFound(String),
    /// The AMIs of a marketplace product.
    Search(String, Vec<AmiFacts>),
}

/// Asks EC2 what `lookup` says, and searches the marketplace products of the AMIs found unless
/// `searched_lately`; `count` sees each call's outcome and `answered` each answer as it comes,
/// so a failure keeps the answers before it. The one path of `plan --ec2-lookup` and of the
/// controller's look-ups.
pub async fn ask_region(
    client: &client::Ec2Client,
    credentials: &sigv4::Credentials,
    lookup: RegionLookup,
    searched_lately: impl Fn(&str) -> bool,
    count: impl Fn(&str, &str),
    mut answered: impl FnMut(Answered),
) -> Result<(), query::Ec2Error> {
    let region = lookup.region.as_str();
    let mut products = lookup.products;
    if !lookup.ids.is_empty() {
        let ids: Vec<&str> = lookup.ids.iter().map(String::as_str).collect();
        let requests = ids
            .chunks(query::IDS_PER_REQUEST)
            .map(query::describe_by_ids);
        let found = client.describe(region, credentials, requests).await;
        count("images", query::Ec2Error::outcome(&found));
        let found = found?;
        for id in lookup.ids {
            let Some(image) = found.iter().find(|i| i.image_id == id) else {
                answered(Answered::NotFound(id));
                continue;
            };
            if let AmiOrigin::Marketplace { product } = image.origin()
                && !searched_lately(&product)
            {
                products.insert(product);
            }
            answered(Answered::Image(image.clone()));
        }
    }
    for product in products {
        tokio::time::sleep(MIN_CALL_INTERVAL).await;
        let params = query::describe_marketplace(&product);
        let images = client.describe(region, credentials, [params]).await;
        count("marketplace", query::Ec2Error::outcome(&images));
        answered(Answered::Search(product, images?));
    }
    Ok(())
}

/// One look-up per region of the (region, AMI) pairs of `wanted`, asking about all its AMIs.
pub fn lookups(wanted: &BTreeSet<(String, String)>) -> Vec<RegionLookup> {
    let mut lookups: Vec<RegionLookup> = Vec::new();
    // Sorted by region: a region's AMIs come one after the other.
    for (region, id) in wanted {
        match lookups.last_mut() {
            Some(last) if last.region == *region => last.ids.push(id.clone()),
            _ => lookups.push(RegionLookup {
                region: region.clone(),
                ids: vec![id.clone()],
                products: BTreeSet::new(),
            }),
        }
    }
    lookups
}

/// Asks EC2 about `wanted` at once, region by region, and the marketplace products they belong
/// to: for `plan`, which waits for the answers (the controller asks in the background).
pub async fn gather(
    client: &client::Ec2Client,
    credentials: &sigv4::Credentials,
    wanted: &BTreeSet<(String, String)>,
) -> Ec2Facts {
    let mut facts = Ec2Facts::consulted();
    for lookup in lookups(wanted) {
        let region = lookup.region.clone();
        let record = |answer| match answer {
            Answered::Image(image) => facts.add_image(image),
            Answered::NotFound(id) => facts.add_not_found(&region, &id),
            Answered::Search(product, images) => {
                images.into_iter().for_each(|image| facts.add_image(image));
                facts.add_search(&region, &product);
            }
        };
        let asked = ask_region(client, credentials, lookup, |_| false, |_, _| {}, record).await;
        if let Err(e) = asked {
            facts.set_unavailable(&region, e.to_string());
        }
    }
    facts
}
