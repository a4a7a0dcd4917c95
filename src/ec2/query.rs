//! The EC2 Query API's DescribeImages: the parameters we send and the XML we read back.
//! Pure, so the parsing is tested on EC2's documented response shapes without a network.

use crate::facts::ec2::{AmiFacts, MARKETPLACE_OWNER};

/// The EC2 API version the Query API is asked in (the current one since 2016).
pub const API_VERSION: &str = "2016-11-15";

/// At most this many AMI ids in one request's filter: EC2 allows 200 values per filter.
pub const IDS_PER_REQUEST: usize = 100;

/// What EC2 said when it refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ec2Error {
    /// Too many requests (`RequestLimitExceeded`, `Throttling`): back off and ask again.
    #[error("EC2 throttled the request ({code}): {message}")]
    Throttled { code: String, message: String },
    /// The credentials or their permissions (`AuthFailure`, `UnauthorizedOperation`, ...).
    #[error("EC2 refused the request ({code}): {message}; the credentials need ec2:DescribeImages")]
    Refused { code: String, message: String },
    /// Any other error EC2 answered with.
    #[error("EC2 answered HTTP {status} ({code}): {message}")]
    Failed {
        status: u16,
        code: String,
        message: String,
    },
    /// STS would not exchange the ServiceAccount token for credentials (`AccessDenied`: the
    /// role does not trust this ServiceAccount; `ExpiredTokenException`, `InvalidIdentityToken`).
    #[error(
        "STS refused AssumeRoleWithWebIdentity ({code}): {message}; the role must trust this \
         ServiceAccount's current tokens (docs/platforms/aws.md)"
    )]
    StsRefused { code: String, message: String },
    #[error("cannot reach {endpoint}: {message}")]
    Unreachable { endpoint: String, message: String },
    #[error("EC2 did not answer within {0:?}")]
    TimedOut(std::time::Duration),
    #[error("cannot read EC2's answer: {0}")]
    Malformed(String),
}

impl Ec2Error {
    /// Whether asking again soon may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            Ec2Error::Throttled { .. } | Ec2Error::TimedOut(_) | Ec2Error::Unreachable { .. } => {
                true
            }
            Ec2Error::Failed { status, .. } => *status >= 500,
            Ec2Error::Refused { .. } | Ec2Error::StsRefused { .. } | Ec2Error::Malformed(_) => {
                false
            }
        }
    }

    /// A call's outcome as a bounded label for the requests metric.
    pub fn outcome<T>(result: &Result<T, Ec2Error>) -> &'static str {
        let Err(e) = result else { return "ok" };
        match e {
            Ec2Error::Throttled { .. } => "throttled",
            Ec2Error::Refused { .. } | Ec2Error::StsRefused { .. } => "refused",
            Ec2Error::Failed { .. } => "failed",
            Ec2Error::Unreachable { .. } => "unreachable",
            Ec2Error::TimedOut(_) => "timeout",
            Ec2Error::Malformed(_) => "malformed",
        }
    }
}

/// Parameters of DescribeImages for these AMI ids. A filter on `image-id` rather than
/// `ImageId.N`: with ids, one unknown AMI fails the whole request (`InvalidAMIID.NotFound`),
/// with a filter it is simply absent from the answer. Deprecated AMIs are included: EC2
/// deprecates public AMIs two years after their creation, and a MachineSet installed then
/// still boots from one.
pub fn describe_by_ids(ids: &[&str]) -> Vec<(String, String)> {
    let mut params = base();
    params.push(("Filter.1.Name".into(), "image-id".into()));
    for (n, id) in ids.iter().enumerate() {
        params.push((format!("Filter.1.Value.{}", n + 1), id.to_string()));
    }
    params.push(("IncludeDeprecated".into(), "true".into()));
    params
}

/// Parameters of DescribeImages for the marketplace AMIs of one product: the marketplace
/// account's images whose name contains the product id (the MCO's `findMarketplaceAMI` search),
/// available ones only. Deprecated ones are left out, as the MCO leaves them: a new boot image
/// should not be one AWS already retires.
pub fn describe_marketplace(product: &str) -> Vec<(String, String)> {
    let mut params = base();
    params.push(("Owner.1".into(), MARKETPLACE_OWNER.into()));
    params.push(("Filter.1.Name".into(), "name".into()));
    params.push(("Filter.1.Value.1".into(), format!("*{product}*")));
    params.push(("Filter.2.Name".into(), "state".into()));
    params.push(("Filter.2.Value.1".into(), "available".into()));
    params
}

fn base() -> Vec<(String, String)> {
    vec![
        ("Action".into(), "DescribeImages".into()),
        ("Version".into(), API_VERSION.into()),
    ]
}

/// One page of a DescribeImages answer.
#[derive(Debug, Default, PartialEq)]
pub struct Page {
    pub images: Vec<AmiFacts>,
    pub next_token: Option<String>,
}

/// Reads a DescribeImages response body; `region` is the region asked.
pub fn parse_images(body: &str, region: &str) -> Result<Page, Ec2Error> {
    let doc = roxmltree::Document::parse(body).map_err(|e| Ec2Error::Malformed(e.to_string()))?;
    let root = doc.root_element();
    if root.tag_name().name() != "DescribeImagesResponse" {
        return Err(Ec2Error::Malformed(format!(
            "expected DescribeImagesResponse, got {}",
            root.tag_name().name()
        )));
    }
    let mut page = Page {
        next_token: child_text(root, "nextToken").filter(|t| !t.is_empty()),
        ..Page::default()
    };
    let Some(set) = child(root, "imagesSet") else {
        return Ok(page);
    };
    for item in set.children().filter(|n| is_named(n, "item")) {
        let Some(image_id) = child_text(item, "imageId") else {
            continue;
        };
        page.images.push(AmiFacts {
            image_id,
            region: region.to_string(),
            owner_id: child_text(item, "imageOwnerId").unwrap_or_default(),
            name: child_text(item, "name").unwrap_or_default(),
            description: child_text(item, "description").unwrap_or_default(),
            architecture: child_text(item, "architecture").unwrap_or_default(),
            creation_date: child_text(item, "creationDate").unwrap_or_default(),
        });
    }
    Ok(page)
}

/// Reads an error response (`<Response><Errors><Error><Code>...`) into an [`Ec2Error`].
pub fn parse_error(status: u16, body: &str) -> Ec2Error {
    let (code, message) = roxmltree::Document::parse(body)
        .ok()
        .and_then(|doc| {
            let error = doc.descendants().find(|n| is_named(n, "Error"))?;
            Some((
                child_text(error, "Code").unwrap_or_default(),
                child_text(error, "Message").unwrap_or_default(),
            ))
        })
        .unwrap_or_else(|| (String::new(), body.chars().take(200).collect()));
    match code.as_str() {
        "RequestLimitExceeded" | "Throttling" | "ThrottlingException" => {
            Ec2Error::Throttled { code, message }
        }
        "AuthFailure"
        | "UnauthorizedOperation"
        | "InvalidClientTokenId"
        | "SignatureDoesNotMatch"
        | "OptInRequired"
        | "Blocked"
        | "AccessDenied" => Ec2Error::Refused { code, message },
        _ if status == 429 => Ec2Error::Throttled { code, message },
        _ => Ec2Error::Failed {
            status,
            code,
            message,
        },
    }
}

fn child<'a, 'i>(node: roxmltree::Node<'a, 'i>, name: &str) -> Option<roxmltree::Node<'a, 'i>> {
    node.children().find(|n| is_named(n, name))
}

pub(super) fn child_text(node: roxmltree::Node<'_, '_>, name: &str) -> Option<String> {
    child(node, name).map(|n| n.text().unwrap_or_default().trim().to_string())
}

// EC2 puts its answers in a versioned namespace; only the local names matter.
fn is_named(node: &roxmltree::Node<'_, '_>, name: &str) -> bool {
    node.is_element() && node.tag_name().name() == name
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of EC2's documented DescribeImages response, nested `item`s included.
    const ANSWER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeImagesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>59dbff89-35bd-4eac-99ed-be587EXAMPLE</requestId>
  <imagesSet>
    <item>
      <imageId>ami-0a1b2c3d4e5f60718</imageId>
      <imageLocation>aws-marketplace/RHEL-9.4-RHCOS-9.6_HVM_GA-20260210-x86_64-0-59ead7de-2540-4653-a8b0-fa7926d5c845</imageLocation>
      <imageState>available</imageState>
      <imageOwnerId>679593333241</imageOwnerId>
      <creationDate>2026-02-10T12:00:00.000Z</creationDate>
      <isPublic>true</isPublic>
      <architecture>x86_64</architecture>
      <name>RHEL-9.4-RHCOS-9.6_HVM_GA-20260210-x86_64-0-59ead7de-2540-4653-a8b0-fa7926d5c845</name>
      <description>RHEL CoreOS 9.6 9.6.20260210-0 x86_64</description>
      <blockDeviceMapping>
        <item><deviceName>/dev/xvda</deviceName><ebs><snapshotId>snap-1</snapshotId></ebs></item>
      </blockDeviceMapping>
      <tagSet><item><key>imageId</key><value>not-this</value></item></tagSet>
    </item>
    <item>
      <imageId>ami-0123456789abcdef0</imageId>
      <imageOwnerId>123456789012</imageOwnerId>
      <architecture>arm64</architecture>
    </item>
  </imagesSet>
  <nextToken>page-2</nextToken>
</DescribeImagesResponse>"#;

    #[test]
    fn reads_each_image_of_the_answer() {
        let page = parse_images(ANSWER, "us-east-1").unwrap();
        assert_eq!(page.next_token.as_deref(), Some("page-2"));
        assert_eq!(page.images.len(), 2);
        let first = &page.images[0];
        assert_eq!(first.image_id, "ami-0a1b2c3d4e5f60718");
        assert_eq!(first.owner_id, "679593333241");
        assert_eq!(first.architecture, "x86_64");
        assert_eq!(first.region, "us-east-1");
        assert_eq!(first.rhcos_release(), Some("9.6.20260210-0"));
        assert_eq!(page.images[1].name, "");
    }

    #[test]
    fn an_empty_answer_is_no_images() {
        let body = r#"<DescribeImagesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
            <requestId>x</requestId><imagesSet/></DescribeImagesResponse>"#;
        assert_eq!(parse_images(body, "eu-west-1").unwrap(), Page::default());
        assert!(matches!(
            parse_images("<Other/>", "r"),
            Err(Ec2Error::Malformed(_))
        ));
        assert!(matches!(
            parse_images("not xml", "r"),
            Err(Ec2Error::Malformed(_))
        ));
    }

    #[test]
    fn errors_are_told_apart_by_code() {
        let body = |code: &str| {
            format!(
                "<Response><Errors><Error><Code>{code}</Code><Message>m</Message></Error>\
                 </Errors><RequestID>r</RequestID></Response>"
            )
        };
        let throttled = parse_error(503, &body("RequestLimitExceeded"));
        assert!(matches!(throttled, Ec2Error::Throttled { .. }));
        assert!(throttled.is_transient());
        let refused = parse_error(403, &body("UnauthorizedOperation"));
        assert!(matches!(refused, Ec2Error::Refused { .. }));
        assert!(!refused.is_transient());
        assert!(refused.to_string().contains("ec2:DescribeImages"));
        assert!(parse_error(500, "<html>oops</html>").is_transient());
        assert!(!parse_error(400, &body("InvalidParameterValue")).is_transient());
    }

    #[test]
    fn parameters_name_every_id_and_include_deprecated_amis() {
        let params = describe_by_ids(&["ami-1", "ami-2"]);
        assert!(params.contains(&("Filter.1.Value.2".into(), "ami-2".into())));
        assert!(params.contains(&("IncludeDeprecated".into(), "true".into())));
        let params = describe_marketplace("abc");
        assert!(params.contains(&("Filter.1.Value.1".into(), "*abc*".into())));
        assert!(params.contains(&("Owner.1".into(), "679593333241".into())));
    }
}
