//! Credentials Secrets as the cloud credential operator (CCO) and `ccoctl` write them, and the
//! STS web identity exchange that turns a ServiceAccount token into temporary credentials.
//!
//! Shapes (openshift/cloud-credential-operator b187fee): in mint and passthrough mode the
//! Secret holds `aws_access_key_id` and `aws_secret_access_key`, and a `credentials` key with
//! the same in an ini `[default]` profile (pkg/aws/actuator/actuator.go,
//! `generateAWSCredentialsConfig`); with STS, `credentials` alone holds `role_arn` and
//! `web_identity_token_file` in `[default]` (`secretManifestsTemplate` of
//! pkg/cmd/provisioning/aws/create-iam-roles.go for `ccoctl aws create-iam-roles`, and
//! `awsSTSCredsTemplate` of actuator.go when the CCO writes it in manual mode). The Machine
//! Config Operator also reads `role_arn` and `web_identity_token_file` as keys of their own
//! (pkg/controller/bootimage/aws_helpers.go, `newAWSEC2Client`, main 7ff337a), and, like it, a
//! web identity is preferred to keys.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::query::{Ec2Error, child_text};
use super::sigv4::Credentials;

const ACCESS_KEY_ID: &str = "aws_access_key_id";
const SECRET_ACCESS_KEY: &str = "aws_secret_access_key";
const ROLE_ARN: &str = "role_arn";
const TOKEN_FILE: &str = "web_identity_token_file";
/// The session name CloudTrail shows for our calls.
const SESSION_NAME: &str = "boot-image-controller";

/// A role to assume, and the file the kubelet keeps a fresh ServiceAccount token in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebIdentity {
    pub role_arn: String,
    pub token_file: String,
}

/// What a credentials Secret holds.
#[derive(Debug, PartialEq, Eq)]
pub enum SecretCredentials {
    Keys(Credentials),
    WebIdentity(WebIdentity),
}

/// Reads a credentials Secret's data (key to text); why it holds no credentials otherwise.
pub fn read_secret(data: &BTreeMap<String, String>) -> Result<SecretCredentials, String> {
    let profile = data
        .get("credentials")
        .map_or_else(Default::default, |t| default_profile(t));
    let value = |key: &str| {
        [data.get(key), profile.get(key)]
            .into_iter()
            .flatten()
            .map(|v| v.trim())
            .find(|v| !v.is_empty())
            .map(str::to_string)
    };
    if let (Some(role_arn), Some(token_file)) = (value(ROLE_ARN), value(TOKEN_FILE)) {
        return Ok(SecretCredentials::WebIdentity(WebIdentity {
            role_arn,
            token_file,
        }));
    }
    match (value(ACCESS_KEY_ID), value(SECRET_ACCESS_KEY)) {
        (Some(access_key_id), Some(secret_access_key)) => {
            Ok(SecretCredentials::Keys(Credentials {
                access_key_id,
                secret_access_key,
                session_token: None,
            }))
        }
        _ => Err(format!(
            "neither {ACCESS_KEY_ID} and {SECRET_ACCESS_KEY} nor {ROLE_ARN} and {TOKEN_FILE}, \
             as keys or in the [default] profile of its credentials key"
        )),
    }
}

/// The `[default]` profile of an AWS shared credentials file.
fn default_profile(text: &str) -> BTreeMap<String, String> {
    let mut section = None;
    let mut values = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.trim());
        } else if let Some((key, value)) = line.split_once('=')
            && section == Some("default")
            && !line.starts_with(['#', ';'])
        {
            values.insert(key.trim().to_string(), value.trim().to_string());
        }
    }
    values
}

/// The parameters of AssumeRoleWithWebIdentity (AWS STS API reference).
pub fn assume_role_params(
    identity: &WebIdentity,
    token: &str,
    duration: Duration,
) -> Vec<(String, String)> {
    [
        ("Action", "AssumeRoleWithWebIdentity"),
        ("Version", "2011-06-15"),
        ("RoleArn", identity.role_arn.as_str()),
        ("RoleSessionName", SESSION_NAME),
        ("WebIdentityToken", token.trim()),
        ("DurationSeconds", &duration.as_secs().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// STS's refusals (`AccessDenied`, `ExpiredTokenException`, `InvalidIdentityToken`...): any
/// answer of 4xx but throttling.
pub fn refused(error: Ec2Error) -> Ec2Error {
    match error {
        Ec2Error::Refused { code, message }
        | Ec2Error::Failed {
            status: 400..=499,
            code,
            message,
        } => Ec2Error::StsRefused { code, message },
        other => other,
    }
}

/// The temporary credentials of an AssumeRoleWithWebIdentity answer, and their expiry.
pub fn parse_assumed_role(body: &str) -> Result<(Credentials, jiff::Timestamp), Ec2Error> {
    let malformed = |what: &str| Ec2Error::Malformed(format!("STS answer: {what}"));
    let doc = roxmltree::Document::parse(body).map_err(|e| malformed(&e.to_string()))?;
    let node = (doc.descendants())
        .find(|n| n.tag_name().name() == "Credentials")
        .ok_or_else(|| malformed("no Credentials"))?;
    let text = |name: &str| child_text(node, name).filter(|t| !t.is_empty());
    let (Some(id), Some(secret), Some(token), Some(expiration)) = (
        text("AccessKeyId"),
        text("SecretAccessKey"),
        text("SessionToken"),
        text("Expiration"),
    ) else {
        return Err(malformed("incomplete Credentials"));
    };
    let expiration = expiration
        .parse::<jiff::Timestamp>()
        .map_err(|e| malformed(&format!("Expiration {expiration:?}: {e}")))?;
    let credentials = Credentials {
        access_key_id: id,
        secret_access_key: secret,
        session_token: Some(token),
    };
    Ok((credentials, expiration))
}

/// Temporary credentials of one web identity, and when to replace them.
pub struct Session {
    identity: WebIdentity,
    pub credentials: Credentials,
    refresh_at: Instant,
}

impl Session {
    /// Credentials STS said at `now` (on our clock, received at `received`) expire at
    /// `expiration`: replaced once four fifths of that life has passed, 12 minutes before the
    /// end of an hour's, as the kubelet renews the token itself at 80% of its life.
    pub fn new(
        identity: WebIdentity,
        credentials: Credentials,
        expiration: jiff::Timestamp,
        now: jiff::Timestamp,
        received: Instant,
    ) -> Session {
        let life = Duration::try_from(expiration.duration_since(now)).unwrap_or_default();
        Session {
            identity,
            credentials,
            refresh_at: received + life.mul_f64(0.8),
        }
    }

    /// Whether these credentials still serve `identity` at `now`: the Secret may name another
    /// role or token file since.
    pub fn serves(&self, identity: &WebIdentity, now: Instant) -> bool {
        self.identity == *identity && now < self.refresh_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        (pairs.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn identity() -> WebIdentity {
        WebIdentity {
            role_arn: "arn:aws:iam::123456789012:role/bic".into(),
            token_file: "/var/run/secrets/openshift/serviceaccount/token".into(),
        }
    }

    #[test]
    fn the_secret_ccoctl_writes_is_a_web_identity() {
        // ccoctl's secretManifestsTemplate, as `stringData.credentials` holds it.
        let ini = "[default]\nsts_regional_endpoints = regional\n\
                   role_arn = arn:aws:iam::123456789012:role/bic\n\
                   web_identity_token_file = /var/run/secrets/openshift/serviceaccount/token";
        let read = read_secret(&data(&[("credentials", ini)]));
        assert_eq!(read, Ok(SecretCredentials::WebIdentity(identity())));
        // The MCO's form: the two as keys of their own.
        let keys = data(&[
            (ROLE_ARN, "arn:aws:iam::123456789012:role/bic"),
            (
                TOKEN_FILE,
                "/var/run/secrets/openshift/serviceaccount/token\n",
            ),
        ]);
        assert_eq!(
            read_secret(&keys),
            Ok(SecretCredentials::WebIdentity(identity()))
        );
    }

    #[test]
    fn the_secret_of_mint_and_passthrough_mode_holds_keys() {
        let keys = |id: &str| {
            SecretCredentials::Keys(Credentials {
                access_key_id: id.into(),
                secret_access_key: "s3cr3t".into(),
                session_token: None,
            })
        };
        let both = data(&[
            (ACCESS_KEY_ID, "AKID"),
            (SECRET_ACCESS_KEY, "s3cr3t\n"),
            ("credentials", "[default]\naws_access_key_id = OTHER\n"),
        ]);
        assert_eq!(read_secret(&both), Ok(keys("AKID")), "keys first");
        let ini = "# comment\n[other]\naws_access_key_id = NO\n[default]\n\
                   aws_access_key_id=AKID\naws_secret_access_key = s3cr3t\n";
        assert_eq!(
            read_secret(&data(&[("credentials", ini)])),
            Ok(keys("AKID"))
        );
    }

    #[test]
    fn a_secret_without_either_says_what_it_lacks() {
        for pairs in [
            &[(ACCESS_KEY_ID, "AKID")][..],
            &[(ROLE_ARN, "arn")][..],
            &[(
                "credentials",
                "[other]\nrole_arn = a\nweb_identity_token_file = f",
            )][..],
            &[("credentials", "; role_arn = a\n")][..],
        ] {
            let why = read_secret(&data(pairs)).unwrap_err();
            assert!(
                why.contains(ROLE_ARN) && why.contains(SECRET_ACCESS_KEY),
                "{why}"
            );
        }
    }

    #[test]
    fn the_assume_role_answer_gives_temporary_credentials() {
        // The example answer of the STS API reference, AssumeRoleWithWebIdentity.
        let body = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>amzn1.account.AF6RHO7KZU5XRVQJGXK6HB56KR2A</SubjectFromWebIdentityToken>
    <Credentials>
      <SessionToken>AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE</SessionToken>
      <SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY</SecretAccessKey>
      <Expiration>2014-10-24T23:00:23Z</Expiration>
      <AccessKeyId>ASgeIAIOSFODNN7EXAMPLE</AccessKeyId>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>"#;
        let (credentials, expiration) = parse_assumed_role(body).unwrap();
        assert_eq!(credentials.access_key_id, "ASgeIAIOSFODNN7EXAMPLE");
        assert_eq!(
            credentials.session_token.as_deref(),
            Some("AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE")
        );
        assert_eq!(expiration.to_string(), "2014-10-24T23:00:23Z");
        let truncated = body
            .replace("<SessionToken>", "<Other>")
            .replace("</SessionToken>", "</Other>");
        assert!(matches!(
            parse_assumed_role(&truncated),
            Err(Ec2Error::Malformed(_))
        ));
    }

    #[test]
    fn an_error_answer_of_sts_is_a_refusal_unless_throttled() {
        let expired = "<ErrorResponse><Error><Type>Sender</Type><Code>ExpiredTokenException</Code>\
                       <Message>Token expired</Message></Error></ErrorResponse>";
        let refusal = refused(super::super::query::parse_error(400, expired));
        assert!(
            matches!(&refusal, Ec2Error::StsRefused { code, .. } if code == "ExpiredTokenException")
        );
        assert_eq!(Ec2Error::outcome(&Err::<(), _>(refusal.clone())), "refused");
        assert!(!refusal.is_transient());
        let throttled = refused(Ec2Error::Throttled {
            code: "Throttling".into(),
            message: String::new(),
        });
        assert!(throttled.is_transient());
    }

    #[test]
    fn credentials_are_replaced_at_four_fifths_of_their_life_or_for_another_identity() {
        let received = Instant::now();
        let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let expiration: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let credentials = Credentials {
            access_key_id: "ASIA".into(),
            secret_access_key: "s".into(),
            session_token: Some("t".into()),
        };
        let session = Session::new(identity(), credentials.clone(), expiration, now, received);
        assert!(session.serves(&identity(), received + Duration::from_secs(47 * 60)));
        assert!(!session.serves(&identity(), received + Duration::from_secs(48 * 60)));
        let other = WebIdentity {
            role_arn: "arn:aws:iam::123456789012:role/other".into(),
            ..identity()
        };
        assert!(!session.serves(&other, received));
        // Already expired on our clock (a skewed STS): replaced at the next use.
        let past = Session::new(identity(), credentials, now, expiration, received);
        assert!(!past.serves(&identity(), received));
    }
}
