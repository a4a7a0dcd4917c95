//! AWS Signature Version 4 for the one kind of request we send: an EC2 Query API POST.
//!
//! Written here rather than taken from the AWS SDK for Rust: the SDK's EC2 crate alone costs
//! minutes of compilation on the 2-core machines the project is built on
//! (docs/decisions/own-ec2-client.md), for one read-only call. The algorithm is AWS's published one (canonical
//! request, string to sign, derived key); the tests check it against AWS's own example.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use ring::{digest, hmac};

/// Access keys as the credentials Secret holds them.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Temporary credentials (STS) come with a session token.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    // Never print the secret, even in a debug log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// A request to sign: everything the signature covers.
pub struct Request<'a> {
    pub method: &'a str,
    pub host: &'a str,
    pub path: &'a str,
    /// Already in canonical form (sorted, encoded), or empty.
    pub query: &'a str,
    /// Headers besides `host` and `x-amz-date`, lowercase names.
    pub headers: &'a [(&'a str, &'a str)],
    pub payload: &'a [u8],
}

/// The headers to add to `request`: `x-amz-date`, the session token if any, `authorization`.
pub fn sign(
    request: &Request<'_>,
    credentials: &Credentials,
    region: &str,
    service: &str,
    amz_date: &str,
) -> Vec<(&'static str, String)> {
    let date = &amz_date[..amz_date.len().min(8)];
    // The headers added are signed too.
    let mut out = vec![("x-amz-date", amz_date.to_string())];
    if let Some(token) = &credentials.session_token {
        out.push(("x-amz-security-token", token.clone()));
    }
    let added = out.iter().map(|(k, v)| (*k, v.as_str()));
    let mut headers: Vec<(String, String)> = (request.headers.iter().copied())
        .chain([("host", request.host)])
        .chain(added)
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    headers.sort();
    let signed_headers = headers
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let canonical_request = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        request.method,
        request.path,
        request.query,
        canonical_headers,
        signed_headers,
        hex::encode(digest::digest(&digest::SHA256, request.payload).as_ref()),
    );
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(digest::digest(&digest::SHA256, canonical_request.as_bytes()).as_ref())
    );
    let key = signing_key(&credentials.secret_access_key, date, region, service);
    let signature = hex::encode(hmac::sign(&key, string_to_sign.as_bytes()).as_ref());
    out.push((
        "authorization",
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, \
             Signature={signature}",
            credentials.access_key_id
        ),
    ));
    out
}

fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> hmac::Key {
    let step = |key: &[u8], data: &str| {
        hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
    };
    let k_date = step(format!("AWS4{secret}").as_bytes(), date);
    let k_region = step(k_date.as_ref(), region);
    let k_service = step(k_region.as_ref(), service);
    let k_signing = step(k_service.as_ref(), "aws4_request");
    hmac::Key::new(hmac::HMAC_SHA256, k_signing.as_ref())
}

/// RFC 3986 encoding of a query value, as SigV4 wants it: everything but unreserved bytes.
const ENCODED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A form body (or canonical query) from parameters: encoded and sorted by name.
pub fn form(params: &[(String, String)]) -> String {
    let encode = |s: &str| utf8_percent_encode(s, ENCODED).to_string();
    let mut encoded: Vec<(String, String)> = (params.iter())
        .map(|(k, v)| (encode(k), encode(v)))
        .collect();
    encoded.sort();
    let pairs: Vec<String> = encoded.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's worked example of SigV4 (IAM `ListUsers`, 2015-08-30), from the AWS General
    /// Reference "Signature Version 4 signing process" examples.
    #[test]
    fn signs_aws_published_example() {
        let credentials = Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        };
        let request = Request {
            method: "GET",
            host: "iam.amazonaws.com",
            path: "/",
            query: "Action=ListUsers&Version=2010-05-08",
            headers: &[(
                "content-type",
                "application/x-www-form-urlencoded; charset=utf-8",
            )],
            payload: b"",
        };
        let headers = sign(
            &request,
            &credentials,
            "us-east-1",
            "iam",
            "20150830T123600Z",
        );
        let authorization = &headers
            .iter()
            .find(|(k, _)| *k == "authorization")
            .unwrap()
            .1;
        assert_eq!(
            authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, \
             Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        );
    }

    #[test]
    fn a_session_token_is_sent_and_signed() {
        let credentials = Credentials {
            access_key_id: "AKID".into(),
            secret_access_key: "secret".into(),
            session_token: Some("token".into()),
        };
        let request = Request {
            method: "POST",
            host: "ec2.us-east-1.amazonaws.com",
            path: "/",
            query: "",
            headers: &[],
            payload: b"Action=DescribeImages",
        };
        let headers = sign(
            &request,
            &credentials,
            "us-east-1",
            "ec2",
            "20260101T000000Z",
        );
        assert!(headers.contains(&("x-amz-security-token", "token".into())));
        let authorization = &headers.last().unwrap().1;
        assert!(
            authorization.contains("SignedHeaders=host;x-amz-date;x-amz-security-token,"),
            "{authorization}"
        );
        assert!(!format!("{credentials:?}").contains("secret"));
    }

    #[test]
    fn forms_encode_reserved_bytes_and_sort() {
        let params = [
            ("Filter.1.Value.1".to_string(), "*a b/c*".to_string()),
            ("Action".to_string(), "DescribeImages".to_string()),
        ];
        assert_eq!(
            form(&params),
            "Action=DescribeImages&Filter.1.Value.1=%2Aa%20b%2Fc%2A"
        );
    }
}
