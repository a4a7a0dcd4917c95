//! The vSphere Web Services API (SOAP over HTTP at `/sdk`): envelopes, one session cookie, faults.
//!
//! Chosen over the REST APIs because the OVF import, marking as template and renaming that
//! vSphere templates need exist only there (vcsim serves it whole), and its XML is read with the
//! one XML reader the project already has. Only the few calls of [`super::client`] are spoken.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;

use super::VcenterError;
use crate::http_client::{Connector, error_chain};

/// An answer larger than this is refused (property answers of a few objects are kilobytes).
const MAX_BODY: usize = 8 << 20;
/// The API version we speak: every call we make exists unchanged since vSphere 6.5.
const SOAP_ACTION: &str = "urn:vim25/6.5";
const SESSION_COOKIE: &str = "vmware_soap_session";

/// A managed object reference: `type` and value, e.g. `VirtualMachine` `vm-42`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MoRef {
    pub kind: String,
    pub value: String,
}

impl MoRef {
    /// This reference as the element `tag` of a request.
    pub fn xml(&self, tag: &str) -> String {
        format!(
            r#"<{tag} type="{}">{}</{tag}>"#,
            escape(&self.kind),
            escape(&self.value)
        )
    }

    /// The reference an element holds (`<returnval type="VirtualMachine">vm-42</returnval>`).
    pub fn from_node(node: roxmltree::Node<'_, '_>) -> Option<Self> {
        Some(MoRef {
            kind: node.attribute("type")?.to_string(),
            value: node.text()?.trim().to_string(),
        })
    }
}

/// Text escaped for an XML element or attribute.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// The first descendant of `node` with the local name `name`.
pub fn child<'a, 'i>(node: roxmltree::Node<'a, 'i>, name: &str) -> Option<roxmltree::Node<'a, 'i>> {
    node.descendants()
        .find(|n| n.is_element() && n.tag_name().name() == name)
}

/// The text of the first descendant of `node` named `name`.
pub fn text_of<'a>(node: roxmltree::Node<'a, '_>, name: &str) -> Option<&'a str> {
    child(node, name)?.text()
}

/// One logged-in connection to a vCenter's `/sdk`.
pub struct Session {
    http: Client<Connector, Full<Bytes>>,
    pub sdk: Uri,
    call_timeout: Duration,
    cookie: Mutex<Option<String>>,
}

impl Session {
    pub fn new(sdk: Uri, connector: Connector, call_timeout: Duration) -> Self {
        Session {
            http: Client::builder(TokioExecutor::new()).build(connector),
            sdk,
            call_timeout,
            cookie: Mutex::new(None),
        }
    }

    /// A request to `uri` with our user agent and the session's cookie: the SOAP calls, and the
    /// disk uploads of an import, which authenticate with it too.
    pub fn request(&self, method: &str, uri: &str) -> hyper::http::request::Builder {
        let request = (Request::builder().method(method).uri(uri))
            .header("user-agent", crate::api_client::user_agent());
        match self.cookie.lock().clone() {
            Some(cookie) => request.header("cookie", format!("{SESSION_COOKIE}={cookie}")),
            None => request,
        }
    }

    /// Calls `method` on `this` with `arguments` (already XML, in schema order) and reads the
    /// answer with `read`, given its root; a SOAP fault becomes [`VcenterError::Fault`].
    pub async fn call<T>(
        &self,
        method: &str,
        this: &MoRef,
        arguments: &str,
        read: impl FnOnce(roxmltree::Node<'_, '_>) -> Result<T, VcenterError>,
    ) -> Result<T, VcenterError> {
        let envelope = format!(
            concat!(
                r#"<?xml version="1.0" encoding="UTF-8"?>"#,
                r#"<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" "#,
                r#"xmlns:xsd="http://www.w3.org/2001/XMLSchema" "#,
                r#"xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">"#,
                r#"<soapenv:Body><{method} xmlns="urn:vim25">{this}{arguments}</{method}>"#,
                "</soapenv:Body></soapenv:Envelope>"
            ),
            method = method,
            this = this.xml("_this"),
            arguments = arguments,
        );
        let request = (self.request("POST", &self.sdk.to_string()))
            .header("content-type", "text/xml; charset=utf-8")
            .header("soapaction", SOAP_ACTION)
            .body(Full::new(Bytes::from(envelope)))
            .map_err(|e| VcenterError::Protocol(e.to_string()))?;
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| VcenterError::Unreachable(error_chain(&e)))?;
            if let Some(cookie) = session_cookie(response.headers()) {
                *self.cookie.lock() = Some(cookie);
            }
            let status = response.status().as_u16();
            let bytes = Limited::new(response.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| VcenterError::Unreachable(e.to_string()))?
                .to_bytes();
            Ok::<_, VcenterError>((status, String::from_utf8_lossy(&bytes).into_owned()))
        };
        let (status, text) = tokio::time::timeout(self.call_timeout, exchange)
            .await
            .map_err(|_| VcenterError::TimedOut(self.call_timeout))??;
        let doc = roxmltree::Document::parse(&text);
        if let Some(fault) = doc.as_ref().ok().and_then(fault_of) {
            return Err(fault);
        }
        if !(200..300).contains(&status) {
            return Err(VcenterError::Protocol(format!(
                "vCenter answered HTTP {status}"
            )));
        }
        let doc = doc.map_err(|e| VcenterError::Protocol(format!("not XML: {e}")))?;
        read(doc.root())
    }
}

fn session_cookie(headers: &hyper::HeaderMap) -> Option<String> {
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| {
            let first = v.split(';').next()?.trim();
            let value = first.strip_prefix(SESSION_COOKIE)?.strip_prefix('=')?;
            Some(value.to_string())
        })
}

/// The SOAP fault of an answer, if it is one: its fault type (`InvalidLogin`, `DuplicateName`,
/// ...) and message.
fn fault_of(doc: &roxmltree::Document<'_>) -> Option<VcenterError> {
    let fault = child(doc.root(), "Fault")?;
    let message = text_of(fault, "faultstring")
        .unwrap_or("")
        .trim()
        .to_string();
    let kind = child(fault, "detail")
        .and_then(|d| d.children().find(roxmltree::Node::is_element))
        .map(|n| {
            n.attribute(("http://www.w3.org/2001/XMLSchema-instance", "type"))
                .unwrap_or(n.tag_name().name())
                .trim_end_matches("Fault")
                .to_string()
        })
        .unwrap_or_default();
    Some(VcenterError::Fault { kind, message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_carry_their_type_and_message() {
        let text = r#"<?xml version="1.0"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body><soapenv:Fault><faultcode>ServerFaultCode</faultcode><faultstring>Login failure</faultstring><detail><InvalidLoginFault xmlns="urn:vim25" xsi:type="InvalidLogin"></InvalidLoginFault></detail></soapenv:Fault></soapenv:Body></soapenv:Envelope>"#;
        let doc = roxmltree::Document::parse(text).unwrap();
        let Some(VcenterError::Fault { kind, message }) = fault_of(&doc) else {
            panic!("not read as a fault");
        };
        assert_eq!(
            (kind.as_str(), message.as_str()),
            ("InvalidLogin", "Login failure")
        );
        assert!(fault_of(&roxmltree::Document::parse("<a/>").unwrap()).is_none());
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape(r#"a<b&"c'"#), "a&lt;b&amp;&quot;c&apos;");
    }
}
