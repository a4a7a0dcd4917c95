//! Sends DescribeImages to EC2 over HTTPS (or plain HTTP to a local simulator), signed with
//! SigV4, bounded in time and retried with backoff when EC2 throttles.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::query::{self, Ec2Error};
use super::sigv4::{self, Credentials};
use super::sts::{self, WebIdentity};
use crate::facts::ec2::AmiFacts;
use crate::http_client::{Connector, Egress, error_chain, jittered};

/// An answer larger than this is refused rather than buffered (a few hundred marketplace AMIs
/// make well under 1 MiB).
const MAX_BODY: usize = 16 << 20;
/// Pages of one search followed at most; each page of an unbounded answer holds up to 1,000.
const MAX_PAGES: usize = 10;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// One HTTP exchange, from sending to the last byte of the answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// Attempts of one call when EC2 throttles or fails transiently.
const ATTEMPTS: u32 = 4;
/// The first backoff after a throttled attempt; doubled, with jitter, for each further one.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// A DescribeImages client for any region, and the STS calls that get it temporary
/// credentials: one HTTP client (one connector, so one proxy and one set of CA roots) for both.
#[derive(Clone)]
pub struct Ec2Client {
    http: Client<Connector, Full<Bytes>>,
    ec2: Service,
    sts: Service,
}

/// An AWS service called: its SigV4 signing name, and where every region's requests go when
/// given (`--ec2-endpoint`, `--sts-endpoint`: a simulator, a VPC endpoint).
#[derive(Clone)]
struct Service {
    name: &'static str,
    endpoint: Option<Uri>,
}

impl Service {
    /// `name`'s requests, all sent to `endpoint` when one is given (it must name a host).
    fn new(name: &'static str, endpoint: Option<&str>) -> Result<Self, Ec2Error> {
        let parse = |e: &str| {
            (e.parse::<Uri>().ok())
                .filter(|u| u.host().is_some())
                .ok_or_else(|| Ec2Error::Malformed(format!("invalid endpoint {e:?}")))
        };
        let endpoint = endpoint.map(parse).transpose()?;
        Ok(Service { name, endpoint })
    }

    /// Where `region`'s requests go; none for a name that is not an AWS region, which is never
    /// put in a host (nor sent to a given endpoint, which then could not be told from AWS).
    fn url(&self, region: &str) -> Result<Uri, Ec2Error> {
        let aws = crate::facts::region::endpoint(self.name, region)
            .ok_or_else(|| Ec2Error::Malformed(format!("{region:?} is not an AWS region name")))?;
        match &self.endpoint {
            Some(endpoint) => Ok(endpoint.clone()),
            None => {
                (aws.parse()).map_err(|_| Ec2Error::Malformed(format!("invalid endpoint {aws}")))
            }
        }
    }
}

impl Ec2Client {
    /// A client through `egress` (the cluster's proxy and trusted CA bundle), sending to
    /// `endpoint` and `sts_endpoint` when given rather than to `https://<service>.<region>.<suffix>`.
    pub fn new(
        endpoint: Option<&str>,
        sts_endpoint: Option<&str>,
        egress: &Egress,
    ) -> Result<Self, Ec2Error> {
        let https = crate::http_client::connector(CONNECT_TIMEOUT, "EC2", &[], egress)
            .map_err(|e| Ec2Error::Malformed(e.to_string()))?;
        Ok(Ec2Client {
            http: Client::builder(TokioExecutor::new()).build(https),
            ec2: Service::new("ec2", endpoint)?,
            sts: Service::new("sts", sts_endpoint)?,
        })
    }

    /// Temporary credentials for `identity`'s role from `region`'s STS, with `token` (the
    /// ServiceAccount token just read from its file), and when they expire. The call is not
    /// signed: the token is the proof (AWS STS API reference, AssumeRoleWithWebIdentity).
    pub async fn assume_role_with_web_identity(
        &self,
        region: &str,
        identity: &WebIdentity,
        token: &str,
        duration: std::time::Duration,
    ) -> Result<(Credentials, jiff::Timestamp), Ec2Error> {
        let params = sts::assume_role_params(identity, token, duration);
        let body = self
            .call(&self.sts, region, None, &params)
            .await
            .map_err(sts::refused)?;
        sts::parse_assumed_role(&body)
    }

    /// The AMIs DescribeImages shows in `region` for each of `requests` (its parameters), page
    /// after page.
    pub async fn describe(
        &self,
        region: &str,
        credentials: &Credentials,
        requests: impl IntoIterator<Item = Vec<(String, String)>>,
    ) -> Result<Vec<AmiFacts>, Ec2Error> {
        let mut images = Vec::new();
        for params in requests {
            let mut token: Option<String> = None;
            for _ in 0..MAX_PAGES {
                let mut page_params = params.clone();
                if let Some(token) = token.take() {
                    page_params.push(("NextToken".into(), token));
                }
                let body = (self.call(&self.ec2, region, Some(credentials), &page_params)).await?;
                let page = query::parse_images(&body, region)?;
                images.extend(page.images);
                token = page.next_token;
                if token.is_none() {
                    break;
                }
            }
        }
        Ok(images)
    }

    /// One call, retried with backoff while EC2 throttles or fails transiently.
    async fn call(
        &self,
        service: &Service,
        region: &str,
        credentials: Option<&Credentials>,
        params: &[(String, String)],
    ) -> Result<String, Ec2Error> {
        let mut attempt = 0;
        loop {
            match self.exchange(service, region, credentials, params).await {
                Err(e) if e.is_transient() && attempt + 1 < ATTEMPTS => {
                    let backoff = FIRST_BACKOFF.saturating_mul(1 << attempt.min(10));
                    tracing::debug!(region, service = service.name, error = %e, ?backoff, "call failed; retrying");
                    tokio::time::sleep(jittered(backoff)).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// One POST of the Query API `params` to `service` in `region`, signed when `credentials`
    /// are given.
    async fn exchange(
        &self,
        service: &Service,
        region: &str,
        credentials: Option<&Credentials>,
        params: &[(String, String)],
    ) -> Result<String, Ec2Error> {
        let uri = service.url(region)?;
        let endpoint = uri.to_string();
        let host = uri.authority().map(|a| a.as_str()).unwrap_or_default();
        let body = sigv4::form(params);
        let content_type = "application/x-www-form-urlencoded; charset=utf-8";
        let amz_date = jiff::Timestamp::now()
            .strftime("%Y%m%dT%H%M%SZ")
            .to_string();
        let signed = credentials.map(|credentials| {
            sigv4::sign(
                &sigv4::Request {
                    method: "POST",
                    host,
                    path: uri.path(),
                    query: "",
                    headers: &[("content-type", content_type)],
                    payload: body.as_bytes(),
                },
                credentials,
                region,
                service.name,
                &amz_date,
            )
        });
        let mut request = Request::post(uri.clone())
            .header("host", host)
            .header("content-type", content_type)
            .header("user-agent", crate::api_client::user_agent());
        for (name, value) in signed.into_iter().flatten() {
            request = request.header(name, value);
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| Ec2Error::Malformed(e.to_string()))?;
        let unreachable = |message| Ec2Error::Unreachable {
            endpoint: endpoint.clone(),
            message,
        };
        let exchange = async {
            let response = self.http.request(request).await;
            let response = response.map_err(|e| unreachable(error_chain(&e)))?;
            let status = response.status().as_u16();
            let body = Limited::new(response.into_body(), MAX_BODY).collect().await;
            let body = body.map_err(|e| unreachable(e.to_string()))?;
            Ok((status, body.to_bytes()))
        };
        let (status, bytes) = tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .map_err(|_| Ec2Error::TimedOut(CALL_TIMEOUT))??;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if (200..300).contains(&status) {
            Ok(text)
        } else {
            Err(query::parse_error(status, &text))
        }
    }
}
